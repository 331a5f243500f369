"""The one golden-file check for every generated file (pyproject, Dockerfiles, lock record,
apptainer.def, launch snippets). Golden files live under tests/golden/.

After an intended change, regenerate them all with the one switch and review the diff:
    ENVBUILDER_UPDATE_GOLDEN=1 .venv/bin/pytest -m "not integration"
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE_VAR = "ENVBUILDER_UPDATE_GOLDEN"


def updating() -> bool:
    return os.environ.get(UPDATE_VAR) == "1"


def check_golden(rel: str, text: str) -> None:
    """Assert `text` equals tests/golden/<rel>; with ENVBUILDER_UPDATE_GOLDEN=1 write it first."""
    path = GOLDEN / rel
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with {UPDATE_VAR}=1 and review the diff"
    assert text == path.read_text(encoding="utf-8"), f"{rel} differs from its golden file; if intended, " \
                                                     f"regenerate with {UPDATE_VAR}=1 and review the diff"
