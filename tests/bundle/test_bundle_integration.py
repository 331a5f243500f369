"""wheels -> bundle -> install on the smoke row, for real: uv, PyPI files, a real stage-2 build.

The smoke row's stage 2 is causal-conv1d built without its CUDA kernels against the CPU torch of
stage 1 (tests/conftest.py smoke_lockdir), so `wheels` really runs the sdist's setup.py. The
install runs with every proxy variable pointing at a closed port and uv told to stay offline:
the bundle must be the only source.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BLOCKED = "http://127.0.0.1:9"  # discard port: nothing listens, every connection is refused


def _cli(args: list[str], env: dict[str, str] | None = None, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})


def _offline_env() -> dict[str, str]:
    return {k: BLOCKED for k in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY")} | {
        "NO_PROXY": "", "no_proxy": ""}


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("envbuilder-cache")


@pytest.fixture(scope="session")
def smoke_wheelhouse(smoke_lockdir: Path, kernel_cache: Path, tmp_path_factory: pytest.TempPathFactory
                     ) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("wh") / "wheelhouse"
    proc = _cli(["wheels", str(smoke_lockdir), "-o", str(out), "--cache-dir", str(kernel_cache), "--json",
                 "--timings"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout)


def test_wheels_builds_abi_named_wheel_then_cache_hit(smoke_lockdir: Path, smoke_wheelhouse: tuple[Path, dict],
                                                      kernel_cache: Path, tmp_path: Path) -> None:
    first_dir, first = smoke_wheelhouse
    (pkg,) = first["packages"]
    assert pkg["name"] == "causal-conv1d" and pkg["cache"] == "miss"
    assert pkg["wheel"].startswith("causal_conv1d-1.6.2.post1+cputorch2.13cxx11abiTRUE-")
    assert pkg["arch_check"].startswith("skipped: CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE")
    assert pkg["timings"]["compile_seconds"] > 0 and pkg["timings"]["peak_rss_mb"] > 10
    again = _cli(["wheels", str(smoke_lockdir), "-o", str(tmp_path / "wh2"), "--cache-dir", str(kernel_cache),
                  "--json", "--timings"])
    assert again.returncode == 0, again.stderr[-2000:]
    (hit,) = json.loads(again.stdout)["packages"]
    assert hit["cache"] == "hit" and hit["cache_key"] == pkg["cache_key"]
    assert hit["timings"]["seconds"] < 5
    assert (tmp_path / "wh2" / hit["wheel"]).read_bytes() == (first_dir / pkg["wheel"]).read_bytes()
    # the wheelhouse record is the same bytes whether built or taken from the cache
    assert (tmp_path / "wh2" / "wheelhouse.json").read_bytes() == (first_dir / "wheelhouse.json").read_bytes()
    # another arch list changes nothing for a build without CUDA code, but a user file blocks -o
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    refused = _cli(["wheels", str(smoke_lockdir), "-o", str(foreign), "--cache-dir", str(kernel_cache)])
    assert refused.returncode != 0 and (foreign / "notes.txt").read_text() == "keep me"


@pytest.fixture(scope="session")
def smoke_bundle(smoke_lockdir: Path, smoke_wheelhouse: tuple[Path, dict], kernel_cache: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("bundle") / "smoke"
    proc = _cli(["bundle", str(smoke_lockdir), "-o", str(out), "--split", "60M", "--wheelhouse",
                 str(smoke_wheelhouse[0]), "--cache-dir", str(kernel_cache), "--json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout)


def test_bundle_installs_offline(smoke_bundle: tuple[Path, dict], tmp_path: Path) -> None:
    bundle, made = smoke_bundle
    parts = made["parts"]
    assert parts and all(p["size"] <= 60 * 2**20 for p in parts)
    venv = tmp_path / "venv"
    proc = _cli(["install", str(bundle), "--venv", str(venv), "--json", "--timings"], env=_offline_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["stage2"] == ["causal-conv1d"] and result["stage2_missing"] == []
    check = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import importlib.metadata as m, torch; "
                            "print(torch.__version__, m.version('causal-conv1d'), m.version('einops'))"],
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stderr[-2000:]
    assert check.stdout.split() == ["2.13.0+cpu", "1.6.2.post1+cputorch2.13cxx11abiTRUE", "0.8.1"]
    record = json.loads((venv / "envbuilder-install.json").read_text())
    assert record["lock_sha256"] == made["lock_sha256"]


def _copy_parts(bundle: Path, dest: Path) -> Path:
    """The bundle's files hard-linked (a 220 MB bundle twice more would fill a small CI disk)."""
    shutil.copytree(bundle, dest, copy_function=os.link)
    return dest


def test_corrupt_part_installs_nothing(smoke_bundle: tuple[Path, dict], tmp_path: Path) -> None:
    bundle = _copy_parts(smoke_bundle[0], tmp_path / "b")
    part = bundle / "bundle.tar.001"
    shutil.copyfile(part, part.with_suffix(".tmp"))  # break the hard link: only this copy is damaged
    part.with_suffix(".tmp").replace(part)
    with open(part, "r+b") as fh:
        fh.seek(1000)
        byte = fh.read(1)
        fh.seek(1000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    venv = tmp_path / "venv"
    proc = _cli(["install", str(bundle), "--venv", str(venv)], env=_offline_env())
    assert proc.returncode == 65, proc.stderr
    assert "bundle.tar.001" in proc.stderr and "Traceback" not in proc.stderr
    assert not venv.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".venv")]


def test_missing_part_installs_nothing(smoke_bundle: tuple[Path, dict], tmp_path: Path) -> None:
    bundle = _copy_parts(smoke_bundle[0], tmp_path / "b")
    (bundle / "bundle.tar.002").unlink()
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "envbuilder-install.json").write_text("{}")  # an earlier install: must survive untouched
    proc = _cli(["install", str(bundle), "--venv", str(venv)], env=_offline_env())
    assert proc.returncode == 66, proc.stderr
    assert "bundle.tar.002" in proc.stderr
    assert [p.name for p in venv.iterdir()] == ["envbuilder-install.json"]


def test_install_refuses_a_foreign_directory(smoke_bundle: tuple[Path, dict], tmp_path: Path) -> None:
    target = tmp_path / "project"
    target.mkdir()
    (target / "main.py").write_text("print('mine')\n")
    proc = _cli(["install", str(smoke_bundle[0]), "--venv", str(target)], env=_offline_env())
    assert proc.returncode != 0 and "not a venv envbuilder installed" in proc.stderr
    assert [p.name for p in target.iterdir()] == ["main.py"]


def test_host_torch_lock_bundle_build_install(smoke_wheelhouse: tuple[Path, dict], kernel_cache: Path,
                                              tmp_path: Path) -> None:
    """The GPU machines' flow on the smoke row: an interpreter that already has torch is the host;
    the lock keeps it, the bundle carries no torch, install sees it through --system-site-packages,
    stage 2 is built against it on the target from the bundle's sdists, offline."""
    (host_python,) = (kernel_cache / "venvs").glob("*/bin/python")  # CPU torch 2.13.0 (smoke stage 1)
    lockdir = tmp_path / "lock"
    proc = _cli(["lock", "--nemo", "smoke", "--mode", "host-torch", "--interpreter", str(host_python),
                 "-o", str(lockdir), "--no-detect", "--json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((lockdir / "envbuilder.lock.json").read_text())
    assert record["host"]["torch"]["version"] == "2.13.0+cpu" and "torch" not in record["pins"]
    assert "\n[[package]]\nname = \"torch\"" not in (lockdir / "uv.lock").read_text()
    bundle = tmp_path / "bundle"
    proc = _cli(["bundle", str(lockdir), "-o", str(bundle), "--cache-dir", str(kernel_cache)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list((bundle / "files").glob("torch-*"))
    venv = tmp_path / "venv"
    install = ["install", str(bundle), "--venv", str(venv), "--python", str(host_python), "--system-site-packages"]
    proc = _cli(install, env=_offline_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    wh = tmp_path / "wh"
    # install kept the lock and the stage-2 sdists in the venv: the target needs nothing else
    proc = _cli(["wheels", str(venv / "envbuilder-lock"), "-o", str(wh), "--torch-from", "host", "--interpreter",
                 str(venv / "bin" / "python"), "--sdists", str(venv / "envbuilder-sdists"), "--cache-dir",
                 str(tmp_path / "fresh-cache"), "--json"], env=_offline_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["packages"][0]["cache"] == "miss"
    proc = _cli([*install, "--wheelhouse", str(wh)], env=_offline_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import importlib.metadata as m, torch; print(torch.__file__, m.version('causal-conv1d'))"],
                           capture_output=True, text=True, timeout=600)
    torch_file, conv = check.stdout.split()
    assert torch_file.startswith(str(host_python.parent.parent)) and conv.endswith("+cputorch2.13cxx11abiTRUE")
    # the torch-less interpreter of this test run is not the lock's host: refused, nothing replaced
    proc = _cli(["install", str(bundle), "--venv", str(venv), "--python", sys.executable, "--system-site-packages"],
                env=_offline_env())
    assert proc.returncode in (63, 69), proc.stderr
    assert (venv / "bin" / "python").exists()


def test_build_installs_stage2_from_the_wheelhouse(smoke_lockdir: Path, smoke_wheelhouse: tuple[Path, dict],
                                                   debian_base_image: str) -> None:
    """`build --wheelhouse`: stage 2 is the wheelhouse's ABI-named wheel, not a compile; the runtime
    image carries the venv only (stage 1 comes from BuildKit's cache of the smoke image)."""
    wh, made = smoke_wheelhouse
    tag = "envbuilder-test/smoke:wheelhouse"
    proc = _cli(["build", str(smoke_lockdir), "--tag", tag, "--base", debian_base_image, "--no-scan",
                 "--wheelhouse", str(wh)], timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = subprocess.run(["docker", "run", "--rm", tag, "/opt/venv/bin/python", "-c",
                          "import importlib.metadata as m, os; print(m.version('causal-conv1d'), "
                          "os.path.exists('/opt/envbuilder/wheelhouse'))"],
                         capture_output=True, text=True, timeout=600)
    assert out.stdout.split() == [made["packages"][0]["version"] + "+cputorch2.13cxx11abiTRUE", "False"], out.stderr


def _procs_mentioning(text: str) -> list[str]:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(d / "cwd")
        except OSError:
            continue
        if text in cmd or text in cwd:
            found.append(f"{d.name}: {cmd[:120]}")
    return found


def test_wheels_interrupted_mid_compile_leaves_nothing_running(smoke_lockdir: Path, smoke_wheelhouse: tuple,
                                                                kernel_cache: Path, tmp_path: Path) -> None:
    """SIGTERM while setup.py compiles: the build's process group is stopped, -o is not created,
    and the cache gets no entry (only the kept build directory with its log)."""
    import signal
    import time

    cache = tmp_path / "cache"
    shutil.copytree(kernel_cache / "venvs", cache / "venvs", symlinks=True)  # the stage-1 venv, not the wheel
    out = tmp_path / "wh"
    proc = subprocess.Popen([sys.executable, "-m", "envbuilder", "wheels", str(smoke_lockdir), "-o", str(out),
                             "--cache-dir", str(cache)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not list((cache / "build").glob("*/causal-conv1d.build.log")):
        time.sleep(0.2)
    assert list((cache / "build").glob("*/causal-conv1d.build.log")), "the build never started"
    time.sleep(2)  # setup.py is running
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err.decode()[-2000:]
    time.sleep(1)
    assert _procs_mentioning(str(cache / "build")) == []
    assert not out.exists() and not list((cache / "wheels").glob("*/entry.json"))
