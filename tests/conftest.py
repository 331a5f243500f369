"""Shared test configuration.

Unit tests run first; tests marked `integration` (real PyPI, real Docker engine,
real squashfs tools) are moved to the end of the run so a fast failure shows early.
GPU tests are marked `gpu` and skipped when no NVIDIA GPU is visible (always in CI).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
# Apptainer (sid rootfs) and Slurm (localhost daemons) fixtures, and the smoke SIF
pytest_plugins = ["runtime_fixtures"]

# A test run started in the background by a shell without job control (`cmd &` in a script, nohup) inherits
# SIGINT ignored, and so would every envbuilder the tests start: Python keeps an inherited SIG_IGN and then
# installs no KeyboardInterrupt handler. The signal tests must be able to deliver it, so the run takes SIGINT
# back (a handler, not SIG_IGN, is reset to the default in every child at exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = int(pynvml.nvmlDeviceGetCount())
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


@pytest.fixture(scope="session", autouse=True)
def _private_export_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Exports made by tests (and the CLIs they run) file their artifacts in a session temp dir,
    never in the user's ~/.cache/envbuilder/exports."""
    import os

    old = os.environ.get("ENVBUILDER_EXPORT_CACHE")
    os.environ["ENVBUILDER_EXPORT_CACHE"] = str(tmp_path_factory.mktemp("export-cache"))
    yield
    if old is None:
        os.environ.pop("ENVBUILDER_EXPORT_CACHE", None)
    else:
        os.environ["ENVBUILDER_EXPORT_CACHE"] = old


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda it: 1 if it.get_closest_marker("integration") else 0)
    if not _has_gpu():
        skip = pytest.mark.skip(reason="no NVIDIA GPU visible (CI has none); run on the device machine")
        for it in items:
            if it.get_closest_marker("gpu"):
                it.add_marker(skip)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def uv_bin() -> str:
    from uv import find_uv_bin

    path = find_uv_bin()
    assert shutil.which(path) or Path(path).exists()
    return str(path)


# --- doctor / check-parallel ---------------------------------------------------

# Used only while matrices/gpus.toml is missing (or lacks these GPUs); otherwise the real table is used.
_FIXTURE_GPUS = """
schema = 1
[[gpu]]
name = "H100"
aliases = ["NVIDIA H100 80GB HBM3"]
sm = { value = "9.0", source = "test fixture" }
memory_gib = { value = 80, source = "test fixture" }
datacenter = { value = true, source = "test fixture" }
[[gpu]]
name = "A100"
aliases = ["NVIDIA A100-SXM4-80GB"]
sm = { value = "8.0", source = "test fixture" }
memory_gib = { value = 80, source = "test fixture" }
datacenter = { value = true, source = "test fixture" }
[[gpu]]
name = "V100"
aliases = ["Tesla V100-SXM2-32GB"]
sm = { value = "7.0", source = "test fixture" }
memory_gib = { value = 32, source = "test fixture" }
datacenter = { value = true, source = "test fixture" }
"""


@pytest.fixture()
def gpu_matrices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A matrices dir with a GPU table (H100, A100, V100): the real one, or a fixture until it exists."""
    real = REPO / "matrices"
    if (real / "gpus.toml").exists():
        from envbuilder.errors import MatrixFileError
        from envbuilder.matrix import load_matrix

        names = ("H100", "A100", "V100", "NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB")
        try:
            usable = all(load_matrix(real).gpu(n) is not None for n in names)
        except MatrixFileError:  # another matrix file mid-edit: the GPU table alone is what these tests need
            usable = False
        if usable:
            monkeypatch.setenv("ENVBUILDER_MATRICES", str(real))
            return real
    d = tmp_path / "matrices"
    d.mkdir()
    for name in ("smoke.toml", "recipes.toml"):
        shutil.copy(real / name, d / name)
    (d / "gpus.toml").write_text(_FIXTURE_GPUS)
    monkeypatch.setenv("ENVBUILDER_MATRICES", str(d))
    return d


# --- build fixtures ---
# Session-scoped and built for real: the Debian test base (mmdebstrap + docker import, skipped
# when the tag exists), a smoke lock dir made by `envbuilder lock --nemo smoke`, and the smoke
# image built from it by `envbuilder build` (BuildKit layer cache and the uv cache mount make
# repeat sessions fast). Export and certify tests use smoke_image / smoke_lockdir.
SMOKE_TORCH_WHEELS = Path("/opt/wheels")


def _envbuilder_cli(args: list[str], timeout: int) -> str:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    if proc.returncode != 0:
        pytest.fail(f"envbuilder {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc.stdout


@pytest.fixture(scope="session")
def debian_base_image() -> str:
    """Tag of the bootstrapped Debian bookworm base (python3 3.11), e.g. envbuilder/test-base:bookworm."""
    from envbuilder.image.baseimage import bootstrap

    return bootstrap()


@pytest.fixture(scope="session")
def smoke_lockdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lock dir for the smoke row, made once per session by the real `envbuilder lock`.

    Uses the local CPU torch wheel (--find-links /opt/wheels) when it is there; a fresh machine
    without it locks PyPI's torch (the CUDA build, ~3 GB with its nvidia wheels).
    """
    out = tmp_path_factory.mktemp("smoke-lock") / "smoke"
    args = ["lock", "--nemo", "smoke", "-o", str(out), "--no-detect"]
    if any(SMOKE_TORCH_WHEELS.glob("torch-*.whl")):
        args += ["--find-links", str(SMOKE_TORCH_WHEELS)]
    _envbuilder_cli(args, timeout=900)
    return out


@pytest.fixture(scope="session")
def smoke_image(debian_base_image: str, smoke_lockdir: Path) -> str:
    """Tag of the smoke image (runtime target), built once per session by `envbuilder build`."""
    import json

    record = json.loads((smoke_lockdir / "envbuilder.lock.json").read_text())
    tag = f"envbuilder-test/smoke:{record['lock_sha256'][:12]}"
    out = _envbuilder_cli(["build", str(smoke_lockdir), "--tag", tag, "--base", debian_base_image,
                           "--no-scan", "--json"], timeout=3600)
    assert json.loads(out)["tag"] == tag
    return tag


# --- certify fixtures ---
CERTIFY_TORCH = "torch==2.13.0"


@pytest.fixture(scope="session")
def certify_torch_venv(tmp_path_factory: pytest.TempPathFactory, uv_bin: str) -> Path:
    """A venv with CPU torch for the certify CPU tests (the test venv itself has no torch).

    Uses the local wheel in /opt/wheels when present; a fresh machine falls back to PyPI's
    torch (the CUDA build, ~3 GB). Skips with the reason when neither can be installed.
    """
    import subprocess
    import sys

    venv = tmp_path_factory.mktemp("certify-torch") / "venv"
    made = subprocess.run([uv_bin, "venv", "-q", "--python", sys.executable, str(venv)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"uv venv failed: {made.stderr.strip()[-300:]}")
    cmd = [uv_bin, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), CERTIFY_TORCH]
    if SMOKE_TORCH_WHEELS.is_dir():
        cmd += ["--find-links", str(SMOKE_TORCH_WHEELS)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        pytest.skip(f"cannot install {CERTIFY_TORCH} (no /opt/wheels wheel and PyPI failed): "
                    f"{done.stderr.strip()[-300:]}")
    return venv


# ---- uv cache hygiene -------------------------------------------------------------------------
# A lock made with --find-links copies the local torch wheel into <lockdir>/wheels/, and uv caches a
# path wheel per path: every test lock directory that is synced unpacks its own 700 MB copy of the
# CPU torch into uv's archive cache (about 30 per run, 20 GB). At the end of the session keep the
# newest two copies of each distribution this session unpacked and remove the rest; uv re-unpacks
# whatever it misses, so this never changes a result.
_SESSION_START = time.time()


def _uv_cache_dir() -> Path | None:
    uv = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "uv"
    if not uv.exists():
        return None
    try:
        out = subprocess.run([str(uv), "cache", "dir"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    cache = _uv_cache_dir()
    archives = cache / "archive-v0" if cache else None
    if archives is None or not archives.is_dir():
        return
    copies: dict[str, list[tuple[float, Path]]] = {}
    for entry in archives.iterdir():
        try:
            mtime = entry.stat().st_mtime
            names = [n for n in os.listdir(entry) if n.endswith(".dist-info")]
        except OSError:
            continue
        if mtime < _SESSION_START:
            continue
        for name in names:
            copies.setdefault(name, []).append((mtime, entry))
    for entries in copies.values():
        for _, entry in sorted(entries, reverse=True)[2:]:
            shutil.rmtree(entry, ignore_errors=True)


# --- a real bundle of a tiny lock, made offline (test_faults, test_signals) ---


@pytest.fixture(scope="session")
def bundle_master(tmp_path_factory: pytest.TempPathFactory, http_server: Any) -> dict[str, Path]:
    """A lock of the smoke row (with its stage-2 sdist) against a hashed index on the session's HTTP server,
    and its bundle twice: as a directory and split into parts. Made once; tests damage copies."""
    import sys

    from faultkit import hashed_index

    hashed_index(http_server.root / "faultkit")
    root = tmp_path_factory.mktemp("bundle-master")
    env = {**os.environ, "UV_NO_INDEX": "1", "UV_FIND_LINKS": f"{http_server.url}/faultkit/index.html",
           "UV_CACHE_DIR": str(root / "uv-cache")}
    env.pop("UV_OFFLINE", None)
    out = {"lock": root / "lock", "unsplit": root / "bundle", "split": root / "split", "cache": root / "cache"}
    for args in (["lock", "--nemo", "smoke", "--no-detect", "-o", str(out["lock"])],
                 ["bundle", str(out["lock"]), "-o", str(out["unsplit"]), "--cache-dir", str(out["cache"])],
                 ["bundle", str(out["lock"]), "-o", str(out["split"]), "--split", "1M", "--cache-dir",
                  str(out["cache"])]):
        proc = subprocess.run([sys.executable, "-m", "envbuilder", *args], env=env, capture_output=True, text=True,
                              cwd=REPO, check=False, timeout=600)
        assert proc.returncode == 0, proc.stderr
    return out


# --- CUDA tools without a GPU ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def cuda_home() -> Path:
    """nvcc and cuobjdump from NVIDIA's PyPI wheels (scripts/cuda-tools.sh, cached under build/): the toolkit
    root (bin/nvcc, bin/cuobjdump). Compiles for any arch; runs nothing on a GPU."""
    if shutil.which("g++") is None:
        pytest.fail("g++ is missing: run scripts/setup-host.sh (nvcc needs a host compiler)")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "cuda-tools.sh"), str(REPO / "build" / "cuda-tools" /
                                                                              "13.2.86")],
                          capture_output=True, text=True, timeout=1800, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Path(proc.stdout.strip().splitlines()[-1])
