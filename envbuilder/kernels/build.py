"""Run one sdist's PEP 517 build_wheel in the build interpreter, without build isolation.

The backend runs in its own session (process group) so an interrupt stops nvcc and ninja too, and
is reaped with wait4, whose rusage covers the whole waited-for process tree: ru_maxrss is the peak
RSS of the largest process of the build (one nvcc, typically), which is what sizes --jobs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from envbuilder import procs
from envbuilder.errors import KernelBuildError
from envbuilder.progress import Progress
from envbuilder.toml_cache import tomllib

_RUNNER = r"""
import importlib, os, sys
backend, paths, out = sys.argv[1], [p for p in sys.argv[2].split(os.pathsep) if p], sys.argv[3]
sys.path[:0] = [os.path.abspath(p) for p in paths] + [os.getcwd()]
mod_name, _, obj = backend.partition(":")
hooks = importlib.import_module(mod_name)
for part in filter(None, obj.split(".")):
    hooks = getattr(hooks, part)
name = hooks.build_wheel(out)
print("ENVBUILDER_WHEEL=" + name, flush=True)
"""


@dataclass(frozen=True)
class BuildRun:
    wheel: Path
    seconds: float
    peak_rss_mb: float
    log: Path


def build_backend(src: Path) -> tuple[str, list[str]]:
    """(build-backend, backend-path) from the sdist's pyproject.toml; setuptools' legacy backend without one."""
    pyproject = src / "pyproject.toml"
    if pyproject.is_file():
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        bs = data.get("build-system", {})
        if bs.get("build-backend"):
            return str(bs["build-backend"]), [str(p) for p in bs.get("backend-path", [])]
    return "setuptools.build_meta:__legacy__", []


def run_build(python: str, src: Path, out_dir: Path, env: dict[str, str], package: str,
              progress: Progress, heartbeat: float = 15.0) -> BuildRun:
    """Build src into a wheel in out_dir; KernelBuildError with the log tail when it fails."""
    import subprocess

    backend, paths = build_backend(src)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir.parent / f"{package}.build.log"
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as fh:
        # own process group, killed with this process (procs.popen): an interrupt stops nvcc and ninja too
        proc = procs.popen([python, "-c", _RUNNER, backend, os.pathsep.join(paths), str(out_dir)],
                           cwd=src, env=env, stdout=fh, stderr=subprocess.STDOUT)
        try:
            next_beat = t0 + heartbeat
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() >= next_beat:
                    progress(f"  {package}: compiling, {time.monotonic() - t0:.0f}s")
                    next_beat += heartbeat
                time.sleep(0.2)
        except BaseException:
            procs.kill_group(proc)
            raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - t0
    peak_mb = usage.ru_maxrss / 1024.0
    text = log.read_text(encoding="utf-8", errors="replace")
    wheel_lines = [ln for ln in text.splitlines() if ln.startswith("ENVBUILDER_WHEEL=")]
    if proc.returncode != 0 or not wheel_lines:
        tail = text.strip().splitlines()[-25:]
        raise KernelBuildError(f"{package}: the wheel build failed (exit {proc.returncode}) after {seconds:.0f}s; "
                               f"last line: {tail[-1][:200] if tail else '(no output)'}",
                               f"read the full log: {log}", log_tail=tail, log=str(log))
    return BuildRun(out_dir / wheel_lines[-1].split("=", 1)[1], seconds, peak_mb, log)
