"""Output helpers: human progress goes to stderr (rich), machine JSON to stdout."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console


def stderr_console(quiet: bool = False) -> Console:
    return Console(stderr=True, quiet=quiet, highlight=False, soft_wrap=True)


def stdout_console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def dumps(obj: Any) -> str:
    """Deterministic JSON: sorted keys, fixed indentation, trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def emit_json(obj: Any) -> None:
    sys.stdout.write(dumps(obj))
    sys.stdout.flush()
