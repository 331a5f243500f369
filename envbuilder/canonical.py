"""Deterministic forms shared by every stage: JSON text, file digests, version keys.

Standard library only, because `python -m envbuilder.certify` imports it inside the
environment being certified, where only the standard library and torch can be assumed.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any


def dumps(obj: Any, *, ascii_only: bool = False) -> str:
    """Same object, same bytes: sorted keys, two-space indentation, trailing newline.

    ascii_only=True escapes non-ASCII characters (the lock record has always been written so).
    """
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=ascii_only) + "\n"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def major_minor(version: str) -> str:
    """'12.8' from '12.8.1', '2.11' from '2.11.0+cu130' (the local tag dropped); a version without a minor as is."""
    parts = str(version).split("+", 1)[0].split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else str(version)


def version_tuple(version: str) -> tuple[int, ...]:
    """Numeric key of a dotted version, for drivers and CUDA ('570.86.15', '12.8', '535-server').

    Non-numeric parts are dropped, so '12.8' < '12.10' and '570.86.15' > '570.86'.
    """
    return tuple(int(p) for p in re.split(r"[.\-]", str(version)) if p.isdigit())
