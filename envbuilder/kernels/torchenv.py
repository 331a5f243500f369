"""The interpreter a kernel wheel is compiled against, and what its torch is.

Two sources: a venv synced from the lock's stage 1 (`--torch-from venv`: exactly the locked torch),
or an existing interpreter that already has torch (`--torch-from host --interpreter PY`: an NGC
container, a cluster module, a machine's system Python). Either way the facts that decide binary
compatibility (torch version with its local tag, torch's CUDA, the C++ ABI, the Python) are read
from the interpreter itself, never assumed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.atomic import write_atomic
from envbuilder.errors import BuildTorchError, UvError
from envbuilder.lock.record import RECORD_NAME
from envbuilder.lock.uvrun import uv_binary, uv_env

Progress = Callable[[str], None]

_PROBE = r"""
import importlib.util, json, sys, sysconfig
out = {"python": "%d.%d" % sys.version_info[:2], "executable": sys.executable,
       "py_tag": "cp%d%d" % sys.version_info[:2], "build_modules": {}}
for m in ("setuptools", "wheel", "packaging", "ninja"):
    out["build_modules"][m] = importlib.util.find_spec(m) is not None
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["cxx11abi"] = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    out["torch_path"] = torch.__file__
except Exception as exc:
    out["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class TorchFacts:
    interpreter: str
    python: str          # "3.12"
    py_tag: str          # "cp312"
    torch: str           # "2.11.0+cu130"
    cuda: str | None     # torch.version.cuda ("13.0"), None for a CPU build
    cxx11abi: bool
    build_modules: dict[str, bool]

    def to_dict(self) -> dict[str, Any]:
        return {"interpreter": self.interpreter, "python": self.python, "torch": self.torch, "cuda": self.cuda,
                "cxx11abi": self.cxx11abi}


def probe_interpreter(python: Path | str) -> TorchFacts:
    """Run `python` and read its torch; BuildTorchError when it has none or cannot run."""
    try:
        proc = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildTorchError(f"cannot run the interpreter {python}: {exc}",
                              "pass --interpreter with the path of a Python that has torch") from exc
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BuildTorchError(f"{python} failed: {proc.stderr.strip()[-300:]}",
                              "pass --interpreter with the path of a working Python")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if "torch" not in data:
        raise BuildTorchError(f"{python} cannot import torch ({data.get('torch_error', 'not installed')})",
                              "use --torch-from venv (the lock's torch), or an interpreter that has torch")
    return TorchFacts(str(python), data["python"], data["py_tag"], data["torch"], data.get("cuda"),
                      bool(data["cxx11abi"]), dict(data["build_modules"]))


def require_build_modules(facts: TorchFacts, packages: list[str]) -> None:
    missing = sorted(m for m, ok in facts.build_modules.items() if not ok)
    if missing:
        raise BuildTorchError(
            f"{facts.interpreter} lacks {', '.join(missing)}, needed to build {', '.join(packages)} "
            "without build isolation",
            f"install them into that environment: {facts.interpreter} -m pip install {' '.join(missing)}")


def sync_stage1_venv(lockdir: Path, record: dict[str, Any], venv: Path, progress: Progress,
                     ca_bundle: Path | None = None) -> Path:
    """A venv holding the lock's stage 1 and the stage-2 packages' dependencies, not the stage-2 packages.

    Reused when its marker names the same lock_sha256. Returns the venv's python.
    """
    venv = venv.absolute()  # uv reads UV_PROJECT_ENVIRONMENT relative to the project
    marker = venv / "envbuilder-venv.json"
    python = venv / "bin" / "python"
    want = {"lock_sha256": record["lock_sha256"], "python": record["target"]["python"]}
    if marker.is_file() and python.exists():
        try:
            if json.loads(marker.read_text()) == want:
                progress(f"build venv {venv} is up to date (lock {record['lock_sha256'][:12]})")
                return python
        except json.JSONDecodeError:
            pass
    if venv.exists():
        shutil.rmtree(venv)
    project = venv.with_name(venv.name + ".project")
    if project.exists():
        shutil.rmtree(project)
    project.mkdir(parents=True)
    for name in ("pyproject.toml", "uv.lock", RECORD_NAME):
        shutil.copy2(lockdir / name, project / name)
    if (lockdir / "wheels").is_dir():
        shutil.copytree(lockdir / "wheels", project / "wheels")
    stage2 = list(record.get("stage2_packages", []))
    cmd = [uv_binary(), "sync", "--frozen", "--no-install-project", "--python", str(record["target"]["python"])]
    cmd += ["--extra", "compile"] if stage2 else []
    for name in stage2:
        cmd += ["--no-install-package", name]
    env = uv_env(ca_bundle)
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    progress(f"syncing the build venv from stage 1 of the lock: {venv}")
    proc = subprocess.run(cmd, cwd=project, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise UvError(f"uv sync of the build venv failed: {proc.stderr.strip().splitlines()[-1:]}",
                      "check network access (stage 1 downloads torch), or use --torch-from host --interpreter PY",
                      log_tail=proc.stderr.strip().splitlines()[-20:])
    write_atomic(marker, json.dumps(want, sort_keys=True) + "\n")
    return python
