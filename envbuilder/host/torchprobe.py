"""The torch an existing interpreter already has (NGC container, cluster module, a machine's Python).

Read by running the interpreter itself: torch's version with its local tag, the CUDA it was built
with, its C++ ABI, the Python version, and which of the packages a host install keeps (torch and the
packages that ship with it) are present. `lock --mode host-torch` records these facts, and `doctor`
and `lock` compare them with the row.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder import procs
from envbuilder.errors import BuildTorchError
from envbuilder.jsonread import Fields, loads_json, read_object
from envbuilder.safetext import printable

#: packages a host-torch lock never installs when the interpreter has them (torch brings them along)
HOST_KEEP_CANDIDATES = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton")

_PROBE = r"""
import importlib.metadata as md, importlib.util, json, sys
out = {"python": "%d.%d" % sys.version_info[:2], "executable": sys.executable,
       "py_tag": "cp%d%d" % sys.version_info[:2], "build_modules": {}, "present": []}
for m in ("setuptools", "wheel", "packaging", "ninja"):
    out["build_modules"][m] = importlib.util.find_spec(m) is not None
for d in CANDIDATES:
    try:
        md.version(d)
        out["present"].append(d)
    except md.PackageNotFoundError:
        pass
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["cxx11abi"] = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
except Exception as exc:
    out["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class RecordedTorch:
    """The deterministic facts of a torch that decide binary compatibility, as records keep them: the lock
    record's `host.torch` (--mode host-torch) and wheelhouse.json's `torch`."""

    version: str | None    # "2.11.0+cu130"
    cuda: str | None
    cxx11abi: bool | None
    python: str | None
    kept: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "cuda": self.cuda, "cxx11abi": self.cxx11abi, "python": self.python,
                "kept": list(self.kept)}

    @classmethod
    def from_fields(cls, f: Fields) -> RecordedTorch:
        return cls(f.string("version", None), f.string("cuda", None), f.boolean("cxx11abi", None),
                   f.string("python", None), tuple(f.strings("kept", [])))


@dataclass(frozen=True)
class HostTorch:
    interpreter: str
    python: str            # "3.12"
    py_tag: str            # "cp312"
    torch: str             # "2.11.0+cu130"
    cuda: str | None       # torch.version.cuda; None for a CPU build
    cxx11abi: bool
    present: tuple[str, ...] = ()          # HOST_KEEP_CANDIDATES the interpreter has
    build_modules: tuple[tuple[str, bool], ...] = ()

    @property
    def public_version(self) -> str:
        return self.torch.split("+", 1)[0]

    def recorded(self) -> RecordedTorch:
        """Deterministic facts only (no interpreter path): what a lock record and a wheelhouse keep."""
        return RecordedTorch(self.torch, self.cuda, self.cxx11abi, self.python, self.present)

    def to_dict(self) -> dict[str, Any]:
        return self.recorded().to_dict()


def probe_code() -> str:
    return _PROBE.replace("CANDIDATES", repr(HOST_KEEP_CANDIDATES))


def probe_torch(python: Path | str) -> HostTorch:
    """Run `python` and read its torch; BuildTorchError when it cannot run or has no torch."""
    code = probe_code()
    fix = "pass --interpreter with the path of a Python that has torch"
    try:
        proc = procs.run([str(python), "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildTorchError(f"cannot run the interpreter {python}: {exc}", fix) from exc
    said = proc.stderr.strip()[-300:]
    if proc.returncode != 0:
        raise BuildTorchError(f"{python} exited with {proc.returncode}" + (f": {said}" if said else
                              " and printed nothing (is it a Python interpreter?)"), fix)
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise BuildTorchError(f"{python} printed nothing when asked for its torch (is it a Python interpreter?)", fix)
    what = f"what {python} printed for the torch probe"
    data = loads_json(lines[-1], what=what, error=BuildTorchError, fix=fix)
    return host_torch_from_probe(Fields.of(data, what, BuildTorchError, fix), str(python))


_PYTHON = re.compile(r"3\.\d{1,2}")
_PY_TAG = re.compile(r"cp3\d{1,2}")
_TORCH = re.compile(r"\d+\.\d+[0-9A-Za-z.+_-]*")
_CUDA = re.compile(r"\d+\.\d+")


def host_torch_from_probe(f: Fields, interpreter: str) -> HostTorch:
    """The HostTorch a probe's JSON describes, every field typed; BuildTorchError when it names no torch."""
    if "torch" not in f:
        raise BuildTorchError(f"{printable(interpreter)} cannot import torch "
                              f"({printable(str(f.get('torch_error', 'not installed')))[:300]})",
                              "pass an interpreter that has torch (or use --mode hermetic / --torch-from venv)")

    def matching(key: str, pattern: re.Pattern[str], like: str, default: Any = _REQUIRED) -> Any:
        value = f.string(key) if default is _REQUIRED else f.string(key, default)
        if value is not None and not pattern.fullmatch(value):
            f.fail(key, f"is {printable(value)[:40]!r}, not {like}")
        return value

    python = matching("python", _PYTHON, "a Python version like 3.12")
    modules = f.obj("build_modules")
    return HostTorch(interpreter, python, matching("py_tag", _PY_TAG, "a tag like cp312"),
                     matching("torch", _TORCH, "a torch version like 2.7.1+cu128"),
                     matching("cuda", _CUDA, "a CUDA version like 12.8", None), f.boolean("cxx11abi"),
                     tuple(f.strings("present", plain=True)),
                     tuple(sorted((str(k), bool(modules.boolean(k))) for k in modules)))


_REQUIRED: Any = object()


def read_torch_facts(path: Path) -> HostTorch:
    """The host torch a probe file names: what `python -m envbuilder.host.torchprobe > FILE` wrote on the
    target machine. Lets a login node with network lock for a compute node's torch it cannot run.

    Every field is checked here (a wrong one is the file's fault, never blamed on --python), through
    jsonread: a size limit (a probe is ~1 KiB), a depth limit, strict JSON."""
    fix = "write it on the target with `python -m envbuilder.host.torchprobe > FILE`"
    doc = read_object(path, what="torch facts file", error=BuildTorchError, fix=fix, max_bytes=1 << 20)
    if "torch" not in doc and "torch_error" not in doc:
        raise BuildTorchError(f"{printable(path)} is not a torch probe (it has neither torch nor torch_error)", fix)
    executable = doc.string("executable", default=None, max_len=4096)
    return host_torch_from_probe(doc, executable or str(path))


def in_row_range(host_torch: str, row_torch: str | None) -> bool | None:
    """Same major.minor as the row's torch (NGC's '2.8.0a0+5228986c39.nv25.06' counts as 2.8); None if unknown."""
    if not row_torch or row_torch in ("none", "unknown"):
        return None

    def mm(v: str) -> tuple[str, ...]:
        return tuple(v.split("+", 1)[0].split(".")[:2])

    return mm(host_torch) == mm(row_torch)


if __name__ == "__main__":  # stdlib only: runs on a target that has torch but not envbuilder's dependencies
    import sys

    exec(compile(probe_code(), "torchprobe", "exec"))
    sys.exit(0)
