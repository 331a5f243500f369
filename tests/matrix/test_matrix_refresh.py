"""`matrix refresh` against a recorded PyPI snapshot (tests/fixtures/refresh) and, marked integration, live PyPI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.matrix import load_matrix
from envbuilder.matrix.refresh import find_new, first_uploads, known_versions, load_snapshot, refresh

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = REPO / "tests" / "fixtures" / "refresh" / "pypi-snapshot.json"


def test_first_upload_is_the_earliest_file_and_ignores_yanked() -> None:
    # torch 2.10.0: first wheels 2026-01-21, build -3 re-uploaded 2026-03-11; the release date stays January
    pypi = {"releases": {"2.10.0": [{"upload_time_iso_8601": "2026-03-11T14:17:44Z"},
                                    {"upload_time_iso_8601": "2026-01-21T16:20:49Z"}],
                         "2.99.0": [{"upload_time_iso_8601": "2026-05-01T00:00:00Z", "yanked": True}],
                         "3.0.0": []}}
    assert first_uploads(pypi) == {"2.10.0": "2026-01-21T16:20:49Z"}


def test_snapshot_lists_what_the_matrix_lacks() -> None:
    m = load_matrix(REPO / "matrices")
    result = refresh(m, load_snapshot(SNAPSHOT), str(SNAPSHOT))
    new = {(n.package, n.version) for n in result.new}
    assert result.behind
    assert ("megatron-bridge", "0.6.2") in new and ("megatron-core", "0.19.2") in new
    # the torch and TE side tables reach the snapshot's newest releases (torch 2.15.0, TE 2.20.2)
    assert not [v for p, v in new if p in ("torch", "transformer-engine")]
    # what the matrix has is never listed (26.08 pins megatron-bridge 0.6.0, megatron-core 0.19.0)
    assert not {("megatron-bridge", "0.6.0"), ("megatron-core", "0.19.0"), ("torch", "2.13.0")} & new
    # pre-releases and dev builds are not releases to add rows for
    assert not [v for p, v in new if p == "megatron-core" and ("rc" in v or "dev" in v)]
    draft = result.draft
    assert 'megatron_bridge    = { value = "0.6.2"' in draft and "unverified" in draft


def test_up_to_date_snapshot_is_not_behind() -> None:
    m = load_matrix(REPO / "matrices")
    known = known_versions(m)
    snap = {p: {v: "2026-01-01T00:00:00Z" for v in sorted(vs)} for p, vs in known.items()}
    assert find_new(m, snap) == []
    assert refresh(m, snap, "test").draft == ""


def test_cli_json_exit_83_and_draft(tmp_path: Path) -> None:
    draft = tmp_path / "draft.toml"
    proc = subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "refresh", "--snapshot", str(SNAPSHOT),
                           "--draft", str(draft), "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 83, proc.stderr
    out = json.loads(proc.stdout)
    assert out["behind"] and "megatron-bridge" in out["by_package"]
    assert "the matrix is behind" in proc.stderr and "Traceback" not in proc.stderr
    assert draft.read_text() == out["draft"]


@pytest.mark.integration
def test_live_pypi_refresh() -> None:
    proc = subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "refresh", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 83), proc.stderr
    out = json.loads(proc.stdout)
    assert out["source"] == "pypi"
    # the recorded snapshot came from PyPI: everything it lists as new is still new (or newer) live
    recorded = {n["package"] for n in json.loads(subprocess.run(
        [sys.executable, "-m", "envbuilder", "matrix", "refresh", "--snapshot", str(SNAPSHOT), "--json"],
        capture_output=True, text=True, timeout=120).stdout)["new"]}
    assert recorded <= set(out["by_package"])
