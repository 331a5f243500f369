"""Output helpers: human progress goes to stderr (rich), machine JSON to stdout.

The global -q/-v/--color options (every command has them) set `SETTINGS`; every console
made here follows it. Piped stdout is not cut at 80 columns: tables keep their full width.

Text is never read as markup: a path, label, package name or cause may hold `[/]` or `[red]`, and
rich would crash on it or print something else. The consoles made here have markup off, and a
`str` they print, a table cell or a status line is shown as it is, its control characters (ESC, CR,
BEL...) written as escapes so a crafted label cannot rewrite the terminal. Style comes only from
`styled("[green]wrote[/] {}", path)`: the template is ours, every value is shown as plain text.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status
from rich.table import Table
from rich.text import Text

from envbuilder.canonical import dumps
from envbuilder.safetext import printable

__all__ = ["SETTINGS", "OutputSettings", "SafeConsole", "dumps", "emit_json", "plain", "stderr_console",
           "stdout_console", "styled", "without_timings"]

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


def plain(text: object) -> Text:
    """`text` shown exactly: no markup, control characters as escapes (newlines and tabs kept)."""
    return text if isinstance(text, Text) else Text(printable(str(text), keep="\n\t"))


def styled(template: str, *values: object) -> Text:
    """Our markup in `template` ({} placeholders); each value is plain text (markup and control characters
    escaped), so `styled("[green]wrote[/] {}", path)` styles "wrote" and never anything in the path."""
    return Text.from_markup(template.format(*(escape(printable(str(v))) for v in values)))


class _SafeStatus(Status):
    def update(self, status: Any = None, **kwargs: Any) -> None:
        super().update(None if status is None else plain(status), **kwargs)


class SafeConsole(Console):
    """A rich Console that never reads markup from the text it is given (see the module docstring)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        kwargs["markup"] = False
        super().print(*(self._safe(o) for o in objects), **kwargs)

    def status(self, status: Any, **kwargs: Any) -> Status:
        return _SafeStatus(plain(status), console=self, **kwargs)

    @staticmethod
    def _safe(obj: Any) -> Any:
        if isinstance(obj, str):
            return plain(obj)
        if isinstance(obj, Table):
            if isinstance(obj.title, str):
                obj.title = plain(obj.title)
            for col in obj.columns:
                if isinstance(col.header, str):
                    col.header = plain(col.header)
                col._cells = [plain(c) if isinstance(c, str) else c for c in col._cells]
        return obj


def stderr_console(quiet: bool = False) -> SafeConsole:
    kw = _color_kwargs()
    if not sys.stderr.isatty() and "force_terminal" not in kw:
        kw["width"] = PIPE_WIDTH
    return SafeConsole(stderr=True, quiet=quiet or SETTINGS.quiet, highlight=False, soft_wrap=True, markup=False,
                       emoji=False, **kw)


def stdout_console() -> SafeConsole:
    kw = _color_kwargs()
    if not sys.stdout.isatty() and "force_terminal" not in kw:
        kw["width"] = PIPE_WIDTH
    return SafeConsole(highlight=False, soft_wrap=True, markup=False, emoji=False, **kw)


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
