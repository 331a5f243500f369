"""A content-addressed cache of built kernel wheels.

The key is the sha256 of everything that decides the binary: package, version, the sdist's sha256,
torch (version with its local tag), torch's CUDA, the C++ ABI, the arch list, the Python tag, the
patch applied, and the build environment the lock sets (stage2_env). Change any of them and the key
changes; change none and the repeat build is a copy. An entry is written in a staging directory and
renamed into place, so a killed build never leaves a half entry; a hit re-checks the wheel's sha256.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.atomic import write_atomic
from envbuilder.lock.record import sha256_file

ENTRY = "entry.json"


def cache_key(facts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(facts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    key: str
    wheel: Path
    record: dict[str, Any]


def lookup(cache: Path, key: str) -> CacheEntry | None:
    d = cache / "wheels" / key
    try:
        record = json.loads((d / ENTRY).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    wheel = d / str(record.get("wheel", ""))
    if not wheel.is_file() or sha256_file(wheel) != record.get("sha256"):
        return None  # damaged: rebuilt and replaced
    return CacheEntry(key, wheel, record)


def store(cache: Path, key: str, wheel: Path, record: dict[str, Any]) -> CacheEntry:
    root = cache / "wheels"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}.", dir=root))
    try:
        shutil.copy2(wheel, tmp / wheel.name)
        rec = {**record, "wheel": wheel.name, "sha256": sha256_file(tmp / wheel.name), "key": key}
        write_atomic(tmp / ENTRY, json.dumps(rec, indent=2, sort_keys=True) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)
    return CacheEntry(key, final / wheel.name, rec)
