"""`envbuilder check-parallel`: check a training layout before it is queued."""

from __future__ import annotations

from typing import Any

import click

from envbuilder.choices import GRAD_DTYPES
from envbuilder.cli.options import choice, gpu_option, json_option
from envbuilder.console import emit_json, stderr_console, styled
from envbuilder.errors import ParallelLayoutError
from envbuilder.host.gpus import require_gpu
from envbuilder.parallel import GpuTarget, ParallelReport, check_layout
from envbuilder.parallel.inputs import build_layout, gpu_target
from envbuilder.parallel.rules import grad_accumulation


def _gpu_target(gpu: str | None, memory: float | None) -> GpuTarget:
    spec = require_gpu(gpu) if gpu is not None else None
    return gpu_target(memory, spec.name if spec else None, spec.sm if spec else None,
                      spec.memory_gib if spec else None)


def _print_human(report: ParallelReport, recipe_source: str | None) -> None:
    con = stderr_console()
    lay = report.layout
    if recipe_source:
        con.print(f"recipe: {recipe_source}")
    gpu = report.gpu
    gpu_text = f", GPU {gpu.name} (sm {gpu.sm}, {gpu.memory_gib} GiB)" if gpu.name else (
        f", GPU memory {gpu.memory_gib} GiB" if gpu.memory_gib else "")
    con.print(f"layout: {lay.nodes} node(s) x {lay.gpus_per_node} GPUs, TP {lay.tp} PP {lay.pp}"
              f"{f' VPP {lay.vpp}' if lay.vpp else ''} CP {lay.cp} EP {lay.ep}{' SP' if lay.sp else ''}, "
              f"DP {lay.dp if lay.dp is not None else '?'}{gpu_text}")
    colours = {"pass": "green", "warn": "yellow", "fail": "red", "n/a": "dim"}
    for r in report.rules:
        c = colours[r.level]
        con.print(styled(f"  [{c}]{{:<4}}[/{c}] {{:<17}} {{}}", r.level, r.name, r.message))
        if r.fix:
            con.print(f"  {'':<4} {'':<17} fix: {r.fix}")
    ga = grad_accumulation(lay)
    if ga is not None:
        con.print(f"gradient-accumulation steps: {ga}")


@click.command(name="check-parallel")
@click.option("--from-nemo-recipe", "recipe", metavar="NAME",
              help="Take model dimensions and the default layout from a built-in recipe (matrices/recipes.toml).")
@click.option("--gpus-per-node", type=int)
@click.option("--nodes", type=int, help="Number of nodes (default 1).")
@click.option("--tp", type=int, help="Tensor parallel size (default 1).")
@click.option("--pp", type=int, help="Pipeline parallel size (default 1).")
@click.option("--vpp", type=int, help="Virtual pipeline (interleaved) stages per pipeline rank.")
@click.option("--cp", type=int, help="Context parallel size (default 1).")
@click.option("--ep", type=int, help="Expert parallel size (default 1).")
@click.option("--etp", type=int, help="Expert tensor parallel size (default: TP).")
@click.option("--sp/--no-sp", default=None, help="Sequence parallelism.")
@click.option("--num-layers", type=int)
@click.option("--hidden-size", type=int)
@click.option("--num-attention-heads", type=int)
@click.option("--num-query-groups", type=int, help="GQA groups (default: one per head).")
@click.option("--kv-channels", type=int, help="Head dimension override (default hidden / heads).")
@click.option("--ffn-hidden-size", type=int, help="MLP size (default 4 x hidden).")
@click.option("--seq-length", type=int)
@click.option("--mbs", type=int, help="Micro batch size (default 1).")
@click.option("--gbs", type=int, help="Global batch size.")
@click.option("--num-experts", type=int, help="MoE experts per layer.")
@click.option("--vocab-size", type=int, help="Vocabulary size (memory estimate only).")
@click.option("--gated-linear-unit/--no-gated-linear-unit", default=None, help="SwiGLU MLP (memory estimate).")
@click.option("--share-embeddings/--no-share-embeddings", default=None,
              help="Tied input/output embeddings (memory estimate).")
@gpu_option("gpu_name")
@click.option("--gpu-memory-gib", type=float, help="GPU memory in GiB (overrides --gpu's).")
@click.option("--grad-dtype", type=choice(GRAD_DTYPES), default=GRAD_DTYPES[0], show_default=True,
              help="Gradient buffer dtype (NeMo recipes reduce gradients in fp32).")
@json_option("Print every rule result as JSON on stdout.")
def check_parallel(recipe: str | None, gpu_name: str | None, gpu_memory_gib: float | None, grad_dtype: str,
                   as_json: bool, **flags: Any) -> None:
    """Check a training layout against the Megatron-Core / NeMo / Transformer Engine rules.

    Exit codes: 0 the layout can run (warnings allowed), 21 a rule fails, 22 impossible input,
    23 unknown recipe, 24 unknown GPU. With --json the report is printed on stdout; when a rule
    fails it is the "details" of the error object.
    """
    layout, recipe_source = build_layout(flags, recipe)
    report = check_layout(layout, _gpu_target(gpu_name, gpu_memory_gib), grad_bytes=4 if grad_dtype == "fp32" else 2)
    payload = {**report.to_dict(), "recipe": recipe_source}
    if not as_json:
        _print_human(report, recipe_source)
    if report.ok:
        if as_json:
            emit_json(payload)
        return
    first = report.failures[0]
    names = ", ".join(r.name for r in report.failures)
    raise ParallelLayoutError(
        f"layout cannot run: {len(report.failures)} rule(s) fail ({names}); {first.name}: {first.message}",
        first.fix,
        **payload,
    )
