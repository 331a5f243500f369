"""The host a lock targets: detected through NVML or planned from flags, and which rows it can run."""

from envbuilder.host.constraints import host_constraints
from envbuilder.host.detect import detect_host, plan_host, resolve_host
from envbuilder.host.model import GpuInfo, HostInfo, ToolStatus
from envbuilder.host.rows import RowVerdict, evaluate_matrix, evaluate_release, evaluate_row

__all__ = [
    "GpuInfo", "HostInfo", "RowVerdict", "ToolStatus", "detect_host", "evaluate_matrix", "evaluate_release",
    "evaluate_row", "host_constraints", "plan_host", "resolve_host",
]
