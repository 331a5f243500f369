"""Read driver and GPU facts through NVML (nvidia-ml-py's `pynvml`).

The NVML module is a parameter so tests can hand in a fake: NVML cannot exist on a CI
machine without NVIDIA GPUs. Nothing here raises: every failure becomes a problem line,
because `doctor` must report the rest of the host even when NVML is missing or broken.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from envbuilder.host.model import GpuInfo

_GIB = 1024**3


@dataclass(frozen=True)
class NvmlReading:
    ok: bool  # NVML initialised and the driver answered
    driver: str | None
    cuda_driver_version: str | None
    gpus: tuple[GpuInfo, ...]
    problems: tuple[str, ...]


def import_pynvml() -> Any:
    """The real NVML binding, or an ImportError the caller turns into a problem line."""
    import pynvml

    return pynvml


def _text(v: Any) -> str:
    # nvidia-ml-py < 11.5 returned bytes
    return v.decode() if isinstance(v, bytes) else str(v)


def _cuda_version(raw: int) -> str:
    """NVML encodes CUDA 12.8 as 12080."""
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def _mig_mode(nvml: Any, handle: Any) -> str:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception as exc:  # NVMLError_NotSupported on GPUs without MIG
        return "unsupported" if "Not Supported" in str(exc) else "unknown"
    return "enabled" if current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1) else "disabled"


def _read_gpu(nvml: Any, index: int, problems: list[str]) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = _text(nvml.nvmlDeviceGetName(handle))
    sm: str | None
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        sm = f"{int(major)}.{int(minor)}"
    except Exception as exc:
        sm = None
        problems.append(f"GPU {index} ({name}): compute capability unreadable: {exc}")
    memory: float | None
    try:
        memory = round(int(nvml.nvmlDeviceGetMemoryInfo(handle).total) / _GIB, 1)
    except Exception as exc:
        memory = None
        problems.append(f"GPU {index} ({name}): memory unreadable: {exc}")
    return GpuInfo(index=index, name=name, sm=sm, memory_gib=memory, mig=_mig_mode(nvml, handle))


def read_nvml(nvml: Any | None = None) -> NvmlReading:
    """Driver version, the CUDA version it supports, and every GPU NVML sees."""
    if nvml is None:
        try:
            nvml = import_pynvml()
        except ImportError as exc:
            return NvmlReading(False, None, None, (), (f"NVML not available: nvidia-ml-py is not installed ({exc})",))
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on a GPU-less machine
        return NvmlReading(False, None, None, (), (f"NVML not available: {exc} (no NVIDIA driver loaded?)",))
    problems: list[str] = []
    try:
        try:
            driver: str | None = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception as exc:
            driver = None
            problems.append(f"driver version unreadable: {exc}")
        try:
            cuda: str | None = _cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion()))
        except Exception as exc:
            cuda = None
            problems.append(f"CUDA driver version unreadable: {exc}")
        gpus: list[GpuInfo] = []
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            count = 0
            problems.append(f"GPU count unreadable: {exc}")
        for i in range(count):
            try:
                gpus.append(_read_gpu(nvml, i, problems))
            except Exception as exc:
                problems.append(f"GPU {i}: unreadable: {exc}")
        if count == 0:
            problems.append("NVML answered but reports no GPUs")
    finally:
        # shutting down a half-initialised NVML must not hide the facts read
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return NvmlReading(driver is not None, driver, cuda, tuple(gpus), tuple(problems))
