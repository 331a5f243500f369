"""How a stage reports progress: a callback that takes one line of text (the CLI prints it on stderr).

Every stage takes `progress: Progress` and never prints itself; `no_progress` is the default for callers
that want none.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def no_progress(_line: str) -> None:
    """A Progress that drops every line."""
