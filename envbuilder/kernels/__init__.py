"""Kernels: the stage-2 wheelhouse (arch handling, ABI-named wheels, a content-addressed cache)."""

from envbuilder.kernels.pipeline import (
    WheelsOptions,
    WheelsResult,
    read_wheelhouse,
    run_wheels,
    wheelhouse_for_lock,
)

__all__ = ["WheelsOptions", "WheelsResult", "read_wheelhouse", "run_wheels", "wheelhouse_for_lock"]
