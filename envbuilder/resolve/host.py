"""Turn planning flags and (optionally) the detected host into HostFacts for the resolver.

Flags win over detection (envbuilder.host.resolve_host); detection is used only when no
flag was given and NVML answers. The lock record says which it used.
"""

from __future__ import annotations

from envbuilder.host import resolve_host
from envbuilder.matrix.model import Matrix
from envbuilder.resolve.request import HostFacts


def host_facts(matrix: Matrix, driver: str | None = None, gpu: str | None = None, sm: str | None = None,
               gpus: int | None = None, detect: bool = True) -> HostFacts:
    if not detect and all(v is None for v in (driver, gpu, sm, gpus)):
        return HostFacts()
    info = resolve_host(driver=driver, gpu=gpu, sm=sm, gpus=gpus, matrix=matrix)
    if info.source == "none":
        return HostFacts()
    # the oldest arch on the host decides what the kernels must support
    lowest = info.sms[0] if info.sms else None
    name = next((g.name for g in info.gpus if g.sm == lowest), info.gpus[0].name if info.gpus else None)
    return HostFacts(origin=info.source, driver=info.driver, sm=lowest, gpu_name=name,
                     gpu_count=len(info.gpus) or None)
