"""TOML parsing, remembered on disk by content: the same text is parsed once per machine.

Every command loads the matrix (nine TOML files): pure-Python tomllib spends ~0.03 s on them,
a tenth of a `lock --check` of an unchanged lock. The parse of a text is a function of its bytes
alone, so it is cached as JSON under envbuilder's cache directory, keyed by the text's sha256:
JSON runs no code on load, and data JSON cannot carry exactly (TOML dates and times) is simply
not cached. An unreadable or corrupt entry is parsed again and rewritten; failing to write the
cache never fails the caller. Only the newest MAX_ENTRIES texts are kept (edited copies of the
matrix, as tests make, would otherwise pile up).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from envbuilder.atomic import write_atomic
from envbuilder.paths import cache_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# bump when the cached form changes
FORMAT_VERSION = 1
MAX_ENTRIES = 256

TOMLDecodeError = tomllib.TOMLDecodeError


def entry_path(text: str) -> Path:
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return cache_dir() / "toml-parse" / f"v{FORMAT_VERSION}-{key}.json"


def loads(text: str) -> dict[str, Any]:
    """tomllib.loads(text), from the cache when this text was parsed before (raises TOMLDecodeError alike)."""
    path = entry_path(text)
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_bytes())
        if isinstance(data, dict):
            return data
    data = tomllib.loads(text)
    try:
        raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    except TypeError:  # a TOML date or time: JSON would hand it back as a string
        return data
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, raw)
        _prune(path.parent)
    return data


def _prune(directory: Path) -> None:
    entries = list(directory.glob("v*.json"))
    if len(entries) <= MAX_ENTRIES:
        return
    def age(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0
    for old in sorted(entries, key=age)[:len(entries) - MAX_ENTRIES]:
        old.unlink(missing_ok=True)
