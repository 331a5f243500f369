"""An interpreter for `uv lock` to run with when the row's Python range excludes the default one.

`uv lock` needs some interpreter inside the project's requires-python, and envbuilder never lets
uv download one. Megatron-Bridge rows require Python 3.12 exactly, while a host's first `python3`
is often another version (and pyenv shims for versions that are installed but not active fail
when run). So when the user set no UV_PYTHON, look for a working interpreter in range: on PATH
first, then in pyenv's and uv's own installations. The lock itself does not depend on which one
(it is universal over requires-python); only whether uv can start.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

CANDIDATE_MINORS = ("3.10", "3.11", "3.12", "3.13", "3.14")


def _version_of(exe: str) -> str | None:
    try:
        proc = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
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
