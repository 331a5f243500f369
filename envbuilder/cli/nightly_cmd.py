"""`envbuilder nightly plan|run|step`: the nightly certification job, the same on CI and a laptop."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from envbuilder.cli.options import deprecated_alias, json_option, parallel_option, threshold_option, wheel_cache_options
from envbuilder.console import emit_json, stderr_console
from envbuilder.errors import NightlyRowsFailedError


def _rows(value: str | None) -> list[str]:
    return [r for r in (value or "").replace(",", " ").split() if r]


def _step_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Options every row step shares (one definition for `run` and `step`)."""
    opts = [
        click.option("--level", type=click.IntRange(0, 2), default=2, show_default=True,
                     help="certify level (0 no GPU, 1 one GPU, 2 several)."),
        click.option("-o", "--output", type=click.Path(path_type=Path, file_okay=False),
                     default=Path("build/nightly"), show_default=True, help="Per-row outputs: OUTPUT/<row>/."),
        click.option("--locks", type=click.Path(path_type=Path, file_okay=False), default=Path("locks"),
                     show_default=True, help="Committed locks: LOCKS/<row>/."),
        click.option("--tag", "tag_template", default="envbuilder/nightly-{row}:{lock12}", show_default=True,
                     help="Image tag; {row} and {lock12} (the lock's sha256, 12 hex) are filled in."),
        click.option("--base", help="build --base IMAGE (e.g. envbuilder/test-base:bookworm where no CUDA "
                                    "base can be pulled)."),
        click.option("--cpu", is_flag=True, help="certify --cpu (no GPU: level 0 plus a CPU pretrain)."),
        click.option("--steps", "train_steps", type=click.IntRange(5, 10000), help="certify --steps."),
        click.option("--sign", "sign_key", type=click.Path(path_type=Path, dir_okay=False),
                     help="certify --sign KEY (without it, $ENVBUILDER_SIGNING_KEY signs when set)."),
        click.option("--key", "public_key", type=click.Path(path_type=Path, dir_okay=False),
                     help="verify-cert --key PUB (and report --key)."),
        click.option("--formats", default="sqsh,sif", show_default=True, help="Export formats."),
        click.option("--no-audit", is_flag=True, help="Skip the audit step (known vulnerabilities of each lock)."),
        click.option("--audit-db", type=click.Path(path_type=Path, exists=True),
                     help="audit --db: an offline OSV database (default: the OSV service)."),
        click.option("--audit-fail-on", default="none", show_default=True, metavar="LEVEL|SCORE",
                     help="audit --fail-on: a finding this severe fails the row (none: the audit only reports)."),
        click.option("--lock-arg", "lock_args", multiple=True, help="Extra `lock --check` argument (repeatable)."),
        click.option("--build-arg", "build_args", multiple=True, help="Extra `build` argument (repeatable)."),
        click.option("--export-arg", "export_args", multiple=True,
                     help="Extra `export` argument (repeatable), e.g. --export-arg=--compression --export-arg=lz4."),
        click.option("--push", default=None, metavar="REGISTRY/NAMESPACE",
                     help="Push each certified image there (last step, after verify-cert) and record its digest "
                          "in OUTPUT/<row>/push.json; credentials: the engine's Docker config."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return wheel_cache_options()(fn)  # build --cache: the stage-2 wheels a shared cache holds are not compiled


def _config(row: str, level: int, output: Path, locks: Path, tag_template: str, base: str | None, cpu: bool,
            train_steps: int | None, sign_key: Path | None, public_key: Path | None, formats: str, no_audit: bool,
            audit_db: Path | None, audit_fail_on: str, lock_args: tuple[str, ...], build_args: tuple[str, ...],
            export_args: tuple[str, ...], push: str | None, wheel_cache: Any = None) -> Any:
    from envbuilder.audit.severity import Threshold
    from envbuilder.image.reference import ImageReference
    from envbuilder.matrix import load_matrix
    from envbuilder.nightly.plan import check_row, row_flag
    from envbuilder.nightly.steps import RowConfig

    matrix = load_matrix()
    if row:  # a plain name and a matrix row, before anything is created under OUT/<row>/
        check_row(matrix, row)
    if push:  # checked before any row runs: REGISTRY/NAMESPACE must make a valid reference with a row's name
        ImageReference.parse(f"{push.rstrip('/')}/nightly-row:tag", "--push")
    Threshold.parse(audit_fail_on)  # refused here (exit 18), not in every row's audit step
    flag = row_flag(matrix, row) if row else "--nemo"
    return RowConfig(row=row, row_flag=flag, level=level, output=output, locks=locks, tag_template=tag_template,
                     base=base, cpu=cpu, train_steps=train_steps, sign_key=sign_key, public_key=public_key,
                     formats=tuple(f for f in formats.replace(",", " ").split() if f),
                     audit=not no_audit, audit_db=audit_db, audit_fail_on=audit_fail_on,
                     lock_args=lock_args, build_args=build_args, export_args=export_args, push=push,
                     wheel_cache=wheel_cache)


@click.group()
def nightly() -> None:
    """The nightly certification job (plan, run every row, run one step)."""


@nightly.command("plan")
@click.option("--rows", help="Rows to run (space or comma separated; default: every row `matrix list` shows).")
@click.option("--level", type=click.IntRange(0, 2), default=2, show_default=True)
@click.option("--all", "include_test", is_flag=True, help="With no --rows: include test-only rows.")
def plan(rows: str | None, level: int, include_test: bool) -> None:
    """Print the GitHub Actions matrix: {"include": [{"row", "level", "runner"}...]} (one line of JSON).

    Runner labels per level come from $NIGHTLY_RUNNER_L0/_L1/_L2 (JSON lists; repository variables in CI).
    """
    from envbuilder.matrix import load_matrix
    from envbuilder.nightly.plan import make_plan

    p = make_plan(load_matrix(), _rows(rows) or None, level, include_test=include_test)
    click.echo(json.dumps(p.to_dict(), sort_keys=True, separators=(",", ":")))


@nightly.command("run")
@click.option("--rows", help="Rows (space or comma separated; default: every row `matrix list` shows).")
@parallel_option("rows run", default=2)
@deprecated_alias("--jobs", "--parallel", "parallel", type=click.IntRange(1, 64))
@click.option("--no-resume", is_flag=True, help="Redo rows whose certificate still matches lock and image.")
@click.option("--no-report", is_flag=True, help="Skip the dashboard and regression gate.")
@click.option("--site", type=click.Path(path_type=Path, file_okay=False), help="Dashboard (default OUTPUT/site).")
@click.option("--history", type=click.Path(path_type=Path, dir_okay=False),
              help="History file (default OUTPUT/history.json).")
@threshold_option("Regression gate: percent drop against the previous certificate of the row, same GPU model.")
@click.option("--browser-check", is_flag=True, help="report --browser-check (headless Chromium).")
@_step_options
@json_option("Print the summary as JSON on stdout.")
def run(rows: str | None, parallel: int, no_resume: bool, no_report: bool, site: Path | None, history: Path | None,
        threshold_pct: float, browser_check: bool, as_json: bool, **row_opts: Any) -> None:
    """Every row: lock --check, audit, build, sbom, export sqsh+sif, certify, verify-cert (and push, with
    --push); then report --gate."""
    from envbuilder.matrix import load_matrix
    from envbuilder.nightly.pipeline import NightlyOptions, run_nightly
    from envbuilder.nightly.plan import make_plan, row_flag

    matrix = load_matrix()
    chosen = [r.row for r in make_plan(matrix, _rows(rows) or None, row_opts["level"], env={}).rows]
    console = stderr_console()
    opts = NightlyOptions(chosen, _config("", **row_opts), parallel=parallel, resume=not no_resume,
                          report=not no_report, site=site, history=history, threshold_pct=threshold_pct,
                          browser_check=browser_check,
                          row_flags={r: row_flag(matrix, r) for r in chosen})
    console.print(f"nightly: {len(chosen)} row(s), level {row_opts['level']}, {parallel} at a time: {' '.join(chosen)}")
    result = run_nightly(opts, progress=console.print)
    for r in result.rows:
        f = r.failed_step
        console.print(f"  {r.row}: {r.status}" + (f" at {f.step} (exit {f.exit_code}; {f.log})" if f else ""))
    if as_json:
        emit_json(result.to_dict())
    problems = [f"{r.row} ({r.failed_step.step if r.failed_step else '?'})" for r in result.failed]
    if result.report is not None and result.report.status == "failed":
        problems.append(f"report exit {result.report.exit_code} (94: regression; see {result.report.log})")
    if problems:
        err = NightlyRowsFailedError(f"the night failed: {', '.join(problems)}",
                                     f"read the logs under {row_opts['output']}/<row>/logs/; rerun resumes")
        if as_json:  # the summary is the JSON document (it names each failed step); keep stdout to one document
            import sys

            click.echo(f"error: {err.cause}\n  fix: {err.fix}", err=True)
            sys.exit(err.exit_code)
        raise err


@nightly.command("step")
@click.argument("step", type=click.Choice(["lock-check", "audit", "build", "sbom", "export-sqsh", "export-sif",
                                           "certify", "verify", "push"]))
@click.option("--row", required=True, help="Matrix row, e.g. v2.3.0.")
@_step_options
def step(step: str, row: str, **row_opts: Any) -> None:
    """Run one step of one row (one workflow step); its output streams to OUTPUT/<row>/logs/STEP.log."""
    import sys

    from envbuilder.nightly.pipeline import run_step

    sr = run_step(_config(row, **row_opts), step)
    if sr.log and Path(sr.log).exists():
        sys.stderr.write(Path(sr.log).read_text(encoding="utf-8", errors="replace"))
    stderr_console().print(f"{row} {step}: {sr.status} ({sr.seconds:.0f}s)")
    if sr.status == "failed":
        sys.exit(sr.exit_code or 1)


@nightly.command("locks-status")
@click.argument("lock_all_json", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default=Path("locks/STATUS.md"),
              show_default=True)
def locks_status(lock_all_json: Path, output: Path) -> None:
    """Write locks/STATUS.md from `lock --all --json` output: locked rows, and each other row's cause and fix."""
    from envbuilder.atomic import write_atomic
    from envbuilder.nightly.locks import read_lock_all, render_status

    rows = read_lock_all(lock_all_json)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(output, render_status(rows))
    stderr_console().print(f"wrote {output}: {sum(r.locked for r in rows)} of {len(rows)} rows locked")
