"""Start a worker module (under torch.distributed.run, or plain) and collect its JSON result and log."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
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


class Worker:
    """A started worker: its process writes its log to a file (several may run at once, and a pipe nobody
    reads would stall one), its result to `out`; `wait()` collects both."""

    def __init__(self, module: str, args: list[str], nproc: int, workdir: Path, name: str,
                 timeout_s: float = 300, env: dict[str, str] | None = None, torchrun: bool = True) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.out = workdir / f"{name}.json"
        self.log_path = workdir / f"{name}.log"
        self.out.unlink(missing_ok=True)
        self.timeout_s = timeout_s
        # torch's own temporary files (torchelastic_*) go inside the work directory, so they go with it
        self.tmp = workdir / f".tmp-{name}"
        self.tmp.mkdir(exist_ok=True)
        self.t0 = time.perf_counter()
        with open(self.log_path, "w", encoding="utf-8") as log:
            # own process group, and the launcher dies with this process (even on SIGKILL); on a timeout, a
            # signal or an error the whole tree (launcher and workers, found through /proc) is killed
            self.proc = procs.popen(worker_command(module, args, nproc, self.out, torchrun), stdout=log,
                                    stderr=subprocess.STDOUT, env={**worker_env(env), "TMPDIR": str(self.tmp)})

    def _terminate(self) -> None:
        """SIGTERM first: a worker that started processes in sessions of their own (NeMo-Run's executor) stops
        them; then the whole tree, found through /proc, whatever is left of it after the grace period."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            procs.kill_tree(self.proc.pid)
            self.proc.wait()

    def stop(self) -> None:
        """End a worker whose result is no longer wanted (the run failed elsewhere)."""
        if self.proc.poll() is None:
            self._terminate()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def wait(self) -> WorkerRun:
        left = max(0.0, self.timeout_s - (time.perf_counter() - self.t0))
        timed_out = False
        try:
            rc = self.proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._terminate()
            rc = 124
        except BaseException:
            procs.kill_tree(self.proc.pid)
            self.proc.wait()
            raise
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        wall = time.perf_counter() - self.t0
        log = self.log_path.read_text(encoding="utf-8", errors="replace")
        if timed_out:
            log += f"\n[envbuilder] timed out after {self.timeout_s:.0f}s"
            self.log_path.write_text(log, encoding="utf-8")
        result = json.loads(self.out.read_text()) if rc == 0 and self.out.exists() else None
        return WorkerRun(rc, log, result, wall)


def start_worker(module: str, args: list[str], nproc: int, workdir: Path, name: str,
                 timeout_s: float = 300, env: dict[str, str] | None = None, torchrun: bool = True) -> Worker:
    return Worker(module, args, nproc, workdir, name, timeout_s, env, torchrun)


def run_worker(module: str, args: list[str], nproc: int, workdir: Path, name: str,
               timeout_s: float = 300, env: dict[str, str] | None = None, torchrun: bool = True) -> WorkerRun:
    return start_worker(module, args, nproc, workdir, name, timeout_s, env, torchrun).wait()
