"""`envbuilder matrix list|show`: read the compatibility matrix."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from envbuilder.cli.options import json_option
from envbuilder.console import emit_json, stdout_console
from envbuilder.errors import UnknownTagError
from envbuilder.matrix import Matrix, Release, load_matrix

# `matrix show --json` keys, each from a release field or the CUDA table
SHOW_FIELDS = {
    "container": "container", "python": "python", "torch": "torch", "cuda": "cuda", "cudnn": "cudnn",
    "transformer_engine": "transformer_engine", "flash_attn": "flash_attn", "mamba_ssm": "mamba_ssm",
    "causal_conv1d": "causal_conv1d", "megatron_core": "megatron_core", "nemo_run": "nemo_run",
    "exclude_newer": "exclude_newer",
}


def row_summary(matrix: Matrix, row: Release) -> dict[str, Any]:
    out: dict[str, Any] = {"nemo": row.nemo}
    sources: dict[str, str] = {}
    for key, fld in SHOW_FIELDS.items():
        fact = row.fact(fld)
        out[key] = fact.value
        sources[key] = fact.source
    min_driver = matrix.cuda_min_driver(str(row.cuda.value)) if row.cuda.known else None
    out["min_driver"] = min_driver.value if min_driver is not None else "unknown"
    sources["min_driver"] = min_driver.source if min_driver is not None else "not in matrices/cuda.toml"
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
    """One line per NeMo release."""
    m = load_matrix()
    rows = [r for r in m.releases if include_test or not r.test_only]
    if as_json:
        emit_json([row_summary(m, r) for r in rows])
        return
    table = Table("nemo", "container", "torch", "cuda", "TE", "flash-attn", "mcore", "python", "note")
    for r in rows:
        note = f"prefer {r.prefer}" if r.prefer else ""
        table.add_row(r.nemo, str(r.container), str(r.torch), str(r.cuda), str(r.transformer_engine),
                      str(r.flash_attn), str(r.megatron_core), str(r.python), note)
    stdout_console().print(table)


@matrix.command("show")
@click.option("--nemo", required=True)
@json_option()
def show(nemo: str, as_json: bool) -> None:
    """Every fact of one row, with its source."""
    m = load_matrix()
    row = m.find_release(nemo)
    if row is None:
        raise UnknownTagError(f"unknown NeMo tag '{nemo}'; known tags: {', '.join(m.tags())}",
                              "pick one of the known tags (envbuilder matrix list)")
    summary = row_summary(m, row)
    if as_json:
        emit_json(summary)
        return
    table = Table("field", "value", "source")
    for key in ["nemo", *SHOW_FIELDS, "min_driver"]:
        table.add_row(key, str(summary[key]), summary["sources"].get(key, ""))
    console = stdout_console()
    console.print(table)
    for n in summary["notes"]:
        console.print(f"[{'yellow' if n['severity'] == 'warn' else 'blue'}]{n['severity']}[/]: {n['text']} "
                      f"({n['source']})")
