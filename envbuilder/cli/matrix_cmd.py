"""`envbuilder matrix list|show`: read the compatibility matrix.

`lock` imports this module for its row options: tables, refresh (urllib, ssl) and the stacks are
imported inside the commands that print or compute them, so a lock does not pay for them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from envbuilder.atomic import write_atomic
from envbuilder.choices import LockMode
from envbuilder.cli.options import (
    ca_bundle_option,
    chosen_row,
    json_option,
    lock_dir_input,
    row_options,
    timings_option,
)
from envbuilder.console import emit_json, stderr_console, stdout_console, styled
from envbuilder.errors import InvalidOptionError, MatrixBehindError, NetworkError
from envbuilder.matrix import Matrix, Release, load_matrix

F = TypeVar("F", bound=Callable[..., Any])

# `matrix show --json` keys, each from a release field or the CUDA table
SHOW_FIELDS = {
    "container": "container", "python": "python", "torch": "torch", "cuda": "cuda", "cudnn": "cudnn",
    "transformer_engine": "transformer_engine", "flash_attn": "flash_attn", "mamba_ssm": "mamba_ssm",
    "causal_conv1d": "causal_conv1d", "megatron_core": "megatron_core", "nemo_run": "nemo_run",
    "exclude_newer": "exclude_newer", "megatron_bridge": "megatron_bridge",
    "container_torch": "container_torch", "container_cuda": "container_cuda", "container_cudnn": "container_cudnn",
    "nvidia_resiliency_ext": "nvidia_resiliency_ext",
}


def row_summary(matrix: Matrix, row: Release) -> dict[str, Any]:
    out: dict[str, Any] = {"row": row.name, "nemo": row.nemo, "release": row.release, "status": row.status}
    sources: dict[str, str] = {}
    statuses: dict[str, str] = {}
    for key, fld in SHOW_FIELDS.items():
        fact = row.fact(fld)
        out[key] = fact.value
        sources[key] = fact.source
        statuses[key] = fact.status
    for key in ("release_date", "pypi_version", "torch_cuda_variant", "lightning", "cuda_toolkit"):
        statuses[key] = row.fact(key).status
        sources.setdefault(key, row.fact(key).source)
    if row.upstream_lock is not None:
        out["upstream_lock"] = {"file": row.upstream_lock.file, "source": row.upstream_lock.source,
                                "sha256": row.upstream_lock.sha256, "environment": row.upstream_lock.environment,
                                "packages": len(row.upstream_lock.pins)}
        sources["upstream_lock"] = row.upstream_lock.source
    from envbuilder.matrix.stacks import row_stacks

    stacks = row_stacks(matrix, row)
    # min_driver: the stack `lock` installs by default (hermetic); each stack's in "stacks"
    out["min_driver"] = stacks[LockMode.HERMETIC].min_driver.value
    sources["min_driver"] = stacks[LockMode.HERMETIC].min_driver.source
    # the glibc `lock` targets when --glibc is not given, and the row's fixes of upstream pins
    out["glibc"] = row.default_glibc.value
    sources["glibc"] = row.default_glibc.source
    statuses["glibc"] = row.default_glibc.status
    out["override_dependencies"] = [{"requirement": o.requirement, "reason": o.reason, "status": o.status,
                                     "text": o.text, "source": o.source} for o in row.override_dependencies]
    out["drop_packages"] = [{"package": d.package, "reason": d.reason, "status": d.status, "text": d.text,
                             "source": d.source} for d in row.drop_packages]
    out["exclude_newer_package"] = [{"package": c.package, "value": c.value, "status": c.status, "text": c.text,
                                     "source": c.source} for c in row.exclude_newer_package]
    out["stacks"] = {mode: st.to_dict() for mode, st in stacks.items()}
    out["sources"] = dict(sorted(sources.items()))
    out["statuses"] = dict(sorted(statuses.items()))
    out["torch_cuda_variant"] = row.torch_cuda_variant.value
    out["lightning"] = row.lightning.value
    out["pypi_version"] = row.pypi_version.value
    out["release_date"] = row.release_date.value
    out["notes"] = [{"severity": n.severity, "status": n.status, "text": n.text, "source": n.source}
                    for n in row.notes]
    out["prefer"] = row.prefer
    return out


@click.group()
def matrix() -> None:
    """Read the compatibility matrix."""


@matrix.command("list")
@click.option("--all", "include_test", is_flag=True, help="Include test-only profiles.")
@json_option()
def list_rows(include_test: bool, as_json: bool) -> None:
    """One line per matrix row (NeMo releases and Megatron-Bridge releases)."""
    from rich.table import Table

    m = load_matrix()
    rows = [r for r in m.releases if include_test or not r.test_only]
    if as_json:
        emit_json([row_summary(m, r) for r in rows])
        return
    table = Table("row", "status", "container", "mbridge", "torch", "cuda", "TE", "flash-attn", "mcore", "python",
                  "note")
    for r in rows:
        note = f"prefer {r.prefer}" if r.prefer else ""
        table.add_row(r.name, r.status, str(r.container), str(r.megatron_bridge) if r.megatron_bridge.known else "",
                      str(r.torch), str(r.cuda), str(r.transformer_engine), str(r.flash_attn), str(r.megatron_core),
                      str(r.python), note)
    stdout_console().print(table)


@matrix.command("show")
@row_options
@json_option()
def show(nemo: str | None, release: str | None, mbridge: str | None, as_json: bool) -> None:
    """Every fact of one row, with its source."""
    from rich.table import Table

    from envbuilder.resolve.resolver import find_row

    m = load_matrix()
    key, option = chosen_row(nemo, release, mbridge)
    row = find_row(m, key, option)
    summary = row_summary(m, row)
    if as_json:
        emit_json(summary)
        return
    table = Table("field", "value", "status", "source")
    for field in ["row", "nemo", "release", *SHOW_FIELDS, "min_driver", "glibc"]:
        # facts and sources hold brackets ("nemo-toolkit[all]", "[tool.uv]"): the console never parses markup
        table.add_row(field, str(summary[field]), summary["statuses"].get(field, ""), summary["sources"].get(field, ""))
    console = stdout_console()
    console.print(f"row {row.name}: {row.status}" + (
        f" ({len(row.unconfirmed())} facts no published table confirms: {', '.join(row.unconfirmed())})"
        if row.unconfirmed() else ""))
    console.print(table)
    if row.upstream_lock is not None:
        console.print(f"fidelity target: {row.upstream_lock.source} ({len(row.upstream_lock.pins)} packages, "
                      f"matrices/{row.upstream_lock.file}); compare a lock with `envbuilder matrix compare`")
    for mode, st in summary["stacks"].items():
        console.print(f"{mode}: torch {st['torch']}, CUDA {st['cuda_toolkit']}, cuDNN {st['cudnn']}, "
                      f"min driver {st['min_driver']} (minor-compat floor {st['minor_compat_floor']})")
    for n in summary["notes"]:
        colour = "yellow" if n["severity"] == "warn" else "blue"
        console.print(styled(f"[{colour}]{{}}[/]: {{}} ({{}})", n["severity"], n["text"], n["source"]))
    for o in summary["override_dependencies"]:
        console.print(f"override ({o['reason']}): {o['requirement']}: {o['text']} ({o['source']})")
    for d in summary["drop_packages"]:
        console.print(f"dropped ({d['reason']}): {d['package']}: {d['text']} ({d['source']})")
    for c in summary["exclude_newer_package"]:
        console.print(f"exclude-newer {c['package']} = {c['value']}: {c['text']} ({c['source']})")


@matrix.command("refresh")
@click.option("--snapshot", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="Read a recorded index snapshot (JSON) instead of PyPI.")
@click.option("--draft", "draft_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the unverified draft entries (TOML) to this file for review.")
@ca_bundle_option()
@click.option("--derive-from", "derive_from", default=None, metavar="SOURCE",
              help="Derive a row for each new Megatron-Bridge release from its tag in SOURCE (a git URL, clone "
                   "or mirror), as `matrix derive` does; with --write, merge the rows into matrices/.")
@click.option("--megatron-lm", default=None, metavar="SOURCE", help="With --derive-from: as `matrix derive`.")
@click.option("--te", "te_source", default=None, metavar="SOURCE", help="With --derive-from: as `matrix derive`.")
@click.option("--write", "write_rows", is_flag=True, help="With --derive-from: write the derived rows.")
@json_option()
def refresh_cmd(snapshot: Path | None, draft_path: Path | None, ca_bundle: Path | None, derive_from: str | None,
                megatron_lm: str | None, te_source: str | None, write_rows: bool, as_json: bool) -> None:
    """Upstream releases newer than the matrix, with unverified draft entries (and, with --derive-from, rows
    derived from each new Megatron-Bridge release); exit 83 when behind."""
    from rich.table import Table

    from envbuilder.matrix.refresh import WATCHED, fetch_snapshot, load_snapshot, refresh

    m = load_matrix()
    console = stderr_console()
    if snapshot is not None:
        snap, source = load_snapshot(snapshot), str(snapshot)
    else:
        try:
            snap = fetch_snapshot(sorted(WATCHED), ca_bundle, progress=lambda msg: console.print(msg, markup=False))
        except OSError as exc:
            raise NetworkError(f"cannot read the package index: {exc}",
                               "check network access (or --ca-bundle), or pass --snapshot FILE") from exc
        source = "pypi"
    result = refresh(m, snap, source)
    if draft_path is not None and result.draft:
        write_atomic(draft_path, result.draft)
    if write_rows and derive_from is None:
        raise InvalidOptionError("--write writes the rows --derive-from derives", "add --derive-from SOURCE")
    derived: list[dict[str, Any]] = []
    if derive_from is not None:
        derived = _derive_new(result.new, derive_from, megatron_lm, te_source, snapshot, ca_bundle, write_rows,
                              lambda msg: console.print(msg, markup=False))
    behind = None
    if result.behind:
        packages = sorted({n.package for n in result.new})
        behind = MatrixBehindError(f"the matrix is behind: {len(result.new)} newer upstream release(s) of "
                                   f"{', '.join(packages)}",
                                   "review the draft (--draft FILE), confirm each fact, and add the rows")
    if as_json:
        # one JSON document: the report, with the error when behind (the exit code says it too)
        emit_json({**result.to_dict(), "derived": derived, "error": behind.to_dict() if behind else None})
        if behind is not None:
            console.print(f"error: {behind.cause}", markup=False)
            raise SystemExit(behind.exit_code)
        return
    table = Table("package", "new version", "first upload", "newest in matrix")
    for n in result.new:
        table.add_row(n.package, n.version, n.first_upload, n.newest_known or "")
    stdout_console().print(table)
    if draft_path is not None and result.draft:
        console.print(f"draft written to {draft_path} (unverified)")
    for d in derived:
        console.print(f"megatron-bridge {d['version']}: " + (
            f"row {d['release']}" + (" written" if write_rows else " derived (not written: no --write)")
            if d["release"] else f"not derived ({d['error']['cause'] if d['error'] else ''})"), markup=False)
    if behind is not None:
        raise behind


def _derive_new(new: list[Any], source: str, megatron_lm: str | None, te: str | None, snapshot: Path | None,
                ca_bundle: Path | None, write: bool, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Rows for the new final Megatron-Bridge releases (the drift job's rows, not lists)."""
    from envbuilder.matrix.release_source import derive_new
    from envbuilder.matrix.rows_file import write_derived
    from envbuilder.paths import matrices_dir

    versions = [n.version for n in new if n.package == "megatron-bridge"]
    out = []
    for outcome in derive_new(versions, source, megatron_lm, te, snapshot, ca_bundle, progress):
        entry = outcome.to_dict()
        if outcome.row is not None and write:
            entry["written"] = [str(p) for p in write_derived(matrices_dir(), outcome.row)]
            progress(f"megatron-bridge {outcome.version}: wrote row {outcome.row.release}")
        out.append(entry)
    return out


@matrix.command("derive")
@click.option("--mbridge", "mbridge", default=None, metavar="VERSION",
              help="Megatron-Bridge release to derive a row for (its tag vVERSION), e.g. 0.6.0.")
@click.option("--nemo", "nemo_tag", default=None, metavar="TAG",
              help="NeMo tag: checked, and refused while NeMo's tags carry no uv.lock or container map.")
@click.option("--from", "source", default=None, metavar="SOURCE",
              help="The release: a git URL, a local clone or bare mirror, or a source archive (.tar.gz/.zip). "
                   "Default: the upstream repository's URL.")
@click.option("--megatron-lm", default=None, metavar="SOURCE",
              help="Megatron-LM clone, mirror or URL for the 3rdparty/Megatron-LM submodule commit "
                   "(default: the submodule's URL when --from is a URL; an archive's own copy).")
@click.option("--te", "te_source", default=None, metavar="SOURCE",
              help="TransformerEngine clone or mirror: names the release tag of upstream's TE git pin.")
@click.option("--snapshot", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="Read PyPI from a recorded snapshot (JSON) instead of the index.")
@click.option("--save-snapshot", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Record what was read from PyPI (the file --snapshot reads).")
@click.option("--write", "write_row", is_flag=True,
              help="Merge the row into matrices/mbridge.toml and write its upstream-lock extract "
                   "(validated first; nothing is written when the matrix would not load).")
@click.option("--matrices", "matrices_path", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Matrices directory to write into (default: the one envbuilder loads).")
@ca_bundle_option()
@json_option()
@timings_option
def derive_cmd(mbridge: str | None, nemo_tag: str | None, source: str | None, megatron_lm: str | None,
               te_source: str | None, snapshot: Path | None, save_snapshot: Path | None, write_row: bool,
               matrices_path: Path | None, ca_bundle: Path | None, as_json: bool, timings: bool) -> None:
    """A draft row read from a release's own artifacts, every fact with its source and status."""
    import time

    from envbuilder.matrix.release_source import DEFAULT_SOURCE, derive_release, refuse_nemo
    from envbuilder.matrix.rows_file import row_toml
    from envbuilder.paths import matrices_dir

    version = mbridge
    if (version is None) == (nemo_tag is None):
        raise InvalidOptionError("name one release: --mbridge VERSION or --nemo TAG",
                                 "e.g. envbuilder matrix derive --mbridge 0.6.0 --from PATH")
    console = stderr_console()

    def progress(msg: str) -> None:
        console.print(msg, markup=False)

    if nemo_tag is not None:
        refuse_nemo(nemo_tag, source)
    assert version is not None
    t0 = time.monotonic()
    row = derive_release(version, source or DEFAULT_SOURCE, megatron_lm, te_source, snapshot, save_snapshot,
                         ca_bundle, progress)
    seconds = time.monotonic() - t0
    written: list[str] = []
    if write_row:
        from envbuilder.matrix.rows_file import write_derived

        written = [str(p) for p in write_derived(matrices_path or matrices_dir(), row)]
        for p in written:
            progress(f"wrote {p}")
    unconfirmed = [k for k, f in row.facts.items() if f.status == "derived" and f.known]
    progress(f"release {row.release} (Megatron-Bridge {version}): {len(unconfirmed)} facts derived and not "
             f"confirmed by a published table, {len(row.upstream_lock.pins)} packages in upstream's lock "
             f"({seconds:.1f}s)")
    if as_json:
        emit_json({**row.to_dict(), "toml": row_toml(row), "written": written,
                   "timings": {"derive": round(seconds, 3)}}, timings=timings)
        return
    if not write_row:
        click.echo(row_toml(row), nl=False)


@matrix.command("compare")
@row_options
@lock_dir_input(help="Lock directory to compare (default: locks/ROW).")
@json_option()
def compare_cmd(nemo: str | None, release: str | None, mbridge: str | None, lock: Path | None,
                as_json: bool) -> None:
    """A lock against the row's fidelity target (upstream's uv.lock): agreement and every difference's reason."""
    from rich.table import Table

    from envbuilder.errors import LockDirError
    from envbuilder.lock.fidelity import Fidelity, compare, our_versions
    from envbuilder.lock.lockdir import open_lockdir
    from envbuilder.resolve.resolver import find_row
    from envbuilder.resolve.upstream import upstream_pins

    m = load_matrix()
    key, option = chosen_row(nemo, release, mbridge)
    row = find_row(m, key, option)
    if row.upstream_lock is None:
        raise InvalidOptionError(f"{row.label} has no upstream lock to compare with (only rows derived from a "
                                 "release that commits a uv.lock have one)", "pick a row from `envbuilder matrix list` "
                                 "whose status is derived")
    lockdir = lock or Path("locks") / row.name
    record = open_lockdir(lockdir).record
    if record.row != row.name:
        raise LockDirError(f"{lockdir} is a lock of row {record.row}, not {row.name}", f"pass --lock locks/{row.name}")
    cutoffs = {"*": str(row.exclude_newer.value), **{c.package: c.value for c in row.exclude_newer_package}}
    # a lock recorded before envbuilder pinned upstream's versions: its differences have no recorded reason
    pins = upstream_pins(row, set(record.pins) | set(record.omitted), cutoffs) if record.fidelity else None
    result = compare(our_versions(lockdir / "uv.lock"), row.upstream_lock, pins,
                     {c["package"]: c["constraint"] for c in record.constraints_added})
    recorded = Fidelity.from_dict(record.fidelity) if record.fidelity else None
    if as_json:
        emit_json({"row": row.name, "lock": str(lockdir), **result.to_dict(),
                   "recorded_in_lock": recorded is not None and recorded == result})
        return
    console = stdout_console()
    console.print(f"{row.name}: {result.agree} of {result.both} packages agree with {result.target} "
                  f"({result.percent}%); {result.pinned} upstream versions pinned, {result.upstream_only} packages "
                  f"only upstream locks, {result.ours_only} only this lock has")
    table = Table("package", "ours", "upstream", "reason", "why")
    for d in result.differences:
        table.add_row(d.package, d.ours, d.upstream, d.reason, d.why)
    console.print(table)
    if recorded is None:
        stderr_console().print(f"warning: {lockdir}'s record carries no fidelity (locked before envbuilder recorded "
                               "it): re-lock to record it")
