"""`lock --all`: lock every matrix row into OUT/<tag>/, several rows at a time.

Each row is an ordinary `run_lock` into its own directory (atomic per row, so a failed row
leaves its previous lock untouched and the others still land). Rows run on a bounded thread
pool: the work is `uv lock` subprocesses and index I/O, so threads overlap the waiting while the
bound keeps a 2-core machine (and the package index) from being flooded.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envbuilder import procs
from envbuilder.errors import EnvbuilderError, OutputPathError, os_error
from envbuilder.lock.pipeline import LockOptions, LockResult, run_lock
from envbuilder.matrix.model import Matrix
from envbuilder.resolve.request import ResolveRequest

# bound on rows locked at once: enough to overlap index round-trips, few enough for 2 cores
DEFAULT_PARALLEL = max(2, min(4, (os.cpu_count() or 2) * 2))


@dataclass
class RowOutcome:
    row: str
    output: Path
    seconds: float
    changed: bool = False
    resolved_offline: bool = False
    lock_sha256: str = ""
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"row": self.row, "output": str(self.output), "seconds": round(self.seconds, 3),
                               "changed": self.changed, "resolved_offline": self.resolved_offline,
                               "lock_sha256": self.lock_sha256}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass
class BatchResult:
    output: Path
    parallel: int
    wall_seconds: float
    rows: list[RowOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[RowOutcome]:
        return [r for r in self.rows if r.error is not None]

    @property
    def sum_seconds(self) -> float:
        """What locking the rows one after another would have cost (each row's own wall time)."""
        return sum(r.seconds for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"output": str(self.output), "parallel": self.parallel, "wall_seconds": round(self.wall_seconds, 3),
                "sum_row_seconds": round(self.sum_seconds, 3), "failed": [r.row for r in self.failed],
                "rows": [r.to_dict() for r in self.rows]}


# (row, finished so far, total, outcome or None when the row starts)
BatchProgress = Callable[[str, int, int, RowOutcome | None], None]


def lock_all(matrix: Matrix, request: Callable[[str], ResolveRequest], output: Path, base: LockOptions,
             parallel: int = DEFAULT_PARALLEL, tags: list[str] | None = None,
             progress: BatchProgress = lambda *_: None) -> BatchResult:
    """Lock `tags` (default: every non-test row) into output/<tag>; never raises for one row's failure."""
    rows = list(tags if tags is not None else matrix.names())
    parallel = max(1, min(parallel, len(rows) or 1))
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise OutputPathError(f"-o {output} is a file; lock --all writes one directory per row into it",
                              "pass a directory to -o (e.g. -o locks)")
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise os_error(exc, output, action="create", flag="-o") from exc
    done = 0
    lock = threading.Lock()

    def one(tag: str) -> RowOutcome:
        progress(tag, done, len(rows), None)
        opts = replace(base, output=output / tag)
        t = time.monotonic()
        try:
            res: LockResult = run_lock(matrix, request(tag), opts)
        except EnvbuilderError as exc:
            return RowOutcome(tag, opts.output, time.monotonic() - t, error=exc.to_dict())
        return RowOutcome(tag, opts.output, time.monotonic() - t, changed=res.changed,
                          resolved_offline=res.resolved_offline, lock_sha256=res.record.lock_sha256)

    started = time.monotonic()
    outcomes: dict[str, RowOutcome] = {}
    pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="lock-row")
    try:
        futures = {pool.submit(one, tag): tag for tag in rows}
        for fut in as_completed(futures):
            outcome = fut.result()
            with lock:
                outcomes[outcome.row] = outcome
                done += 1
            progress(outcome.row, done, len(rows), outcome)
    except BaseException:
        # interrupted (or a bug in one row): rows not yet started never start, and the running rows'
        # uv children are killed now (not left to finish: a row committed after the signal would make
        # "left as it was" untrue); procs.STOPPING also keeps a row that had finished uv from committing
        procs.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return BatchResult(output=output, parallel=parallel, wall_seconds=time.monotonic() - started,
                       rows=[outcomes[t] for t in rows])
