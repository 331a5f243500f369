"""history.json: one entry per certificate seen, across nights, oldest first.

The previous certificate of a row is the last earlier entry with the same row, GPU model and GPU
count (a different certificate: reporting the same night twice compares it with the night before).
Counting GPUs too keeps a 4-GPU host's night from being compared with a 2-GPU host's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder.atomic import write_atomic
from envbuilder.errors import ReportInputError
from envbuilder.jsonread import read_object
from envbuilder.report.collect import CertEntry
from envbuilder.report.metrics import metrics_of

HISTORY_SCHEMA = 1
#: one entry is ~1 KiB; a year of nightly rows is a few MiB
HISTORY_MAX_BYTES = 64 << 20


def entry_of(e: CertEntry) -> dict[str, Any]:
    return {"row": e.row, "gpu_model": e.gpu_model, "gpu_count": e.gpu_count, "level": e.cert.level,
            "status": e.cert.status, "certificate_sha256": e.sha256, "lock_sha256": e.cert.lock_sha256,
            "created": e.cert.created, "metrics": metrics_of(e.cert)}


@dataclass
class History:
    entries: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> History:
        """history.json, every entry typed: it comes back from a CI cache each night, so it is input too."""
        if not path.exists() and not path.is_symlink():
            return cls()
        fix = "pass --history a file written by `envbuilder report`, or a new path"
        doc = read_object(path, what="history", error=ReportInputError, fix=fix, max_bytes=HISTORY_MAX_BYTES)
        if doc.integer("schema") != HISTORY_SCHEMA:
            doc.fail("schema", f"is {doc['schema']}, not {HISTORY_SCHEMA}")
        entries = []
        for x in doc.objs("entries"):
            x.string("row", max_len=200)
            x.string("gpu_model", max_len=400)
            x.integer("gpu_count", min=0, max=1 << 16)
            x.integer("level", default=None, min=0, max=9)
            x.string("status", default=None, max_len=40)
            x.sha256("certificate_sha256")
            x.sha256("lock_sha256", default=None)
            x.string("created", default=None, max_len=64)
            metrics = x.obj("metrics", default=None)
            if metrics is not None:
                for key in metrics:
                    metrics.number(key)   # finite: a NaN would switch the gate off, a string is markup
            entries.append(x.data)
        return cls(entries)

    def index_of(self, sha256: str) -> int | None:
        return next((i for i, x in enumerate(self.entries) if x.get("certificate_sha256") == sha256), None)

    @staticmethod
    def _same(x: dict[str, Any], e: CertEntry) -> bool:
        return bool(x.get("row") == e.row and x.get("gpu_model") == e.gpu_model and x.get("gpu_count") == e.gpu_count)

    def previous(self, e: CertEntry) -> dict[str, Any] | None:
        i = self.index_of(e.sha256)
        earlier = self.entries if i is None else self.entries[:i]
        return next((x for x in reversed(earlier) if self._same(x, e) and x.get("certificate_sha256") != e.sha256),
                    None)

    def series(self, e: CertEntry) -> list[dict[str, Any]]:
        """This row's entries on this GPU model and count, oldest first (the row page's history table)."""
        return [x for x in self.entries if self._same(x, e)]

    def add(self, e: CertEntry) -> None:
        if self.index_of(e.sha256) is None:
            self.entries.append(entry_of(e))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": HISTORY_SCHEMA, "entries": self.entries}

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
