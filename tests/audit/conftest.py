"""Real OSV records for the audit tests (tests/audit/data/README.md says where each comes from)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def osv_db() -> Path:
    """The committed offline database: a directory of real OSV records, one <ID>.json each."""
    return DATA / "osv"


@pytest.fixture(scope="session")
def record(osv_db: Path) -> Callable[[str], dict[str, Any]]:
    """One record of the committed database, by id, as its JSON."""

    def get(vid: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((osv_db / f"{vid}.json").read_text(encoding="utf-8"))
        return data

    return get
