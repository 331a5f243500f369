"""Fidelity to upstream's lock: the committed Megatron-Bridge locks against the real upstream uv.lock of their
release (the extracts in matrices/upstream/), the pins that make them agree, and the reasons for the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.lock.fidelity import REASONS, Fidelity, compare, our_versions
from envbuilder.lock.record import LockRecord
from envbuilder.matrix import load_matrix
from envbuilder.render import render_pyproject
from envbuilder.resolve import ResolveRequest, resolve

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
BRIDGE_ROWS = ("26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08")


@pytest.mark.parametrize("row", BRIDGE_ROWS)
def test_committed_lock_agrees_with_upstream_and_records_every_difference(row: str) -> None:
    m = load_matrix(REPO / "matrices")
    r = m.find_row(release=row)
    assert r is not None and r.upstream_lock is not None
    lockdir = REPO / "locks" / row
    record = LockRecord.from_lockdir(lockdir)
    fidelity = Fidelity.from_dict(record.fidelity)
    assert fidelity.target == r.upstream_lock.source and fidelity.target_sha256 == r.upstream_lock.sha256
    # the target: at least 95% of the packages both lock agree exactly, and no difference without a reason
    assert fidelity.percent >= 95.0, fidelity.by_reason()
    assert not fidelity.unexplained and {d.reason for d in fidelity.differences} <= set(REASONS)
    # the record's figures are what comparing the lock's uv.lock with the extract gives today
    again = compare(our_versions(lockdir / "uv.lock"), r.upstream_lock, None)
    assert (again.both, again.agree) == (fidelity.both, fidelity.agree)
    # security: upstream's urllib3 override holds in every Megatron-Bridge lock
    urllib3 = our_versions(lockdir / "uv.lock")["urllib3"]
    assert tuple(int(x) for x in urllib3.split(".")[:3]) >= (2, 6, 3)


def test_resolution_pins_upstreams_versions_except_where_the_row_decides() -> None:
    m = load_matrix(REPO / "matrices")
    res = resolve(m, ResolveRequest(row="26.04", row_option="release", glibc="2.39"))
    assert res.upstream is not None and res.upstream.target == "NVIDIA-NeMo/Megatron-Bridge:uv.lock@v0.4.0"
    pins = dict(c.split("==") for c in res.upstream.constraints)
    # pre-releases upstream chose are pinned as they are (an exact pin names them)
    assert pins["colorful"] == "0.6.0a1" and pins["sqlalchemy"] == "2.1.0b1"
    # from NVIDIA's index, but PyPI serves the same version: pinned
    assert pins["multi-storage-client"] == "0.46.0"
    skipped = {name: (reason, why) for name, reason, why in res.upstream.skipped}
    assert skipped["nemo-run"][0] == "override"  # the row's own pin (the 26.04 table's 0.9.0)
    assert skipped["transformer-engine"][0] == "git-only"  # 2.14.0+71bbefbf: PyPI serves no git build
    assert skipped["nvidia-modelopt"][0] == "not-on-pypi"  # 0.43.0rc4 is only on pypi.nvidia.com
    assert skipped["emerging-optimizers"][0] == "git-only"
    uv = tomllib.loads(render_pyproject(res, m))["tool"]["uv"]
    assert "colorful==0.6.0a1" in uv["constraint-dependencies"]
    assert res.provenance["upstream-lock"].startswith("matrix:mbridge.toml#26.04.upstream_lock")
    # a platform fix for the target glibc replaces upstream's pin of that package
    text = render_pyproject(res, m, ["nvidia-cudnn-frontend<1.20"])
    cons = tomllib.loads(text)["tool"]["uv"]["constraint-dependencies"]
    assert "nvidia-cudnn-frontend<1.20" in cons and not any(c.startswith("nvidia-cudnn-frontend==") for c in cons)


def test_set_of_a_component_drops_upstreams_pin_of_it() -> None:
    m = load_matrix(REPO / "matrices")
    res = resolve(m, ResolveRequest(row="26.08", row_option="release", glibc="2.39",
                                    overrides=(("nvidia-resiliency-ext", "0.7.0"),)))
    assert res.upstream is not None
    assert not any(c.startswith("nvidia-resiliency-ext==") for c in res.upstream.constraints)
    assert res.pins["nvidia-resiliency-ext"].version == "0.7.0"


def test_nemo_rows_have_no_upstream_lock() -> None:
    res = resolve(load_matrix(REPO / "matrices"), ResolveRequest(row="v2.3.0"))
    assert res.upstream is None and "upstream-lock" not in res.provenance


def test_a_lock_made_without_upstreams_pins_is_counted_and_unexplained(tmp_path: Path) -> None:
    """The 26.04 lock committed before fidelity (80.0% agreement): every difference is unexplained."""
    old = subprocess.run(["git", "-C", str(REPO), "show", "1efd9d6:locks/26.04/uv.lock"], capture_output=True,
                         text=True)
    if old.returncode != 0:
        pytest.skip("history without the pre-fidelity 26.04 lock (a shallow clone)")
    (tmp_path / "uv.lock").write_text(old.stdout)
    r = load_matrix(REPO / "matrices").find_row(release="26.04")
    assert r is not None and r.upstream_lock is not None
    before = compare(our_versions(tmp_path / "uv.lock"), r.upstream_lock, None)
    assert (before.agree, before.both) == (212, 265) and before.percent == 80.0
    assert len(before.unexplained) == 53
    assert {d.package for d in before.differences} >= {"urllib3", "numpy", "transformer-engine"}


def test_record_round_trips_with_fidelity() -> None:
    text = (REPO / "locks" / "26.08" / "envbuilder.lock.json").read_text()
    record = LockRecord.from_json(text)
    assert record.fidelity["target"] == "NVIDIA-NeMo/Megatron-Bridge:uv.lock@v0.6.0"
    assert record.to_json() == text
    # records of rows without a target keep their bytes: no empty fidelity field
    nemo = (REPO / "locks" / "v2.3.0" / "envbuilder.lock.json").read_text()
    assert "fidelity" not in json.loads(nemo) and LockRecord.from_json(nemo).to_json() == nemo


def test_cli_compare(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "compare", *args], capture_output=True,
                              text=True, timeout=120, cwd=REPO)

    proc = run("--release", "26.08", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["percent"] >= 95.0 and out["recorded_in_lock"] is True and out["lock"] == "locks/26.08"
    assert {d["reason"] for d in out["differences"]} <= set(REASONS) - {"unexplained"}
    proc = run("--release", "26.08")
    assert proc.returncode == 0 and "agree with NVIDIA-NeMo/Megatron-Bridge:uv.lock@v0.6.0" in proc.stdout
    proc = run("--nemo", "v2.3.0")
    assert proc.returncode != 0 and "no upstream lock" in proc.stderr and "Traceback" not in proc.stderr
    proc = run("--release", "26.08", "--lock", "locks/26.06")
    assert proc.returncode != 0 and "lock of row 26.06" in proc.stderr
