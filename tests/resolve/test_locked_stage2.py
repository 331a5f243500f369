"""Packages the locked graph brings without a component pin (nv-grouped-gemm, required by megatron-core 0.16 [dev])
that only stage 2 can build: `with_locked_stage2` makes them stage-2 pins, and every committed lock agrees."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from envbuilder.lock.record import LockRecord
from envbuilder.lock.uvlock import read_uv_lock
from envbuilder.matrix import Matrix, load_matrix
from envbuilder.render import render_pyproject
from envbuilder.resolve import ResolveRequest, resolve
from envbuilder.resolve.resolver import builds_only_in_stage2, with_locked_stage2

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
LOCKS = sorted(p.parent.name for p in (REPO / "locks").glob("*/envbuilder.lock.json"))


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load_matrix(REPO / "matrices")


def test_only_torch_importing_sdists_build_only_in_stage2(m: Matrix) -> None:
    assert builds_only_in_stage2(m, "nv-grouped-gemm") and builds_only_in_stage2(m, "mamba-ssm")
    assert not builds_only_in_stage2(m, "transformer-engine-cu12")  # a wheel: stage 1 could install it
    assert not builds_only_in_stage2(m, "numpy")  # no build_packages.toml entry


def test_locked_graph_package_becomes_a_stage2_pin_with_a_metadata_record(m: Matrix) -> None:
    res = resolve(m, ResolveRequest(row="26.02", row_option="release"))
    assert "nv-grouped-gemm" not in res.pins  # no row field names it
    locked = {"nv-grouped-gemm": "1.1.4.post8", "mamba-ssm": "9.9.9", "numpy": "1.26.4", "wget": "3.2"}
    staged = with_locked_stage2(m, res, locked)
    added = set(staged.pins) - set(res.pins)
    assert added == {"nv-grouped-gemm"}  # numpy / wget (sdist-only, no torch) stay in stage 1
    pin = staged.pins["nv-grouped-gemm"]
    assert (pin.version, pin.stage) == ("1.1.4.post8", 2) and pin.provenance.startswith("lock:uv.lock")
    assert staged.pins["mamba-ssm"] == res.pins["mamba-ssm"]  # a component's pin is the row's, never the graph's
    doc = tomllib.loads(render_pyproject(staged, m))
    assert "nv-grouped-gemm==1.1.4.post8" in doc["project"]["optional-dependencies"]["compile"]
    assert "nv-grouped-gemm" in doc["tool"]["uv"]["no-build-isolation-package"]
    meta = {d["name"]: d for d in doc["tool"]["uv"]["dependency-metadata"]}
    assert meta["nv-grouped-gemm"]["requires-dist"] == ["absl-py", "numpy", "torch"]
    assert "numpy" in doc["project"]["dependencies"]  # its build requirement, installed by stage 1
    # nothing to move: the very same resolution (the lock loop stops on identity)
    assert with_locked_stage2(m, staged, locked) is staged
    assert with_locked_stage2(m, res, {"numpy": "1.26.4"}) is res


@pytest.mark.parametrize("lock", LOCKS)
def test_committed_lock_builds_torch_importing_sdists_in_stage2(m: Matrix, lock: str) -> None:
    """Every package of a committed uv.lock that build_packages.toml records as sdist-only and importing torch at
    build is a stage-2 package of that lock (compile extra, no build isolation), never left for stage 1."""
    lockdir = REPO / "locks" / lock
    record = LockRecord.from_lockdir(lockdir)
    uv = tomllib.loads((lockdir / "pyproject.toml").read_text())["tool"]["uv"]
    for pkg in read_uv_lock(lockdir / "uv.lock"):
        if pkg.from_registry and not pkg.wheels and builds_only_in_stage2(m, pkg.name):
            assert pkg.name in record.stage2_packages, f"{lock}: {pkg.name} {pkg.version} is left in stage 1"
            assert pkg.name in uv["no-build-isolation-package"]
