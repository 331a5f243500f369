"""`envbuilder doctor` end to end on this machine (no GPU in CI) and with planning flags."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from envbuilder.host.gpus import find_gpu
from envbuilder.matrix import load_matrix


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", "doctor", *args],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))


def _has_nvml() -> bool:
    from envbuilder.host.nvml import read_nvml

    return read_nvml().ok


def test_doctor_json_on_this_machine() -> None:
    proc = run("--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    host = report["host"]
    assert set(host["tooling"]) == {"docker", "enroot", "apptainer", "mksquashfs"}
    assert host["uv_version"] == version("uv")
    assert host["glibc"] == os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    assert host["disk_free_gib"] > 0
    if not _has_nvml():
        assert host["source"] == "none" and host["gpus"] == [] and host["driver"] is None
        assert host["problems"][0].startswith("NVML not available")
    tags = [r.name for r in load_matrix().releases if not r.test_only]
    assert [r["tag"] for r in report["rows"]] == tags


def test_doctor_human_output_says_no_gpu_plainly() -> None:
    if _has_nvml():
        pytest.skip("this machine has NVML")
    proc = run()
    assert proc.returncode == 0
    assert "Traceback" not in proc.stderr
    assert "no NVIDIA GPU/NVML: " in proc.stderr
    assert "mksquashfs" in proc.stderr and f"uv {version('uv')}" in proc.stderr and "glibc" in proc.stderr


def test_doctor_reports_docker_through_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuilder.host.tooling import probe_docker

    status = probe_docker()
    assert status.detail  # either "daemon <version>" or why not
    if status.available:
        assert status.detail.startswith("daemon ") and "not reachable" not in status.detail
    else:
        assert status.detail.startswith(("daemon not reachable", "docker SDK not installed"))
    # a daemon that does not answer is a fact, not a crash
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    down = probe_docker(timeout_s=1)
    assert not down.available and down.detail.startswith("daemon not reachable")


def test_doctor_without_docker_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuilder.host.tooling import probe_docker

    monkeypatch.setitem(sys.modules, "docker", None)  # import docker -> ImportError
    assert probe_docker().detail == "docker SDK not installed (pip install docker)"


def test_planned_host_json(gpu_matrices: Path) -> None:
    proc = run("--driver", "545.23.06", "--gpu", "V100", "--gpus", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    host = report["host"]
    assert host["source"] == "planned" and host["driver"] == "545.23.06"
    assert len(host["gpus"]) == 8 and host["gpus"][0]["sm"] == "7.0"
    v100 = find_gpu("V100", load_matrix())
    assert v100 is not None and host["gpus"][0]["name"] == v100.name
    for row in report["rows"]:
        assert row["status"] in ("excluded", "unknown")
        if row["status"] == "excluded":
            assert any(r.startswith((f"{v100.name} (sm70): flash-attn", "driver 545.23.06")) for r in row["reasons"])


def test_planned_host_human(gpu_matrices: Path) -> None:
    proc = run("--sm", "9.0", "--gpus", "2", "--driver", "999.1")
    assert proc.returncode == 0, proc.stderr
    assert "planned from flags" in proc.stderr
    assert "GPU 0-1: planned GPU, sm90" in proc.stderr


@pytest.mark.parametrize(("args", "code", "text"), [
    (["--sm", "9"], 18, "--sm '9' is not a compute capability"),
    (["--driver", "new"], 18, "--driver 'new' is not a driver version"),
    (["--gpus", "0"], 18, "--gpus 0: a host needs at least one GPU"),
    (["--gpu", "NoSuchGPU"], 24, "not in matrices/gpus.toml"),
])
def test_doctor_bad_flags(args: list[str], code: int, text: str, gpu_matrices: Path) -> None:
    proc = run(*args, "--json")
    assert proc.returncode == code
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {json.loads(proc.stdout)['cause']}"]
    assert text in proc.stderr


def test_rows_wired_to_matrix_with_driver_floor(tmp_path: Path, gpu_matrices: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The real nemo.toml rows with a fixture cuda.toml (floor 560.28.03 for each row's CUDA)."""
    real = Path(__file__).resolve().parents[2] / "matrices"
    rows = [r for r in load_matrix(real).releases if not r.test_only and r.cuda.known]
    if not rows:
        pytest.skip("matrices/nemo.toml has no CUDA rows yet")
    d = tmp_path / "m"
    d.mkdir()
    for name in ("nemo.toml", "mbridge.toml", "smoke.toml", "gpus.toml"):
        (d / name).write_text((gpu_matrices / name).read_text() if name == "gpus.toml" else (real / name).read_text())
    shutil.copytree(real / "upstream", d / "upstream")  # the upstream locks the Megatron-Bridge rows cite
    cudas = sorted({str(r.cuda.value) for r in rows})
    (d / "cuda.toml").write_text("schema = 1\n" + "".join(
        f'[[release]]\ncuda = "{c}"\nversion = "{c}.0"\nlabel = "{c} GA"\n'
        f'min_driver_linux = {{ value = "560.28.03", source = "test fixture" }}\n' for c in cudas))
    monkeypatch.setenv("ENVBUILDER_MATRICES", str(d))
    proc = run("--driver", "545.23.06", "--gpu", "V100", "--json")
    assert proc.returncode == 0, proc.stderr
    verdicts = {v["tag"]: v for v in json.loads(proc.stdout)["rows"]}
    for r in rows:
        v = verdicts[r.name]
        assert v["status"] == "excluded"
        assert v["reasons"][0] == f"driver 545.23.06 < 560.28.03 needed by CUDA {r.cuda.value} ({r.label})"
        assert v["fixes"][0].startswith("upgrade the driver to 560.28.03 or newer, or use forward compatibility")
        if r.flash_attn.known:
            v100 = find_gpu("V100", load_matrix(d))
            assert v100 is not None
            assert v["reasons"][1].startswith(f"{v100.name} (sm70): flash-attn ")
            assert "needs sm80+" in v["reasons"][1]
    ok = json.loads(run("--driver", "570.86.15", "--gpu", "H100", "--json").stdout)
    assert {v["status"] for v in ok["rows"]} == {"ok"}
