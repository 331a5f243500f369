"""The two stacks of a row: the NGC container's and the hermetic PyPI wheels'.

They differ: the 26.04 container is CUDA 13.1.1 with a torch 2.11 pre-release, while PyPI's
torch 2.11.0 bundles CUDA 13.0.2. Each stack's minimum driver comes from the exact CUDA
release it uses (Table 3 of the CUDA release notes; an update release can need a newer
driver than its GA), and the minor-version-compatibility floor of its major says how far
below that a driver still runs it (with the limits that compatibility has).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envbuilder.choices import LockMode
from envbuilder.matrix.model import UNKNOWN, Fact, Matrix, Release


@dataclass(frozen=True)
class Stack:
    mode: LockMode  # hermetic (PyPI wheels) or ngc-base (the NGC container's)
    torch: Fact
    cuda: Fact  # major.minor
    cuda_toolkit: Fact  # the exact toolkit release, e.g. 13.0.2; "unknown" when only major.minor is known
    cudnn: Fact
    min_driver: Fact
    minor_compat_floor: Fact

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "torch": self.torch.value, "cuda": self.cuda.value,
            "cuda_toolkit": self.cuda_toolkit.value, "cudnn": self.cudnn.value,
            "min_driver": self.min_driver.value, "minor_compat_floor": self.minor_compat_floor.value,
            "sources": {"torch": self.torch.source, "cuda": self.cuda.source, "cuda_toolkit": self.cuda_toolkit.source,
                        "cudnn": self.cudnn.source, "min_driver": self.min_driver.source,
                        "minor_compat_floor": self.minor_compat_floor.source},
        }


def min_driver_for(matrix: Matrix, cuda: Fact, toolkit: Fact) -> Fact:
    """The Linux driver floor of the exact toolkit when known, else of the major.minor's GA
    (said so in the source: the real floor may be higher)."""
    why = "the exact update release of this stack is not recorded"
    if toolkit.known:
        exact = matrix.cuda_release(str(toolkit.value))
        if exact is not None and exact.min_driver_linux.known:
            return Fact(exact.min_driver_linux.value,
                        f"{exact.min_driver_linux.source} (CUDA {toolkit.value}: {toolkit.source})")
        why = (f"CUDA {toolkit.value}'s own floor is " +
               ("unknown" if exact is not None else "not in matrices/cuda.toml"))
    if not cuda.known:
        return Fact(UNKNOWN, f"CUDA unknown ({cuda.source})")
    ga = matrix.cuda_min_driver(str(cuda.value))
    if ga is None or not ga.known:
        return Fact(UNKNOWN, f"CUDA {cuda.value}: no known driver floor in matrices/cuda.toml ({why})")
    return Fact(ga.value, f"{ga.source} (the CUDA {cuda.value} GA floor, a lower bound: {why}, "
                          "so an update's higher floor may apply)")


def minor_compat_floor(matrix: Matrix, cuda: Fact) -> Fact:
    if not cuda.known:
        return Fact(UNKNOWN, f"CUDA unknown ({cuda.source})")
    floor = matrix.minor_compat.get(int(str(cuda.value).split(".")[0]))
    return floor if floor is not None else Fact(UNKNOWN, "no minor-compatibility entry in matrices/cuda.toml")


def _major_minor(toolkit: Fact) -> Fact:
    if not toolkit.known:
        return toolkit
    parts = str(toolkit.value).split(".")
    return Fact(".".join(parts[:2]), toolkit.source)


def row_stacks(matrix: Matrix, row: Release) -> dict[LockMode, Stack]:
    """The stack each image-building mode installs: PyPI's (hermetic) and the NGC container's (ngc-base)."""
    hermetic = Stack(LockMode.HERMETIC, row.torch, row.cuda, row.cuda_toolkit, row.cudnn,
                     min_driver_for(matrix, row.cuda, row.cuda_toolkit), minor_compat_floor(matrix, row.cuda))
    ccuda = _major_minor(row.container_cuda)
    container = Stack(LockMode.NGC_BASE, row.container_torch, ccuda, row.container_cuda, row.container_cudnn,
                      min_driver_for(matrix, ccuda, row.container_cuda), minor_compat_floor(matrix, ccuda))
    return {LockMode.HERMETIC: hermetic, LockMode.NGC_BASE: container}
