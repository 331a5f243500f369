"""`envbuilder lock --all`: every row into OUT/<tag>/, with a progress bar."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envbuilder.console import emit_json, stderr_console, styled
from envbuilder.errors import LockAllError
from envbuilder.lock import LockOptions
from envbuilder.lock.batch import BatchResult, RowOutcome, lock_all
from envbuilder.matrix.model import Matrix
from envbuilder.resolve import ResolveRequest


def run_lock_all(matrix: Matrix, request: Callable[[str], ResolveRequest], output: Path, base: LockOptions,
                 parallel: int, as_json: bool, timings: bool = True) -> BatchResult:
    console = stderr_console()
    rows = matrix.names()
    with Progress(TextColumn("lock --all"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}", markup=False), console=console, transient=False) as bar:
        task = bar.add_task("", total=len(rows))

        def progress(row: str, done: int, total: int, outcome: RowOutcome | None) -> None:
            if outcome is None:
                bar.update(task, description=f"locking {row}")
                return
            bar.update(task, completed=done, description=f"{row} done")
            if outcome.error is not None:
                bar.console.print(styled("[red]{}: failed[/red] {}", row, outcome.error.get("cause", "")))
            else:
                how = "offline" if outcome.resolved_offline else "online"
                verb = "checked" if base.check else ("wrote" if outcome.changed else "unchanged")
                bar.console.print(f"{verb} {outcome.output} ({how}, {outcome.seconds:.1f}s)")

        result = lock_all(matrix, request, output, base, parallel=parallel, tags=rows, progress=progress)
    console.print(f"{len(rows) - len(result.failed)}/{len(rows)} rows locked in {result.wall_seconds:.1f}s "
                  f"with {result.parallel} at a time (one after another: {result.sum_seconds:.1f}s)")
    if result.failed:  # with --json the error's details carry the per-row results
        names = ", ".join(r.row for r in result.failed)
        raise LockAllError(f"{len(result.failed)} of {len(rows)} rows failed to lock: {names}",
                           "see each row's error above (or in --json); the other rows were written",
                           **result.to_dict())
    if as_json:
        emit_json(result.to_dict(), timings=timings)
    return result
