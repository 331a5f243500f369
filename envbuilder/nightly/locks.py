"""locks/STATUS.md: which rows have a committed lock, and why the others have none.

Written from `envbuilder lock --all --json` (its summary names each row's outcome), so a row that
cannot be locked is recorded with the lock step's own cause and fix instead of silently missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.errors import ReportInputError
from envbuilder.jsonread import read_object
from envbuilder.lock.record import RECORD_NAME
from envbuilder.safetext import printable

#: what a committed lock keeps (`lock --check` compares .python-version too); local wheels/ are not committed
KEPT = ("pyproject.toml", "uv.lock", RECORD_NAME, ".python-version")


@dataclass(frozen=True)
class RowLockStatus:
    row: str
    locked: bool
    lock_sha256: str | None
    cause: str | None
    fix: str | None
    exit_code: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"row": self.row, "locked": self.locked, "lock_sha256": self.lock_sha256, "cause": self.cause,
                "fix": self.fix, "exit_code": self.exit_code}


def read_lock_all(path: Path) -> list[RowLockStatus]:
    """Rows from `lock --all --json` output (a success summary, or the error document listing every row),
    read through jsonread and typed: each row a plain name, its error a cause, a fix and an exit code."""
    fix = "run: envbuilder lock --all -o locks --json > FILE"
    doc = read_object(path, what="`lock --all --json` output", error=ReportInputError, fix=fix)
    holder = doc.obj("details", default=None) if "error" in doc else doc
    rows = holder.objs("rows", default=None) if holder is not None else None
    if rows is None:
        raise ReportInputError(f"{printable(path)} lists no rows", fix)
    out = []
    for r in rows:
        err = r.obj("error", default=None)
        sha = r.string("lock_sha256", default="") and r.sha256("lock_sha256")  # "" for a row that failed
        out.append(RowLockStatus(
            r.string("row", plain=True), err is None, sha or None,
            err.string("cause", default=None) if err else None, err.string("fix", default=None) if err else None,
            err.integer("exit_code", default=None, min=0, max=255) if err else None))
    return out


def render_status(rows: list[RowLockStatus]) -> str:
    ok = [r for r in rows if r.locked]
    bad = [r for r in rows if not r.locked]
    lines = ["# Committed locks", "",
             "Written by `make locks` (`envbuilder lock --all -o locks --no-detect --json`, then "
             "`envbuilder nightly locks-status`). Each `locks/<row>/` keeps only " + ", ".join(f"`{k}`" for k in KEPT)
             + "; the nightly job runs `lock --check` against them.", "",
             f"{len(ok)} of {len(rows)} rows locked.", "", "| row | lock (uv.lock sha256) |", "|---|---|"]
    lines += [f"| {r.row} | `{(r.lock_sha256 or '')[:12]}` |" for r in ok]
    if bad:
        lines += ["", "## Rows without a lock", "",
                  "These rows have no `locks/<row>/`; the nightly job reports them as failed at `lock-check`.", "",
                  "| row | exit | cause | fix |", "|---|---|---|---|"]
        for r in bad:
            cause, fix = (_cell(r.cause), _cell(r.fix))
            lines.append(f"| {r.row} | {r.exit_code} | {cause} | {fix} |")
    return "\n".join(lines) + "\n"


def _cell(text: str | None) -> str:
    """A Markdown table cell: one line, no column break."""
    return printable(text or "").replace("|", "/")
