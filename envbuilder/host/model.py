"""A host as plain data: what the GPUs, driver and local tooling are, and where that came from.

`source` says how the facts were obtained: "detected" (read through NVML on this machine),
"planned" (described with --driver/--gpu/--sm/--gpus) or "none" (no GPU facts at all).
Problems met while reading the host are facts too; they are listed, never raised.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from envbuilder.canonical import version_tuple

HostSource = Literal["detected", "planned", "none"]


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    sm: str | None  # compute capability "major.minor", e.g. "9.0"
    memory_gib: float | None
    mig: str  # "enabled" | "disabled" | "unsupported" | "unknown" | "planned"
    datacenter: bool | None = None  # from matrices/gpus.toml when the model is known


@dataclass(frozen=True)
class ToolStatus:
    available: bool
    detail: str  # version or path when available, the reason otherwise


@dataclass(frozen=True)
class HostInfo:
    source: HostSource
    driver: str | None = None
    cuda_driver_version: str | None = None  # highest CUDA the driver supports, "12.8"
    gpus: tuple[GpuInfo, ...] = ()
    tooling: dict[str, ToolStatus] = field(default_factory=dict)
    uv_version: str | None = None
    disk_free_gib: float | None = None
    disk_path: str | None = None
    glibc: str | None = None
    problems: tuple[str, ...] = ()

    @property
    def sms(self) -> list[str]:
        """Distinct compute capabilities, lowest first."""
        return sorted({g.sm for g in self.gpus if g.sm}, key=sm_key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sm_key(sm: str) -> tuple[int, int]:
    """'8.9' -> (8, 9), so '10.0' sorts after '9.0'."""
    major, _, minor = sm.partition(".")
    return int(major), int(minor or 0)


def sm_label(sm: str) -> str:
    """'8.0' -> 'sm80', '10.0' -> 'sm100' (the naming kernels and the issue use)."""
    major, minor = sm_key(sm)
    return f"sm{major}{minor}"


# Driver / CUDA versions compare numerically: '570.26' > '545.23.06'.
version_key = version_tuple
