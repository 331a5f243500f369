"""What a venv needs at run time that its wheels do not do themselves, written by `install` as a startup hook.

Transformer Engine before 2.4 loads from the nvidia-cudnn wheel only `libcudnn.so.9` itself, and NVRTC only from
CUDA_HOME, CUDA_PATH, /usr/local/cuda or ldconfig (matrices/transformer_engine.toml [[loader]]). In a hermetic
venv on a host with no CUDA toolkit of its major, `import transformer_engine` then fails on `libcudnn_adv.so.9`
(seen on the v2.3.0 lock: TE 2.2.0), or loads the host's NVRTC of another major from /usr/local/cuda. An
image has both in its CUDA base; a venv gets this hook instead:

  `_envbuilder_runtime.py` + `_envbuilder_runtime.pth` in site-packages. At interpreter start the .pth only
  registers an import finder. When `transformer_engine` is first imported, the finder loads every library of
  the venv's own nvidia-cudnn wheel with RTLD_GLOBAL (as TE 2.4 does itself) and, unless CUDA_HOME/CUDA_PATH
  is set, points CUDA_HOME at the venv's nvidia-cuda-nvrtc wheel (TE globs it for libnvrtc). Then it steps aside.

Nothing is written for a TE that does this itself, a venv that sees the host's packages (host-torch mode: the
host's torch brings its own libraries), or a venv without those wheels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from envbuilder.matrix.model import Fact

MODULE = "_envbuilder_runtime"

# stdlib only: it runs in the venv's interpreter at every start (the .pth) and at TE's first import
HOOK_SOURCE = '''"""Written by envbuilder install (envbuilder/bundle/runtime_hooks.py): before transformer_engine
(< 2.4) is imported, load the venv's own cuDNN libraries and point CUDA_HOME at its NVRTC, which that TE
cannot find itself."""
import ctypes
import glob
import importlib.abc
import os
import sys
import sysconfig


class _BeforeTransformerEngine(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "transformer_engine":
            return None
        sys.meta_path.remove(self)
        nvidia = os.path.join(sysconfig.get_path("purelib"), "nvidia")
        # libcudnn.so.9 first: the others need it
        for lib in sorted(glob.glob(os.path.join(nvidia, "cudnn", "lib", "lib*.so.*[0-9]")),
                          key=lambda p: (not os.path.basename(p).startswith("libcudnn.so"), p)):
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                print(f"envbuilder runtime hook: cannot load {lib}: {exc}", file=sys.stderr)
        nvrtc = os.path.join(nvidia, "cuda_nvrtc")
        if not os.environ.get("CUDA_HOME") and not os.environ.get("CUDA_PATH") and os.path.isdir(nvrtc):
            os.environ["CUDA_HOME"] = nvrtc
        return None


if not any(type(f).__name__ == "_BeforeTransformerEngine" for f in sys.meta_path):
    sys.meta_path.insert(0, _BeforeTransformerEngine())
'''


@dataclass(frozen=True)
class RuntimeHook:
    """One hook install wrote into a venv, and why (reported by install and kept in envbuilder-install.json)."""

    name: str
    reason: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason, "source": self.source}


def needs_te_hook(te_version: str | None, since: Fact | None) -> bool:
    if not te_version or since is None or not since.known:
        return False
    try:
        return Version(te_version) < Version(str(since.value))
    except InvalidVersion:
        return False


def site_packages(venv: Path) -> Path | None:
    found = sorted((venv / "lib").glob("python3.*/site-packages"))
    return found[0] if found else None


def write_runtime_hooks(venv: Path, te_version: str | None, since: Fact | None,
                        sees_host_packages: bool) -> list[RuntimeHook]:
    """Write the hooks this venv needs (see the module docstring); return what was written."""
    site = site_packages(venv)
    if site is None or sees_host_packages or not needs_te_hook(te_version, since):
        return []
    if not (site / "nvidia" / "cudnn").is_dir() and not (site / "nvidia" / "cuda_nvrtc").is_dir():
        return []
    (site / f"{MODULE}.py").write_text(HOOK_SOURCE, encoding="utf-8")
    (site / f"{MODULE}.pth").write_text(f"import {MODULE}\n", encoding="utf-8")
    assert since is not None
    return [RuntimeHook(
        "transformer-engine-pip-libraries",
        f"transformer-engine {te_version} < {since.value} does not load the nvidia-cudnn / nvidia-cuda-nvrtc "
        "wheels' libraries itself: the venv loads them before it is imported",
        since.source)]
