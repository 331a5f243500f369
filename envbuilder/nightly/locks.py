"""locks/STATUS.md: which rows have a committed lock, and why the others have none.

Written from `envbuilder lock --all --json` (its summary names each row's outcome), so a row that
cannot be locked is recorded with the lock step's own cause and fix instead of silently missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.errors import ReportInputError
from envbuilder.lock.record import RECORD_NAME

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
    """Rows from `lock --all --json` output (a success summary, or the error document listing every row)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportInputError(f"{path} is not `envbuilder lock --all --json` output ({exc})",
                               "run: envbuilder lock --all -o locks --json > FILE") from exc
    rows = (doc.get("details") or {}).get("rows") if "error" in doc else doc.get("rows")
    if not isinstance(rows, list):
        raise ReportInputError(f"{path} lists no rows", "run: envbuilder lock --all -o locks --json > FILE")
    out = []
    for r in rows:
        err = r.get("error") or None
        out.append(RowLockStatus(str(r.get("row")), err is None, r.get("lock_sha256") or None,
                                 err.get("cause") if err else None, err.get("fix") if err else None,
                                 err.get("exit_code") if err else None))
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
            cause, fix = (r.cause or "").replace("|", "/"), (r.fix or "").replace("|", "/")
            lines.append(f"| {r.row} | {r.exit_code} | {cause} | {fix} |")
    return "\n".join(lines) + "\n"
