"""Level 0 on a venv synced by uv from a small real lock, then verify-cert (real uv, real PyPI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PYPROJECT = """\
[project]
name = "certify-smoke"
version = "0"
requires-python = ">=3.10"
dependencies = ["six==1.16.0", "idna==3.7"]

[tool.uv]
package = false
"""


def _envbuilder(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory, uv_bin: str) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("certify-lock")
    lock = root / "lock"
    lock.mkdir()
    (lock / "pyproject.toml").write_text(PYPROJECT)
    subprocess.run([uv_bin, "lock", "-q", "--project", str(lock)], check=True, timeout=600)
    venv = root / "venv"
    subprocess.run([uv_bin, "sync", "-q", "--frozen", "--project", str(lock), "--python", sys.executable],
                   check=True, timeout=600, env={**__import__("os").environ, "UV_PROJECT_ENVIRONMENT": str(venv)})
    return lock, venv


def test_level0_on_a_synced_venv_and_verify(synced: tuple[Path, Path], tmp_path: Path, uv_bin: str) -> None:
    lock, venv = synced
    out = tmp_path / "cert"
    proc = _envbuilder("certify", "--venv", str(venv), "--lock", str(lock), "--level", "0", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cert = json.loads(proc.stdout)
    by = {c["name"]: c for c in cert["checks"]}
    assert by["drift"]["measured"] == {"checked": 2, "missing": [], "mismatched": {}}
    assert by["imports"]["status"] == "pass" and by["imports"]["measured"]["modules"] == 2  # six, idna
    import hashlib

    assert cert["lock_sha256"] == hashlib.sha256((lock / "uv.lock").read_bytes()).hexdigest()
    ok = _envbuilder("verify-cert", str(out / "certificate.json"), "--lock", str(lock))
    assert ok.returncode == 0, ok.stderr

    # drift: downgrade one package in the venv; certification fails with advice, verify-cert says 50
    subprocess.run([uv_bin, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "six==1.15.0"],
                   check=True, timeout=600)
    out2 = tmp_path / "cert2"
    bad = _envbuilder("certify", "--venv", str(venv), "--lock", str(lock), "--level", "0", "-o", str(out2))
    assert bad.returncode == 50
    data = json.loads((out2 / "certificate.json").read_text())
    drift = next(c for c in data["checks"] if c["name"] == "drift")
    assert drift["measured"]["mismatched"] == {"six": {"installed": "1.15.0", "locked": "1.16.0"}}
    assert _envbuilder("verify-cert", str(out2 / "certificate.json"), "--lock", str(lock)).returncode == 50


def test_callers_pythonpath_is_not_part_of_a_venv(synced: tuple[Path, Path], tmp_path: Path) -> None:
    """envbuilder run from a PYTHONPATH (its own dependencies, as on the GPU machines) certifies the venv,
    not the venv plus that path: a newer idna on the caller's path is no drift of the venv."""
    import os

    lock, venv = synced
    extra = tmp_path / "callers-site" / "idna-9.9.dist-info"
    extra.mkdir(parents=True)
    (extra / "METADATA").write_text("Metadata-Version: 2.1\nName: idna\nVersion: 9.9\n")
    env = {**os.environ, "PYTHONPATH": str(extra.parent)}
    proc = subprocess.run([sys.executable, "-m", "envbuilder", "certify", "--venv", str(venv), "--lock", str(lock),
                           "--level", "0", "--only", "drift", "-o", str(tmp_path / "cert"), "--json"],
                          capture_output=True, text=True, timeout=600, env=env)
    drift = next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == "drift")
    assert "idna" not in drift["measured"]["mismatched"], drift  # (six may be downgraded by the test above)
