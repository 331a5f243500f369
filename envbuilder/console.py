"""Output helpers: human progress goes to stderr (rich), machine JSON to stdout.

The global -q/-v/--color options (every command has them) set `SETTINGS`; every console
made here follows it. Piped stdout is not cut at 80 columns: tables keep their full width.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from envbuilder.canonical import dumps

__all__ = ["SETTINGS", "OutputSettings", "dumps", "emit_json", "stderr_console", "stdout_console",
           "without_timings"]

#: width of a console whose stream is not a terminal: wide enough for any table row
PIPE_WIDTH = 4096


@dataclass
class OutputSettings:
    quiet: bool = False   # -q: no progress or human report on stderr (errors and --json still appear)
    verbosity: int = 0    # -v: more detail; -vv: also tracebacks of internal errors
    color: str = "auto"   # auto | always | never (NO_COLOR is honoured under auto)


SETTINGS = OutputSettings()


def _color_kwargs() -> dict[str, Any]:
    if SETTINGS.color == "always":
        return {"force_terminal": True}
    if SETTINGS.color == "never":
        return {"no_color": True, "color_system": None}
    return {}


def stderr_console(quiet: bool = False) -> Console:
    kw = _color_kwargs()
    if not sys.stderr.isatty() and "force_terminal" not in kw:
        kw["width"] = PIPE_WIDTH
    return Console(stderr=True, quiet=quiet or SETTINGS.quiet, highlight=False, soft_wrap=True, **kw)


def stdout_console() -> Console:
    kw = _color_kwargs()
    if not sys.stdout.isatty() and "force_terminal" not in kw:
        kw["width"] = PIPE_WIDTH
    return Console(highlight=False, soft_wrap=True, **kw)


def without_timings(obj: Any) -> Any:
    """`obj` without wall-clock values, so --json prints the same bytes for the same inputs.

    Timing keys are named `timings`, `seconds` or `*_seconds` throughout; --timings keeps them.
    """
    if isinstance(obj, dict):
        return {k: without_timings(v) for k, v in obj.items()
                if not (k in ("timings", "seconds") or str(k).endswith("_seconds"))}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


def emit_json(obj: Any, timings: bool = True) -> None:
    sys.stdout.write(dumps(obj if timings else without_timings(obj)))
    sys.stdout.flush()
