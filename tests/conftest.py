"""Shared test configuration.

Unit tests run first; tests marked `integration` (real PyPI, real Docker engine,
real squashfs tools) are moved to the end of the run so a fast failure shows early.
GPU tests are marked `gpu` and skipped when no NVIDIA GPU is visible (always in CI).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = int(pynvml.nvmlDeviceGetCount())
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda it: 1 if it.get_closest_marker("integration") else 0)
    if not _has_gpu():
        skip = pytest.mark.skip(reason="no NVIDIA GPU visible (CI has none); run on the device machine")
        for it in items:
            if it.get_closest_marker("gpu"):
                it.add_marker(skip)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def uv_bin() -> str:
    from uv import find_uv_bin

    path = find_uv_bin()
    assert shutil.which(path) or Path(path).exists()
    return str(path)
