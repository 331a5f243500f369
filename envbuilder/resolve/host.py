"""Turn planning flags and (optionally) the detected host into HostFacts for the resolver.

Flags win over detection; detection is used only when no driver/GPU flag was given and
NVML answers. The lock record says which it used.
"""

from __future__ import annotations

import re

from envbuilder.errors import InvalidOptionError
from envbuilder.matrix.model import Matrix
from envbuilder.resolve.request import HostFacts


def _detect() -> HostFacts | None:
    try:
        from envbuilder.host import detect_host  # issue 3's detector; NVML may be absent
    except ImportError:
        return None
    try:
        info = detect_host()
    except Exception:
        return None
    gpus = getattr(info, "gpus", None) or []
    driver = getattr(info, "driver", None)
    if not gpus or not driver:
        return None
    first = gpus[0]
    sm = getattr(first, "sm", None)
    name = getattr(first, "name", None)
    return HostFacts(origin="detected", driver=str(driver), sm=str(sm) if sm else None,
                     gpu_name=str(name) if name else None, gpu_count=len(gpus))


def host_facts(matrix: Matrix, driver: str | None = None, gpu: str | None = None, sm: str | None = None,
               detect: bool = True) -> HostFacts:
    if driver is not None and not re.fullmatch(r"\d+(\.\d+){1,2}", driver):
        raise InvalidOptionError(f"--driver {driver}: not a driver version", "write it like --driver 570.133.20")
    if sm is not None and not re.fullmatch(r"\d+\.\d+", sm):
        raise InvalidOptionError(f"--sm {sm}: not a compute capability", "write it like --sm 9.0")
    gpu_name = None
    if gpu is not None:
        entry = matrix.gpu(gpu)
        if entry is None:
            known = ", ".join(g.name for g in matrix.gpus) or "none loaded"
            raise InvalidOptionError(f"--gpu {gpu}: unknown GPU model (known: {known})", "use --sm X.Y instead")
        gpu_name, sm = entry.name, sm or entry.sm
    if driver or gpu or sm:
        return HostFacts(origin="planned", driver=driver, sm=sm, gpu_name=gpu_name)
    if detect:
        found = _detect()
        if found is not None:
            return found
    return HostFacts()
