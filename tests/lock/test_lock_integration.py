"""Real `uv lock` against PyPI: determinism, --check, and stage 2 locked from metadata records."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.errors import LockOutOfDateError, NoCudaSourcesError
from envbuilder.lock import LockOptions, open_lockdir, run_lock
from envbuilder.lock.uvlock import read_uv_lock
from envbuilder.matrix import load_matrix
from envbuilder.resolve import ResolveRequest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
FILES = ("pyproject.toml", "uv.lock", "envbuilder.lock.json")


def test_two_locks_are_byte_identical_and_check_detects_drift(tmp_path: Path) -> None:
    m = load_matrix(REPO / "matrices")
    a = run_lock(m, ResolveRequest(row="smoke"), LockOptions(output=tmp_path / "a"))
    b = run_lock(m, ResolveRequest(row="smoke"), LockOptions(output=tmp_path / "b"))
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert a.record.lock_sha256 == b.record.lock_sha256
    assert open_lockdir(tmp_path / "a").record.row == "smoke"

    # --check on an up-to-date lock: passes and writes nothing
    again = run_lock(m, ResolveRequest(row="smoke"), LockOptions(output=tmp_path / "a", check=True))
    assert again.changed is False

    # change an input (a matrix copy with another cutoff): --check fails, nothing is touched
    mdir = tmp_path / "matrices"
    shutil.copytree(REPO / "matrices", mdir)
    smoke = mdir / "smoke.toml"
    smoke.write_text(smoke.read_text().replace("2026-07-15T00:00:00Z", "2026-07-20T00:00:00Z"))
    before = {n: (tmp_path / "a" / n).read_bytes() for n in FILES}
    with pytest.raises(LockOutOfDateError):
        run_lock(load_matrix(mdir), ResolveRequest(row="smoke"), LockOptions(output=tmp_path / "a", check=True))
    assert {n: (tmp_path / "a" / n).read_bytes() for n in FILES} == before


def test_cli_lock_check_exit_code(tmp_path: Path) -> None:
    env_py = [sys.executable, "-m", "envbuilder"]
    out = tmp_path / "lk"
    first = subprocess.run([*env_py, "lock", "--nemo", "smoke", "--no-detect", "-o", str(out)],
                           capture_output=True, text=True, cwd=REPO, check=False)
    assert first.returncode == 0, first.stderr
    check = subprocess.run([*env_py, "lock", "--nemo", "smoke", "--no-detect", "-o", str(out), "--check"],
                           capture_output=True, text=True, cwd=REPO, check=False)
    assert check.returncode == 0, check.stderr
    (out / "pyproject.toml").write_text((out / "pyproject.toml").read_text() + "\n# hand edit\n")
    drift = subprocess.run([*env_py, "lock", "--nemo", "smoke", "--no-detect", "-o", str(out), "--check"],
                           capture_output=True, text=True, cwd=REPO, check=False)
    assert drift.returncode == 16 and "out of date" in drift.stderr
    assert (out / "pyproject.toml").read_text().endswith("# hand edit\n")  # --check writes nothing


def test_nemo_row_locks_stage2_from_metadata_records_without_building(tmp_path: Path) -> None:
    m = load_matrix(REPO / "matrices")
    # v2.7.0: every stage-2 sdist it pins ships CUDA sources (v2.3.0's mamba-ssm 2.2.0 / causal-conv1d
    # 1.2.2.post1 do not, and no release before its cutoff does: see
    # test_kernel_less_row_pins_build_from_their_git_tags)
    res = run_lock(m, ResolveRequest(row="v2.7.0"), LockOptions(output=tmp_path / "lk", verbose_uv=True))
    stage2 = res.record.stage2_packages
    assert {"transformer-engine-torch", "flash-attn", "mamba-ssm"} <= set(stage2)
    locked = {p.name: p for p in read_uv_lock(tmp_path / "lk" / "uv.lock")}
    log = res.uv_log
    for name in stage2:
        version = res.record.pins[name].version
        assert locked[name].version == version
        assert f"Found dependency metadata entry for `{name}=={version}`" in log, name
        # uv never prepared (built) its metadata; stage-1 sdists such as jieba legitimately are
        assert f"Preparing metadata for: {name}==" not in log, name
        assert f"Using cached metadata for: {name}==" not in log, name  # nor a build from an earlier run
    # the checks above would notice a build: the log names sdist metadata, freshly built (online)
    # or taken from the uv cache (offline-first)
    assert "Preparing metadata for: " in log or "Using cached metadata for: " in log
    assert "Failed to build" not in log
    # sdist-only packages really are locked as sdists (nothing prebuilt on PyPI to fall back to)
    for name in ("flash-attn", "mamba-ssm", "transformer-engine-torch"):
        assert locked[name].has_sdist and not locked[name].wheels, name
    assert res.record.exclude_newer and res.record.files["uv.lock"] == res.record.lock_sha256


def test_kernel_less_row_pins_build_from_their_git_tags(tmp_path: Path) -> None:
    """v2.3.0 pins PyPI's mamba-ssm 2.2.0 / causal-conv1d 1.2.2.post1, whose sdists have no csrc/. The
    decision (README "Quick start"): `lock --nemo v2.3.0` records the repositories' tags (commit and tree,
    cited from the matrix) as git_sources, nothing as kernel_less, so `build` does not refuse the row: it goes
    on to fetch the tags (here with every route closed: exit 118 naming them, before any engine work). A
    --set pin of a kernel-less version whose tag the matrix does not record is still refused."""
    out = tmp_path / "lk"
    proc = subprocess.run([sys.executable, "-m", "envbuilder", "lock", "--nemo", "v2.3.0", "--no-detect",
                           "-o", str(out)], capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "holds no CUDA sources" in proc.stderr and "stage 2 builds it from" in proc.stderr
    record = json.loads((out / "envbuilder.lock.json").read_text())
    assert "kernel_less" not in record
    assert {k: (v["tag"], v["commit"]) for k, v in record["git_sources"].items()} == {
        "causal-conv1d": ("v1.2.2.post1", "de688f7650aafee4804ffa0875c9c92054d737c4"),
        "mamba-ssm": ("v2.2.0", "95a2041e7b046df49b23cd3091309c8b464e50f2")}
    # uv.lock keeps the PyPI pins (their metadata resolved the lock)
    locked = {p.name: p.version for p in read_uv_lock(out / "uv.lock")}
    assert locked["mamba-ssm"] == "2.2.0" and locked["causal-conv1d"] == "1.2.2.post1"
    closed = {**os.environ, "ENVBUILDER_CACHE_DIR": str(tmp_path / "cache"), "ENVBUILDER_GIT_MIRRORS": "",
              "HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
    build = subprocess.run([sys.executable, "-m", "envbuilder", "build", str(out), "--tag", "envbuilder-test/kl:x"],
                           capture_output=True, text=True, cwd=REPO, timeout=300, env=closed)
    assert build.returncode == 118, build.stderr[-2000:]
    assert "state-spaces/mamba" in build.stderr or "causal-conv1d" in build.stderr
    assert "--git-mirror" in build.stderr and "Traceback" not in build.stderr
    m = load_matrix(REPO / "matrices")
    explicit = tmp_path / "explicit"
    with pytest.raises(NoCudaSourcesError) as err:
        run_lock(m, ResolveRequest(row="v2.3.0", overrides=(("mamba-ssm", "2.2.1"),)), LockOptions(output=explicit))
    assert "holds no CUDA sources" in err.value.cause and not explicit.exists()


def test_release_2604_locks_megatron_bridge_stack(tmp_path: Path) -> None:
    """`lock --release 26.04`: a real uv.lock from PyPI for the Megatron-Bridge 0.4 stack."""
    out = tmp_path / "lk"
    proc = subprocess.run([sys.executable, "-m", "envbuilder", "lock", "--release", "26.04", "--no-detect",
                           "-o", str(out), "--json"], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout)["record"]
    assert record["row"] == "26.04" and record["inputs"]["release"] == "26.04"
    assert record["target"]["python"] == "3.12" and record["target"]["cuda"] == "13.0"
    assert record["target"]["min_driver"] == "580.95.05"  # CUDA 13.0 Update 2, what PyPI's torch 2.11.0 bundles
    locked = {p.name: p.version for p in read_uv_lock(out / "uv.lock")}
    assert locked["megatron-bridge"] == "0.4.0" and locked["megatron-core"] == "0.17.0"
    assert locked["torch"] == "2.11.0" and locked["transformer-engine-torch"] == "2.14.0"
    assert locked["mamba-ssm"] == "2.3.1" and locked["causal-conv1d"] == "1.6.1"
    assert "flash-attn" not in locked and "nemo-toolkit" not in locked
    # torch 2.11.0 pins cuBLAS 13.1 (via cuda-toolkit 13.0.2), which TE 2.14's core library cannot load
    # with: the row's override makes uv lock the CUDA 13.1 line's cuBLAS instead
    assert "nvidia-cublas>=13.2,<13.3" in (out / "pyproject.toml").read_text()
    assert locked["nvidia-cublas"].startswith("13.2.")
    assert record["provenance"]["nvidia-cublas"].startswith("matrix:mbridge.toml#26.04.override_dependencies")
    # upstream's own lock of v0.4.0 is the target: its versions are pinned, every difference has a reason
    fidelity = record["fidelity"]
    assert fidelity["target"] == "NVIDIA-NeMo/Megatron-Bridge:uv.lock@v0.4.0" and fidelity["percent"] >= 95.0
    assert "unexplained" not in fidelity["by_reason"]
    assert locked["urllib3"] == "2.6.3" and locked["colorful"] == "0.6.0a1"  # upstream's CVE fix and pre-release
    assert (out / "uv.lock").read_bytes() == (REPO / "locks" / "26.04" / "uv.lock").read_bytes()


def test_release_2608_is_the_derived_row_and_matches_upstream(tmp_path: Path) -> None:
    """26.08 (Megatron-Bridge 0.6.0) has no published table: the row is derived, the lock says so."""
    out = tmp_path / "lk"
    proc = subprocess.run([sys.executable, "-m", "envbuilder", "lock", "--release", "26.08", "--no-detect",
                           "-o", str(out), "--json"], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "release 26.08 is derived from its release's own artifacts" in proc.stderr
    assert "fidelity: " in proc.stderr and "agree with NVIDIA-NeMo/Megatron-Bridge:uv.lock@v0.6.0" in proc.stderr
    record = json.loads(proc.stdout)["record"]
    assert any("is derived from its release's own artifacts" in w for w in record["warnings"])
    assert record["fidelity"]["percent"] >= 95.0 and "unexplained" not in record["fidelity"]["by_reason"]
    assert (out / "uv.lock").read_bytes() == (REPO / "locks" / "26.08" / "uv.lock").read_bytes()


def test_release_2606_locks_for_its_containers_glibc_by_default(tmp_path: Path) -> None:
    """26.06 only locks on glibc 2.39 (NVRX 0.6.0 is manylinux_2_39 only): the row's glibc is the default."""
    out = tmp_path / "lk"
    proc = subprocess.run([sys.executable, "-m", "envbuilder", "lock", "--release", "26.06", "--no-detect",
                           "-o", str(out), "--json"], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout)["record"]
    assert record["inputs"]["glibc"] == "2.39" and record["target"]["glibc"] == "2.39"
    assert record["provenance"]["glibc"] == "matrix:mbridge.toml#26.06.glibc"
    locked = {p.name: p.version for p in read_uv_lock(out / "uv.lock")}
    assert locked["nvidia-resiliency-ext"] == "0.6.0" and locked["nvidia-cublas"].startswith("13.2.")
    # an explicit --glibc still wins, and 2.35 cannot lock this row
    bad = subprocess.run([sys.executable, "-m", "envbuilder", "lock", "--release", "26.06", "--no-detect",
                          "--glibc", "2.35", "-o", str(tmp_path / "old")], capture_output=True, text=True, timeout=1500)
    assert bad.returncode != 0 and "manylinux_2_39" in bad.stderr and not (tmp_path / "old" / "uv.lock").exists()


def test_release_2602_moves_nv_grouped_gemm_from_the_graph_to_stage2(tmp_path: Path) -> None:
    """26.02: megatron-core 0.16 [dev] brings nv-grouped-gemm, a torch-importing sdist no row field pins. The
    first `uv lock` finds it, the lock moves it to stage 2 and locks again: the committed lock, byte for byte."""
    out = tmp_path / "lk"
    proc = subprocess.run([sys.executable, "-m", "envbuilder", "lock", "--release", "26.02", "--no-detect",
                           "-o", str(out), "--json"], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nv-grouped-gemm 1.1.4.post8 is in the locked graph and builds only against torch" in proc.stderr
    record = json.loads(proc.stdout)["record"]
    assert "nv-grouped-gemm" in record["stage2_packages"] and "nv-grouped-gemm" in record["stage1_deferred"]
    assert record["pins"]["nv-grouped-gemm"]["stage"] == 2
    for name in FILES:
        assert (out / name).read_bytes() == (REPO / "locks" / "26.02" / name).read_bytes(), name
