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
from envbuilder.cli.options import json_option
from envbuilder.console import emit_json, stderr_console, stdout_console
from envbuilder.errors import InvalidOptionError, MatrixBehindError, NetworkError
from envbuilder.matrix import Matrix, Release, load_matrix

F = TypeVar("F", bound=Callable[..., Any])


def row_options(func: F) -> F:
    """--nemo / --release / --mbridge: the three ways to name one matrix row."""
    func = click.option("--mbridge", default=None, metavar="VERSION",
                        help="Megatron-Bridge version of a row, e.g. 0.4.0.")(func)
    func = click.option("--release", default=None, metavar="YY.MM",
                        help="NeMo Framework release (container tag) of a row, e.g. 26.04 or 25.11.")(func)
    func = click.option("--nemo", default=None, metavar="TAG",
                        help="NeMo release tag of a row, e.g. v2.3.0 (or a test profile).")(func)
    return func


def chosen_row(nemo: str | None, release: str | None, mbridge: str | None) -> tuple[str, str]:
    """(key, option) of the one row option given."""
    given = [(v, o) for v, o in ((nemo, "nemo"), (release, "release"), (mbridge, "mbridge")) if v]
    if len(given) != 1:
        raise InvalidOptionError("name one matrix row: --nemo TAG, --release YY.MM or --mbridge VERSION"
                                 + (f" (got {', '.join('--' + o for _, o in given)})" if given else ""),
                                 "e.g. --release 26.04 or --nemo v2.3.0 (envbuilder matrix list)")
    return given[0]

# `matrix show --json` keys, each from a release field or the CUDA table
SHOW_FIELDS = {
    "container": "container", "python": "python", "torch": "torch", "cuda": "cuda", "cudnn": "cudnn",
    "transformer_engine": "transformer_engine", "flash_attn": "flash_attn", "mamba_ssm": "mamba_ssm",
    "causal_conv1d": "causal_conv1d", "megatron_core": "megatron_core", "nemo_run": "nemo_run",
    "exclude_newer": "exclude_newer", "megatron_bridge": "megatron_bridge",
    "container_torch": "container_torch", "container_cuda": "container_cuda", "container_cudnn": "container_cudnn",
}


def row_summary(matrix: Matrix, row: Release) -> dict[str, Any]:
    out: dict[str, Any] = {"row": row.name, "nemo": row.nemo, "release": row.release}
    sources: dict[str, str] = {}
    for key, fld in SHOW_FIELDS.items():
        fact = row.fact(fld)
        out[key] = fact.value
        sources[key] = fact.source
    from envbuilder.matrix.stacks import row_stacks

    stacks = row_stacks(matrix, row)
    # min_driver: the stack `lock` installs by default (hermetic); each stack's in "stacks"
    out["min_driver"] = stacks["hermetic"].min_driver.value
    sources["min_driver"] = stacks["hermetic"].min_driver.source
    # the glibc `lock` targets when --glibc is not given, and the row's fixes of upstream pins
    out["glibc"] = row.default_glibc.value
    sources["glibc"] = row.default_glibc.source
    out["override_dependencies"] = [{"requirement": o.requirement, "text": o.text, "source": o.source}
                                    for o in row.override_dependencies]
    out["exclude_newer_package"] = [{"package": c.package, "value": c.value, "text": c.text, "source": c.source}
                                    for c in row.exclude_newer_package]
    out["stacks"] = {mode: st.to_dict() for mode, st in stacks.items()}
    out["sources"] = dict(sorted(sources.items()))
    out["torch_cuda_variant"] = row.torch_cuda_variant.value
    out["lightning"] = row.lightning.value
    out["pypi_version"] = row.pypi_version.value
    out["release_date"] = row.release_date.value
    out["notes"] = [{"severity": n.severity, "text": n.text, "source": n.source} for n in row.notes]
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
    table = Table("row", "container", "mbridge", "torch", "cuda", "TE", "flash-attn", "mcore", "python", "note")
    for r in rows:
        note = f"prefer {r.prefer}" if r.prefer else ""
        table.add_row(r.name, str(r.container), str(r.megatron_bridge) if r.megatron_bridge.known else "",
                      str(r.torch), str(r.cuda), str(r.transformer_engine), str(r.flash_attn), str(r.megatron_core),
                      str(r.python), note)
    stdout_console().print(table)


@matrix.command("show")
@row_options
@json_option()
def show(nemo: str | None, release: str | None, mbridge: str | None, as_json: bool) -> None:
    """Every fact of one row, with its source."""
    from rich.markup import escape
    from rich.table import Table

    from envbuilder.resolve.resolver import find_row

    m = load_matrix()
    key, option = chosen_row(nemo, release, mbridge)
    row = find_row(m, key, option)
    summary = row_summary(m, row)
    if as_json:
        emit_json(summary)
        return
    table = Table("field", "value", "source")
    for field in ["row", "nemo", "release", *SHOW_FIELDS, "min_driver", "glibc"]:
        # facts and sources hold brackets ("nemo-toolkit[all]", "[tool.uv]"): print them, never parse them as markup
        table.add_row(field, escape(str(summary[field])), escape(summary["sources"].get(field, "")))
    console = stdout_console()
    console.print(table)
    for mode, st in summary["stacks"].items():
        console.print(f"{mode}: torch {st['torch']}, CUDA {st['cuda_toolkit']}, cuDNN {st['cudnn']}, "
                      f"min driver {st['min_driver']} (minor-compat floor {st['minor_compat_floor']})")
    for n in summary["notes"]:
        console.print(f"[{'yellow' if n['severity'] == 'warn' else 'blue'}]{n['severity']}[/]: {escape(n['text'])} "
                      f"({escape(n['source'])})")
    for o in summary["override_dependencies"]:
        console.print(f"override: {escape(o['requirement'])}: {escape(o['text'])} ({escape(o['source'])})")
    for c in summary["exclude_newer_package"]:
        console.print(f"exclude-newer {escape(c['package'])} = {c['value']}: {escape(c['text'])} "
                      f"({escape(c['source'])})")


@matrix.command("refresh")
@click.option("--snapshot", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="Read a recorded index snapshot (JSON) instead of PyPI.")
@click.option("--draft", "draft_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the unverified draft entries (TOML) to this file for review.")
@click.option("--ca-bundle", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="CA bundle for a TLS-intercepting proxy (default: SSL_CERT_FILE when set).")
@json_option()
def refresh_cmd(snapshot: Path | None, draft_path: Path | None, ca_bundle: Path | None, as_json: bool) -> None:
    """Upstream releases newer than the matrix, with unverified draft entries; exit 83 when behind."""
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
    behind = None
    if result.behind:
        packages = sorted({n.package for n in result.new})
        behind = MatrixBehindError(f"the matrix is behind: {len(result.new)} newer upstream release(s) of "
                                   f"{', '.join(packages)}",
                                   "review the draft (--draft FILE), confirm each fact, and add the rows")
    if as_json:
        # one JSON document: the report, with the error when behind (the exit code says it too)
        emit_json({**result.to_dict(), "error": behind.to_dict() if behind else None})
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
    if behind is not None:
        raise behind
