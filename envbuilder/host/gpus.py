"""GPU models from matrices/gpus.toml, reduced to the plain values host checks need."""

from __future__ import annotations

from dataclasses import dataclass

from envbuilder.errors import UnknownGpuError
from envbuilder.matrix import Matrix, load_matrix
from envbuilder.matrix.model import Gpu


@dataclass(frozen=True)
class GpuSpec:
    name: str
    sm: str | None
    memory_gib: float | None
    datacenter: bool | None


def lookup_gpu(matrix: Matrix, name: str) -> Gpu | None:
    """Whole-word GPU lookup; the one implementation lives in Matrix.gpu."""
    return matrix.gpu(name)


def _spec(matrix: Matrix, name: str) -> GpuSpec | None:
    gpu = lookup_gpu(matrix, name)
    if gpu is None:
        return None

    def known(key: str) -> object | None:
        fact = gpu.fact(key)
        return fact.value if fact is not None and fact.known else None

    mem = known("memory_gib")
    dc = known("datacenter")
    return GpuSpec(
        name=gpu.name,
        sm=gpu.sm,
        memory_gib=float(mem) if isinstance(mem, (int, float)) else None,
        datacenter=dc if isinstance(dc, bool) else None,
    )


def find_gpu(name: str, matrix: Matrix) -> GpuSpec | None:
    """By table name, alias or NVML name ("NVIDIA H100 80GB HBM3" -> H100); None if unknown."""
    return _spec(matrix, name)


def require_gpu(name: str, matrix: Matrix | None = None) -> GpuSpec:
    """A --gpu flag's model, or UnknownGpuError listing the known names (matrix loaded if None)."""
    if matrix is None:
        matrix = load_matrix()
    spec = find_gpu(name, matrix)
    if spec is None:
        known = ", ".join(g.name for g in matrix.gpus) or "none (matrices/gpus.toml missing)"
        raise UnknownGpuError(
            f"--gpu {name!r} is not in matrices/gpus.toml (known: {known})",
            "use one of the known names, or give --sm X.Y (doctor) / --gpu-memory-gib N (check-parallel)",
        )
    return spec
