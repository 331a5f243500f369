"""`envbuilder doctor`: what this (or a planned) host is, and which matrix rows it can run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envbuilder.cli.options import host_options, interpreter_option, json_option
from envbuilder.console import emit_json, stderr_console, styled
from envbuilder.errors import EnvbuilderError
from envbuilder.host import HostInfo, RowVerdict, detect_host, evaluate_matrix, plan_host
from envbuilder.host.detect import with_local_tooling
from envbuilder.host.model import sm_label
from envbuilder.host.torchprobe import in_row_range, probe_torch
from envbuilder.matrix import Matrix, load_matrix


def _gpu_lines(host: HostInfo) -> list[str]:
    """Identical GPUs on one line: 'GPU 0-7: NVIDIA H100 80GB HBM3, sm90, 79.2 GiB, MIG disabled'."""
    groups: list[tuple[list[int], tuple[Any, ...]]] = []
    for g in host.gpus:
        key = (g.name, g.sm, g.memory_gib, g.mig)
        if groups and groups[-1][1] == key:
            groups[-1][0].append(g.index)
        else:
            groups.append(([g.index], key))
    lines = []
    for idx, (name, sm, mem, mig) in groups:
        span = f"{idx[0]}" if len(idx) == 1 else f"{idx[0]}-{idx[-1]}"
        parts = [name, sm_label(sm) if sm else "sm unknown", f"{mem} GiB" if mem is not None else "memory unknown"]
        if mig != "planned":
            parts.append(f"MIG {mig}")
        lines.append(f"GPU {span}: " + ", ".join(parts))
    return lines


def _print_human(host: HostInfo, verdicts: list[RowVerdict] | None, matrix_problem: str | None) -> None:
    con = stderr_console()
    label = {"detected": "detected through NVML", "planned": "planned from flags", "none": "none"}[host.source]
    con.print(styled("[bold]host[/bold]: {}", label))
    if host.source == "none":
        reason = host.problems[0] if host.problems else "NVML reported nothing"
        con.print(f"  no NVIDIA GPU/NVML: {reason.removeprefix('NVML not available: ')}")
    if host.driver or host.cuda_driver_version:
        cuda = f" (supports CUDA {host.cuda_driver_version})" if host.cuda_driver_version else ""
        con.print(f"  driver {host.driver or 'unknown'}{cuda}")
    for line in _gpu_lines(host):
        con.print(f"  {line}")
    for problem in host.problems[1 if host.source == "none" else 0:]:
        con.print(styled("  [yellow]note[/yellow]: {}", problem))
    con.print(styled("[bold]tooling[/bold] (this machine):"))
    for tool, status in sorted(host.tooling.items()):
        mark = "[green]ok[/green]" if status.available else "[red]--[/red]"
        con.print(styled(f"  {{:<11}} {mark}  {{}}", tool, status.detail))
    disk = f"{host.disk_free_gib} GiB free ({host.disk_path})" if host.disk_free_gib is not None else "unknown"
    con.print(f"  uv {host.uv_version or 'unknown'} | disk {disk} | glibc {host.glibc or 'unknown'}")
    con.print(styled("[bold]matrix rows[/bold]:"))
    if verdicts is None:
        con.print(f"  not evaluated: {matrix_problem or 'matrix unavailable'}")
        return
    if not verdicts:
        con.print("  the matrix has no release rows yet")
    for v in verdicts:
        colour = {"ok": "green", "excluded": "red", "unknown": "yellow"}[v.status]
        con.print(styled(f"  {{:<10}} [{colour}]{{}}[/{colour}]", v.tag, v.status))
        for reason, fix in zip(v.reasons, v.fixes, strict=True):
            con.print(f"    {reason}")
            con.print(f"      fix: {fix}")
        for note in v.notes:
            con.print(f"    note: {note}")
    runnable = [v.tag for v in verdicts if v.status == "ok"]
    if verdicts:
        con.print(f"this host can run: {', '.join(runnable) if runnable else 'none of the rows'}")


def _host_torch_report(interpreter: Path, matrix: Matrix | None) -> dict[str, Any]:
    """The interpreter's torch and, per matrix row, whether it is inside the row's torch (major.minor)."""
    ht = probe_torch(interpreter)
    rows: dict[str, list[str]] = {"inside": [], "outside": [], "unknown": []}
    for row in (matrix.releases if matrix is not None else []):
        if row.test_only:
            continue
        verdict = in_row_range(ht.torch, str(row.torch.value) if row.torch.known else None)
        rows[{True: "inside", False: "outside", None: "unknown"}[verdict]].append(row.name)
    return {"interpreter": str(interpreter), **ht.to_dict(), "rows": rows}


def _print_host_torch(report: dict[str, Any]) -> None:
    con = stderr_console()
    con.print(styled("[bold]host torch[/bold] ({}): {}", report["interpreter"],
                     f"torch {report['version']}, CUDA {report['cuda'] or 'none'}, cxx11abi {report['cxx11abi']}, "
                     f"Python {report['python']}"))
    rows = report["rows"]
    con.print(f"  inside the row's torch: {', '.join(rows['inside']) or 'no row'}")
    if rows["outside"]:
        con.print(styled("  [yellow]outside[/yellow] (another torch major.minor; lock --mode host-torch warns): {}",
                         ", ".join(rows["outside"])))


@click.command(name="doctor")
@host_options(count=True)
@interpreter_option("whose torch to report too (NGC, cluster module), with the rows whose torch it matches")
@json_option("Print the report as JSON on stdout.")
def doctor(driver: str | None, gpu: str | None, sm: str | None, gpu_count: int | None, interpreter: Path | None,
           as_json: bool) -> None:
    """Report the host (GPUs, driver, container tooling, uv, disk, glibc) and which matrix rows it can run.

    Without planning flags the host is read through NVML; a machine without GPUs or NVML says so
    and still reports everything else. Exit code 0 unless a flag is invalid.
    """
    planning = any(v is not None for v in (driver, gpu, sm, gpu_count))
    matrix: Matrix | None
    matrix_problem: str | None = None
    try:
        matrix = load_matrix()
    except EnvbuilderError as exc:
        matrix, matrix_problem = None, exc.cause
    if planning:
        host = with_local_tooling(plan_host(driver=driver, gpu=gpu, sm=sm, gpus=gpu_count, matrix=matrix))
    else:
        host = detect_host(matrix=matrix)
    verdicts = evaluate_matrix(host, matrix) if matrix is not None else None
    host_torch = _host_torch_report(interpreter, matrix) if interpreter is not None else None
    if as_json:
        emit_json({
            "host": host.to_dict(),
            "rows": [v.to_dict() for v in verdicts] if verdicts is not None else None,
            "runnable": [v.tag for v in verdicts if v.status == "ok"] if verdicts is not None else [],
            "matrix_problem": matrix_problem,
            **({"host_torch": host_torch} if host_torch is not None else {}),
        })
    else:
        _print_human(host, verdicts, matrix_problem)
        if host_torch is not None:
            _print_host_torch(host_torch)
