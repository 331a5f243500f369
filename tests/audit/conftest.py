"""Real OSV records for the audit tests (tests/audit/data/README.md says where each comes from)."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def osv_db() -> Path:
    """The committed offline database: a zip of real OSV records, OSV's export layout."""
    return DATA / "osv-pypi-locks.zip"


@pytest.fixture(scope="session")
def record(osv_db: Path) -> Callable[[str], dict[str, Any]]:
    """One record of the committed database, by id, as its JSON."""
    with zipfile.ZipFile(osv_db) as zf:
        members = {n.removesuffix(".json"): zf.read(n) for n in zf.namelist()}

    def get(vid: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(members[vid])
        return data

    return get
