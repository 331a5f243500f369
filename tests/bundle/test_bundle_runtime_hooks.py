"""install's startup hook for Transformer Engine < 2.4 in a hermetic venv (bundle/runtime_hooks.py).

The real failure, seen on the v2.3.0 lock (TE 2.2.0) in a venv with no CUDA toolkit: libtransformer_engine.so
needs libcudnn_adv.so.9, which only the nvidia-cudnn wheel has and nothing loads, and TE looks for NVRTC only in
CUDA_HOME//usr/local/cuda. The test rebuilds that shape with real shared libraries compiled here: a "TE" whose
import dlopens a library linked against a "cuDNN" sub-library living in the venv's nvidia/cudnn/lib."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.bundle.runtime_hooks import MODULE, needs_te_hook, write_runtime_hooks
from envbuilder.matrix.load import load_matrix
from envbuilder.matrix.model import Fact

SINCE = Fact("2.4.0", "test")


def test_the_hook_is_for_te_before_the_version_the_matrix_names() -> None:
    since = load_matrix().te_loads_pip_libraries_since
    assert since is not None and since.value == "2.4.0" and "@v2.4" in since.source
    assert needs_te_hook("2.2.0", since) and needs_te_hook("2.3.0", since)
    assert not needs_te_hook("2.4.0", since) and not needs_te_hook("2.14.0", since)
    assert not needs_te_hook(None, since) and not needs_te_hook("2.2.0", None)
    assert not needs_te_hook("2.2.0", Fact("unknown", "x"))


def _venv(tmp: Path) -> Path:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv


def _cc(out: Path, src: str, *args: str) -> None:
    c = out.with_suffix(".c")
    c.write_text(src)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(c), *args], check=True)


def _fake_stack(venv: Path, tmp: Path) -> Path:
    """nvidia/cudnn/lib/{libcudnn.so.9, libcudnn_adv.so.9}, nvidia/cuda_nvrtc/, and a transformer_engine package
    whose import loads a library that needs libcudnn_adv.so.9 (no RUNPATH: as TE 2.2's wheel_lib)."""
    site = next((venv / "lib").glob("python3.*/site-packages"))
    lib = site / "nvidia" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    (site / "nvidia" / "cuda_nvrtc" / "lib").mkdir(parents=True)
    _cc(lib / "libcudnn.so.9", "int cudnn_main(void) { return 9; }\n", "-Wl,-soname,libcudnn.so.9")
    _cc(lib / "libcudnn_adv.so.9", "int cudnn_adv(void) { return 1; }\n", "-Wl,-soname,libcudnn_adv.so.9")
    te = site / "transformer_engine"
    te.mkdir()
    _cc(te / "libte.so", "int cudnn_adv(void);\nint te(void) { return cudnn_adv() + 41; }\n",
        f"-L{lib}", "-l:libcudnn_adv.so.9")
    (te / "__init__.py").write_text(
        "import ctypes, os\n"
        "LIB = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'libte.so'))\n"
        "ANSWER = LIB.te()\n")
    return site


def _import_te(venv: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")}
    return subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import os, transformer_engine as t; print(t.ANSWER, os.environ.get('CUDA_HOME'))"],
                          capture_output=True, text=True, env=env)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (scripts/setup-host.sh installs it)")
def test_without_the_hook_te_cannot_import_and_with_it_it_does(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    site = _fake_stack(venv, tmp_path)
    before = _import_te(venv)
    assert before.returncode != 0 and "libcudnn_adv.so.9" in before.stderr  # the failure seen with TE 2.2.0
    hooks = write_runtime_hooks(venv, "2.2.0", SINCE, sees_host_packages=False)
    assert [h.name for h in hooks] == ["transformer-engine-pip-libraries"]
    assert (site / f"{MODULE}.pth").read_text() == f"import {MODULE}\n"
    after = _import_te(venv)
    assert after.returncode == 0, after.stderr
    answer, cuda_home = after.stdout.split()
    assert answer == "42" and cuda_home == str(site / "nvidia" / "cuda_nvrtc")
    # a CUDA_HOME the user set wins
    env = {**os.environ, "CUDA_HOME": "/opt/mine"}
    mine = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import os, transformer_engine; print(os.environ['CUDA_HOME'])"],
                          capture_output=True, text=True, env=env)
    assert mine.stdout.strip() == "/opt/mine"
    # an interpreter start that never imports TE loads nothing
    quiet = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import sys; print('transformer_engine' in sys.modules)"], capture_output=True, text=True)
    assert quiet.stdout.strip() == "False"


def test_no_hook_where_it_is_not_needed(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    assert write_runtime_hooks(venv, "2.2.0", SINCE, sees_host_packages=False) == []  # no nvidia wheels
    (site / "nvidia" / "cudnn").mkdir(parents=True)
    assert write_runtime_hooks(venv, "2.14.0", SINCE, sees_host_packages=False) == []  # TE does it itself
    assert write_runtime_hooks(venv, "2.2.0", SINCE, sees_host_packages=True) == []    # host-torch venv
    assert not list(site.glob(f"{MODULE}*"))
