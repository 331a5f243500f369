"""Markers on python_full_version are decided for the certified interpreter, not for MAJOR.MINOR.0.

Found certifying the v2.3.0 stage 1 on CPython 3.11.7: coverage[toml] requires tomli where
`python_full_version <= '3.11'`, which holds for 3.11.0 and not for 3.11.7, so uv rightly did not install it
and the drift check reported it missing."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from envbuilder.certify.flow import _python_full
from envbuilder.certify.runner import ImageTarget, VenvTarget
from envbuilder.lock.installset import installed_packages

REPO = Path(__file__).resolve().parents[2]
V230 = REPO / "locks" / "v2.3.0"


def test_the_full_version_decides_a_marker_the_minor_version_cannot() -> None:
    at_zero = {r.name for r in installed_packages(V230, "3.11")}
    at_seven = {r.name for r in installed_packages(V230, "3.11", full_version="3.11.7")}
    assert at_zero - at_seven == {"tomli"} and not at_seven - at_zero


def test_a_venv_target_reports_its_interpreters_full_version_and_a_container_none() -> None:
    venv = Path(sys.prefix)
    assert _python_full(VenvTarget(str(venv))) == platform.python_version()
    assert _python_full(ImageTarget("example/image:tag")) is None
