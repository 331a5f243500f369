"""The audit tests' offline OSV database: synthetic records written at test time (tests/audit/osv_records.py
says why they are synthetic and what each exercises)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from audit import osv_records


@pytest.fixture(scope="session")
def osv_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline database: a directory of the synthetic OSV records, one <ID>.json each."""
    return osv_records.write_db(tmp_path_factory.mktemp("osv"))


@pytest.fixture
def record() -> Callable[[str], dict[str, Any]]:
    """One record of the database, by id, as its JSON (a fresh copy the test may edit)."""
    return osv_records.record
