"""One GPU, several certify workers at once: start-up overlaps, GPU work does not.

Level 1 starts its training workers together, so their interpreters start and their stacks import (torch,
megatron, NeMo: most of each worker's wall time) side by side while the main process runs the other
checks. Each worker takes this lock before its first CUDA call and keeps it until it exits; the main
process holds it while it runs its own GPU checks. So every check's GPU work runs alone, as it did when
the checks ran one after another: same steps, same loss rule, throughput measured on an otherwise idle GPU.

The lock is a file named by ENVBUILDER_GPU_LOCK (flock, released by the kernel when the holder exits,
however it exits). Without the variable, or in a worker of several ranks (which cannot queue behind each
other), nothing is locked. Standard library only.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass

ENV = "ENVBUILDER_GPU_LOCK"


@dataclass
class Held:
    """A held lock and how long taking it waited (what the GPU work of other checks cost this one)."""

    fd: int
    waited_s: float

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def acquire(path: str | None = None) -> Held | None:
    """Wait for the GPU lock named by `path` or ENVBUILDER_GPU_LOCK; None when there is none to take."""
    path = path or os.environ.get(ENV)
    if not path or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    t0 = time.monotonic()
    fcntl.flock(fd, fcntl.LOCK_EX)
    return Held(fd, time.monotonic() - t0)


def waited(held: Held | None) -> dict[str, float]:
    """The worker result's field for it ({} when no lock was taken)."""
    return {"gpu_wait_s": round(held.waited_s, 2)} if held is not None else {}
