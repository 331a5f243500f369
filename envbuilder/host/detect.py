"""Build a HostInfo: detected through NVML, planned from flags, or chosen between the two for `lock`."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from envbuilder.errors import EnvbuilderError, InvalidOptionError
from envbuilder.host.gpus import find_gpu, require_gpu
from envbuilder.host.model import GpuInfo, HostInfo
from envbuilder.host.nvml import read_nvml
from envbuilder.host.tooling import disk_free_gib, glibc_version, probe_tools, uv_version
from envbuilder.matrix import Matrix, load_matrix

_DRIVER_RE = re.compile(r"\d+\.\d+(\.\d+)?")
_SM_RE = re.compile(r"\d+\.\d")


def with_local_tooling(host: HostInfo, disk_path: Path | None = None) -> HostInfo:
    """Add this machine's container tooling, uv, free disk and glibc to `host`."""
    path = Path(disk_path) if disk_path else Path.cwd()
    return replace(
        host,
        tooling=probe_tools(),
        uv_version=uv_version(),
        disk_free_gib=disk_free_gib(path),
        disk_path=str(path),
        glibc=glibc_version(),
    )


def _mark_datacenter(gpus: tuple[GpuInfo, ...], matrix: Matrix | None) -> tuple[GpuInfo, ...]:
    if matrix is None:
        return gpus
    out = []
    for g in gpus:
        spec = find_gpu(g.name, matrix)
        out.append(replace(g, datacenter=spec.datacenter) if spec else g)
    return tuple(out)


def detect_host(nvml: Any | None = None, *, matrix: Matrix | None = None, local: bool = True,
                disk_path: Path | None = None) -> HostInfo:
    """Read this machine. Never raises: NVML absent or failing is reported in `problems`.

    nvml: an NVML module (default: import pynvml); tests pass a fake because CI has no GPU.
    matrix: used only to tell data-center GPUs apart (forward compatibility); loaded if None.
    local: also probe container tooling, uv, disk and glibc (doctor does; lock does not need to).
    """
    reading = read_nvml(nvml)
    problems = list(reading.problems)
    if matrix is None:
        try:
            matrix = load_matrix()
        except EnvbuilderError as exc:
            problems.append(f"GPU table unavailable: {exc.cause}")
    host = HostInfo(
        source="detected" if reading.ok else "none",
        driver=reading.driver,
        cuda_driver_version=reading.cuda_driver_version,
        gpus=_mark_datacenter(reading.gpus, matrix),
        problems=tuple(problems),
    )
    return with_local_tooling(host, disk_path) if local else host


def plan_host(driver: str | None = None, gpu: str | None = None, sm: str | None = None,
              gpus: int | None = None, *, matrix: Matrix | None = None) -> HostInfo:
    """A target host described by flags (--driver, --gpu NAME or --sm X.Y, --gpus N).

    Raises InvalidOptionError for malformed values and UnknownGpuError for a --gpu name
    that matrices/gpus.toml does not know.
    """
    if driver is not None and not _DRIVER_RE.fullmatch(driver):
        raise InvalidOptionError(f"--driver {driver!r} is not a driver version", "write it like 570.86.15")
    if sm is not None and not _SM_RE.fullmatch(sm):
        raise InvalidOptionError(f"--sm {sm!r} is not a compute capability", "write it like 9.0 (H100) or 8.0 (A100)")
    if sm is not None:
        from envbuilder.matrix.archs import check_sm_exists

        check_sm_exists(sm)
    if gpus is not None and gpus < 1:
        raise InvalidOptionError(f"--gpus {gpus}: a host needs at least one GPU", "pass --gpus 1 or more")
    name, memory, datacenter, model_sm = "unknown", None, None, sm
    if gpu is not None:
        spec = require_gpu(gpu, matrix)
        if sm is not None and spec.sm is not None and sm != spec.sm:
            raise InvalidOptionError(f"--gpu {spec.name} is sm {spec.sm} but --sm says {sm}",
                                     "pass only one of --gpu and --sm")
        name, memory, datacenter, model_sm = spec.name, spec.memory_gib, spec.datacenter, spec.sm
    elif sm is not None:
        name = "planned GPU"
    count = gpus if gpus is not None else (1 if gpu is not None or sm is not None else 0)
    planned = tuple(
        GpuInfo(index=i, name=name, sm=model_sm, memory_gib=memory, mig="planned", datacenter=datacenter)
        for i in range(count)
    )
    problems = () if driver else ("no --driver given: CUDA/driver compatibility cannot be checked",)
    return HostInfo(source="planned", driver=driver, gpus=planned, problems=problems)


def resolve_host(driver: str | None = None, gpu: str | None = None, sm: str | None = None,
                 gpus: int | None = None, *, nvml: Any | None = None, matrix: Matrix | None = None) -> HostInfo:
    """The host `lock` should target: the planning flags when any is given, else this machine.

    A machine without NVML yields source "none" (lock then targets no particular host).
    """
    if any(v is not None for v in (driver, gpu, sm, gpus)):
        return plan_host(driver=driver, gpu=gpu, sm=sm, gpus=gpus, matrix=matrix)
    return detect_host(nvml, matrix=matrix, local=False)
