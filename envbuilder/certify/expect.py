"""What the lock promises, as the in-environment side reads it.

The host turns a lock directory into this small JSON (see expectations.py) so the
environment needs nothing beyond the standard library to compare against it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPECT_SCHEMA = 1


def normalize(name: str) -> str:
    """PEP 503 name normalization (what uv.lock and importlib.metadata agree on)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Expectations:
    lock_sha256: str | None = None
    row: str | None = None
    packages: dict[str, str] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    nemo_locked: bool = False
    mbridge_locked: bool = False
    skip_imports: list[str] = field(default_factory=list)
    #: [{"names": [...], "bf16_dense_tflops": float}] from matrices/gpus.toml, for % of datasheet
    datasheet: list[dict[str, Any]] = field(default_factory=list)
    artifact: dict[str, Any] = field(default_factory=dict)
    sha256: str | None = None

    @property
    def locked(self) -> set[str]:
        return set(self.packages)

    def is_locked(self, dist: str) -> bool:
        return normalize(dist) in self.packages

    def datasheet_tflops(self, gpu_name: str) -> float | None:
        """Dense bf16 rate for an NVML name: an exact alias first, else the longest alias inside the name."""
        low = gpu_name.lower()
        best: tuple[int, float] | None = None
        for entry in self.datasheet:
            for n in entry.get("names", []):
                if not n:
                    continue
                if n.lower() == low:
                    return float(entry["bf16_dense_tflops"])
                if n.lower() in low and (best is None or len(n) > best[0]):
                    best = (len(n), float(entry["bf16_dense_tflops"]))
        return best[1] if best else None


def load_expectations(path: Path | None) -> Expectations:
    if path is None:
        return Expectations()
    import hashlib

    raw = Path(path).read_bytes()
    data = json.loads(raw)
    if data.get("schema") != EXPECT_SCHEMA:
        raise ValueError(f"{path}: expectations schema {data.get('schema')!r}, want {EXPECT_SCHEMA}")
    return Expectations(
        lock_sha256=data.get("lock_sha256"),
        row=data.get("row"),
        packages={normalize(k): str(v) for k, v in data.get("packages", {}).items()},
        target=dict(data.get("target", {})),
        nemo_locked=bool(data.get("nemo_locked", False)),
        mbridge_locked=bool(data.get("mbridge_locked", False)),
        skip_imports=list(data.get("skip_imports", [])),
        datasheet=list(data.get("datasheet", [])),
        artifact=dict(data.get("artifact", {})),
        sha256=hashlib.sha256(raw).hexdigest(),
    )
