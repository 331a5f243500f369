"""The interpreter `uv lock` runs with.

`uv lock` needs some interpreter inside the project's requires-python, and envbuilder never lets
uv download one. The lock itself does not depend on which one (it is universal over
requires-python); only whether uv can start, and how fast. Unless the user set UV_PYTHON:

* envbuilder's own Python, when it is inside requires-python: it exists and works, and uv then
  skips its search of PATH, which on a pyenv host runs a shell shim and a Python start-up on every
  lock (0.2 s of the 0.22 s a `uv lock --check` takes there; 0.02 s with an interpreter named);
* else uv's own search; and when that cannot start (Megatron-Bridge rows require Python 3.12
  exactly while a host's first `python3` is often another version, and pyenv shims for versions
  that are installed but not active fail when run, which stops uv's search), a working
  interpreter in range found here: on PATH first, then in pyenv's and uv's own installations.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuilder import procs
from envbuilder.errors import EnvbuilderError

CANDIDATE_MINORS = ("3.10", "3.11", "3.12", "3.13", "3.14")

# uv's errors when its interpreter search fails: none in range, or one it could not run
_NO_INTERPRETER = ("No interpreter found", "Failed to inspect Python interpreter", "Failed to query Python")


def uv_lacked_interpreter(exc: EnvbuilderError) -> bool:
    """Whether a failed `uv lock` stopped at finding an interpreter (before any resolution)."""
    tail = exc.details.get("log_tail")
    text = "\n".join([exc.cause, *(tail if isinstance(tail, list) else [])])
    return any(s in text for s in _NO_INTERPRETER)


def _version_of(exe: str) -> str | None:
    try:
        proc = procs.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and out.count(".") == 1 else None


def _candidates(spec: SpecifierSet) -> list[str]:
    minors = [m for m in CANDIDATE_MINORS if Version(m) in spec]
    found: list[str] = []
    for m in reversed(minors):
        exe = shutil.which(f"python{m}")
        if exe:
            found.append(exe)
    home = Path.home()
    pattern_roots = [os.environ.get("PYENV_ROOT", str(home / ".pyenv")) + "/versions/*/bin",
                     str(home / ".local/share/uv/python/*/bin")]
    for m in reversed(minors):
        for root in pattern_roots:
            found.extend(sorted(glob.glob(f"{root}/python{m}"), reverse=True))
    return list(dict.fromkeys(found))


def own_interpreter(requires_python: str) -> str | None:
    """The Python running envbuilder, when it is inside `requires_python` and the user set no UV_PYTHON."""
    if os.environ.get("UV_PYTHON") or not sys.executable:
        return None
    running = ".".join(str(n) for n in sys.version_info[:3])
    return sys.executable if SpecifierSet(requires_python).contains(running, prereleases=True) else None


def interpreter_for(requires_python: str) -> str | None:
    """A working interpreter inside `requires_python`, or None. None also when UV_PYTHON is set
    (the user chose) or when the default `python3` already fits (nothing to change)."""
    if os.environ.get("UV_PYTHON"):
        return None
    spec = SpecifierSet(requires_python)
    default = shutil.which("python3")
    if default:
        v = _version_of(default)
        if v is not None and Version(v) in spec:
            return None
    for exe in _candidates(spec):
        v = _version_of(exe)
        if v is not None and Version(v) in spec:
            return exe
    return None
