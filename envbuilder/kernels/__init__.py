"""Kernels: the stage-2 wheelhouse (arch handling, ABI-named wheels, a content-addressed cache)."""

from envbuilder.kernels.pipeline import WheelsOptions, WheelsResult, run_wheels, wheelhouse_for_lock
from envbuilder.kernels.wheelhouse import WHEELHOUSE_RECORD, Wheelhouse, WheelRecord, read_wheelhouse

__all__ = ["WHEELHOUSE_RECORD", "WheelRecord", "Wheelhouse", "WheelsOptions", "WheelsResult", "read_wheelhouse",
           "run_wheels", "wheelhouse_for_lock"]
