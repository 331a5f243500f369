"""Start a worker module under torch.distributed.run and collect its JSON result."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder import procs

# Keep NVLink multicast off unless the caller set it (some shared hosts require this).
TERM_GRACE_S = 30.0  # a timed-out worker's time to stop what it started
_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass
class WorkerRun:
    rc: int
    log: str
    result: dict[str, Any] | None
    wall_s: float


def package_root() -> str:
    """The directory holding envbuilder/ (a read-only mount inside containers)."""
    return str(Path(__file__).resolve().parents[2])


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ.copy()
    for k, v in _SAFE_ENV.items():
        env.setdefault(k, v)
    root = package_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


def worker_command(module: str, args: list[str], nproc: int, out: Path, torchrun: bool = True) -> list[str]:
    """The worker under torch.distributed.run (nproc ranks), or as one plain process for a worker that
    launches its own ranks (NeMo-Run's executor)."""
    # a plain worker is procs.popen's own child (it dies with this process); under torchrun every worker runs
    # through certify.worker, which makes it die with the launcher (torch puts each worker in a session of its
    # own, out of reach of a process-group kill)
    if not torchrun:
        return [sys.executable, "-m", module, "--out", str(out), *args]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "envbuilder.certify.worker", module, "--out", str(out), *args]


def run_worker(module: str, args: list[str], nproc: int, workdir: Path, name: str,
               timeout_s: float = 300, env: dict[str, str] | None = None, torchrun: bool = True) -> WorkerRun:
    import time

    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{name}.json"
    log_path = workdir / f"{name}.log"
    out.unlink(missing_ok=True)
    cmd = worker_command(module, args, nproc, out, torchrun)
    t0 = time.perf_counter()
    # torch's own temporary files (torchelastic_*) go inside the work directory, so they go with it
    tmp = workdir / f".tmp-{name}"
    tmp.mkdir(exist_ok=True)
    # own process group, and the launcher dies with this process (even on SIGKILL); on a timeout, a
    # signal or an error the whole tree (launcher and workers, found through /proc) is killed
    proc = procs.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env={**worker_env(env), "TMPDIR": str(tmp)})
    try:
        log, _ = proc.communicate(timeout=timeout_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        # SIGTERM first: a worker that started processes in sessions of their own (NeMo-Run's executor) stops
        # them; then the whole tree, found through /proc, whatever is left of it after the grace period
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            log, _ = proc.communicate(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            procs.kill_tree(proc.pid)
            log, _ = proc.communicate()
        rc, log = 124, (log or "") + f"\n[envbuilder] timed out after {timeout_s:.0f}s"
    except BaseException:
        procs.kill_tree(proc.pid)
        proc.wait()
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - t0
    log_path.write_text(log)
    result = json.loads(out.read_text()) if rc == 0 and out.exists() else None
    return WorkerRun(rc, log, result, wall)
