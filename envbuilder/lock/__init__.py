"""Lock: run the real uv lock on the rendered pyproject and write envbuilder.lock.json.

The pipeline (uv, resolver, renderer) loads on first use of its names: export, build and install
import `envbuilder.lock.record` and should not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envbuilder.lock.lockdir import LockDir, open_lockdir
from envbuilder.lock.record import RECORD_NAME, LockRecord

if TYPE_CHECKING:
    from envbuilder.lock.pipeline import LockOptions, LockResult, run_lock

__all__ = ["RECORD_NAME", "LockDir", "LockOptions", "LockRecord", "LockResult", "open_lockdir", "run_lock"]
_PIPELINE = ("LockOptions", "LockResult", "run_lock")


def __getattr__(name: str) -> Any:
    if name in _PIPELINE:
        from envbuilder.lock import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
