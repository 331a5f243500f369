"""`envbuilder lock`: resolve, render the two-stage pyproject, run uv lock, write the record."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from envbuilder.archlist import ArchList
from envbuilder.choices import (
    DEFAULT_MODE,
    DEFAULT_SOURCE,
    DEFAULT_TORCH_INDEX,
    LOCK_MODES,
    SOURCES,
    TORCH_INDEXES,
    LockMode,
)
from envbuilder.cli.options import (
    arch_list_option,
    ca_bundle_option,
    choice,
    chosen_row,
    deprecated_alias,
    host_options,
    interpreter_option,
    json_option,
    parallel_option,
    row_options,
    timings_option,
)
from envbuilder.console import emit_json, stderr_console, styled
from envbuilder.host.torchprobe import probe_torch, read_torch_facts
from envbuilder.lock import LockOptions, run_lock
from envbuilder.lock.batch import DEFAULT_PARALLEL
from envbuilder.matrix import load_matrix
from envbuilder.resolve import ResolveRequest, lock_glibc, parse_set
from envbuilder.resolve.host import host_facts


def _relock_command(out: Path) -> str:
    """The user's own lock command without --check/--json/--no-wait (the fix line of a stale --check)."""
    import shlex

    ctx = click.get_current_context()
    words = ["envbuilder", "lock"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in ("check", "as_json", "no_wait", "output", "timings"):
            continue
        value = ctx.params.get(param.name or "")
        if value == param.default or value in (None, (), False):
            continue
        flag = max(param.opts, key=len)
        for v in value if isinstance(value, tuple) else [value]:
            words += [flag] if v is True else [flag, str(v)]
    return shlex.join([*words, "-o", str(out)])


@click.command()
@row_options
@click.option("--all", "all_rows", is_flag=True,
              help="Lock every matrix row into OUTPUT/<tag>/ (default OUTPUT: locks), several at a time.")
@parallel_option("rows locked", note=f"with --all (default {DEFAULT_PARALLEL})")
@deprecated_alias("--jobs", "--parallel", "parallel", type=click.IntRange(1, 64))
@click.option("--online", is_flag=True,
              help="Skip the offline-first attempt: always ask the package index.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Lock directory to write (default: build/<tag>).")
@click.option("--python", default=None, help="Target Python MAJOR.MINOR (default: newest the row allows).")
@click.option("--cuda", default=None, help="CUDA major.minor (default: the row's).")
@click.option("--torch", default=None, help="torch version (default: the row's).")
@click.option("--torch-index", type=choice(TORCH_INDEXES), default=DEFAULT_TORCH_INDEX, show_default=True,
              help="pypi: PyPI's torch wheel when it has the row's CUDA major; pytorch: the exact CUDA variant "
                   "from download.pytorch.org.")
@host_options(detect=True)
@arch_list_option()
@click.option("--set", "sets", multiple=True, metavar="NAME==VERSION",
              help="Override a component's version (NAME==none leaves it out). Repeatable.")
@click.option("--source", type=choice(SOURCES), default=DEFAULT_SOURCE, show_default=True,
              help="git renders [tool.uv.sources] git tags for NeMo, NeMo-Run, Megatron-LM, mamba, causal-conv1d.")
@click.option("--mode", type=choice(LOCK_MODES), default=DEFAULT_MODE, show_default=True,
              help="hermetic: the whole stack from the lock on a CUDA base; ngc-base: on the row's NGC container, "
                   "keeping its torch; host-torch: on top of --interpreter's torch (NGC, cluster modules), "
                   "installed with `envbuilder install --system-site-packages`.")
@interpreter_option("that already has torch, with --mode host-torch (its Python, CUDA and torch are recorded and "
                    "never replaced)")
@click.option("--host-torch-facts", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="With --mode host-torch, instead of --interpreter: the JSON that "
                   "`python -m envbuilder.host.torchprobe` printed on the target (lock on a machine with network "
                   "for a torch that only the target has).")
@click.option("--glibc", default=None,
              help="glibc of the target base OS (2.35 Ubuntu 22.04, 2.36 Debian 12, 2.39 Ubuntu 24.04). "
                   "Default: the row's (its container's base OS, for rows that lock only there), else 2.35.")
@click.option("--allow-minor-compat", is_flag=True,
              help="Accept a driver older than the CUDA minimum when CUDA minor-version compatibility covers it.")
@click.option("--find-links", multiple=True, type=click.Path(path_type=Path),
              help="Directory of local wheels; a wheel matching a stage-1 pin is copied into the lock dir.")
@ca_bundle_option()
@click.option("--allow-source-build/--no-source-build", "allow_source_build", default=True, show_default=True,
              help="--no-source-build: fail when a stage-2 kernel package has no prebuilt wheel for the chosen torch "
                   "(instead of compiling it in stage 2).")
@click.option("--check", is_flag=True, help="Exit 16 if re-locking would change the lock directory; write nothing.")
@click.option("--no-wait", is_flag=True,
              help="Exit 71 instead of waiting when another envbuilder run is writing the same -o.")
@json_option("Print the lock record as JSON on stdout.")
@timings_option
def lock(nemo: str | None, release: str | None, mbridge: str | None, all_rows: bool, parallel: int | None,
         online: bool, output: Path | None, python: str | None, cuda: str | None, torch: str | None,
         torch_index: str, driver: str | None, gpu: str | None, sm: str | None, no_detect: bool,
         arch_list: ArchList | None,
         sets: tuple[str, ...], source: str, mode: str, glibc: str | None, allow_minor_compat: bool,
         interpreter: Path | None, host_torch_facts: Path | None, find_links: tuple[Path, ...],
         ca_bundle: Path | None, allow_source_build: bool,
         check: bool, no_wait: bool, as_json: bool, timings: bool) -> None:
    """Lock a NeMo stack: pyproject.toml + uv.lock + envbuilder.lock.json."""
    console = stderr_console()
    named = [o for o in (nemo, release, mbridge) if o is not None]
    if all_rows and named:
        raise click.UsageError("pass one of --nemo TAG / --release YY.MM / --mbridge VERSION, or --all")
    if all_rows and (python or cuda or torch or sets):
        raise click.UsageError("--python/--cuda/--torch/--set pick one row's versions: not with --all")
    matrix = load_matrix()
    host = host_facts(matrix, driver=driver, gpu=gpu, sm=sm, detect=not no_detect)
    if (interpreter is not None or host_torch_facts is not None) and not LockMode(mode).on_interpreter:
        raise click.UsageError("--interpreter / --host-torch-facts go with --mode host-torch")
    if interpreter is not None and host_torch_facts is not None:
        raise click.UsageError("pass --interpreter or --host-torch-facts, not both")
    host_torch = (probe_torch(interpreter) if interpreter is not None
                  else read_torch_facts(host_torch_facts) if host_torch_facts is not None else None)

    def request(tag: str, option: str | None = None) -> ResolveRequest:
        row = matrix.find_row(name=tag)
        option = option or ("release" if row is not None and row.nemo is None else "nemo")
        target_glibc, glibc_from_row = lock_glibc(matrix, tag, option, glibc)
        return ResolveRequest(row=tag, row_option=option, python=python, cuda=cuda, torch=torch,
                              torch_index=torch_index, overrides=parse_set(sets), source=source, mode=LockMode(mode),
                              glibc=target_glibc, glibc_from_row=glibc_from_row, host=host,
                              allow_minor_compat=allow_minor_compat,
                              source_build="allow" if allow_source_build else "forbid", host_torch=host_torch,
                              arch_list=arch_list)

    base = LockOptions(output=output or Path("locks"), check=check, ca_bundle=ca_bundle,
                       find_links=list(find_links), offline_first=not online, wait=not no_wait)
    if all_rows:
        from envbuilder.cli.lock_all import run_lock_all

        run_lock_all(matrix, request, base.output, base, parallel or DEFAULT_PARALLEL, as_json, timings)
        return
    key, option = chosen_row(nemo, release, mbridge)
    req = request(key, option)
    out = output or Path("build") / key
    opts = replace(base, output=out, check_fix=_relock_command(out))
    with console.status(f"locking {option} {key}") as status:

        def progress(msg: str) -> None:
            status.update(msg)
            console.print(msg)  # messages quote extras like [dev]: the console never reads markup

        result = run_lock(matrix, req, opts, progress=progress)
    rec = result.record
    if check:
        console.print(styled("[green]{} is up to date[/green] (uv.lock sha256 {})", out, rec.lock_sha256[:12]))
    else:
        verb = "wrote" if result.changed else "unchanged"
        console.print(styled("[green]{}[/green] {}", verb, f"{out}: {len(rec.pins)} pins, python {rec.target.python}, "
                             f"cuda {rec.target.cuda}, uv.lock sha256 {rec.lock_sha256[:12]} "
                             f"(uv lock {result.timings.get('uv_lock', 0):.1f}s, total {result.timings['total']:.1f}s, "
                             f"{'resolved offline' if result.resolved_offline else 'resolved online'})"))
        for c in rec.constraints_added:
            console.print(f"added constraint {c['constraint']}: {c['reason']}")
    if as_json:
        emit_json(result.to_dict(), timings=timings)
