"""Lock: run the real uv lock on the rendered pyproject and write envbuilder.lock.json."""

from envbuilder.lock.pipeline import LockOptions, LockResult, run_lock
from envbuilder.lock.record import RECORD_NAME, LockRecord, read_record

__all__ = ["RECORD_NAME", "LockOptions", "LockRecord", "LockResult", "read_record", "run_lock"]
