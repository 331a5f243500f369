"""The host facts `lock` records and resolves against.

    from envbuilder.host import resolve_host, host_constraints
    host = resolve_host(driver=..., gpu=..., sm=..., gpus=...)  # flags given -> planned, else detected
    record["host"] = host_constraints(host)

The dict is JSON-ready and deterministic (sorted lists, no timestamps).
"""

from __future__ import annotations

from typing import Any

from envbuilder.host.model import HostInfo


def host_constraints(host: HostInfo) -> dict[str, Any]:
    """Keys: kind ("detected"|"planned"|"none"), driver, cuda_driver_version (may be None),
    gpu_count, gpu_names (sorted, distinct), sm (sorted distinct "X.Y" compute capabilities).
    """
    return {
        "kind": host.source,
        "driver": host.driver,
        "cuda_driver_version": host.cuda_driver_version,
        "gpu_count": len(host.gpus),
        "gpu_names": sorted({g.name for g in host.gpus}),
        "sm": host.sms,
    }
