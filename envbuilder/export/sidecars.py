"""Side files (definition file, launch snippets) that never silently replace a user's edits.

Each file we write ends with a line `# envbuilder-sha256 <hex>`, the sha256 of everything above
it. A later export replaces a file whose stamp still matches (nobody touched it). A file that was
edited (or was never ours) is left in place, and the new text goes to `<name>.new` beside it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from envbuilder.atomic import write_atomic

STAMP = "# envbuilder-sha256 "


def stamped(text: str) -> str:
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}{STAMP}{hashlib.sha256(body.encode()).hexdigest()}\n"


def is_pristine(text: str) -> bool:
    """True when `text` is exactly what `stamped` wrote (its last line matches the rest)."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    if not last.startswith(STAMP):
        return False
    return hashlib.sha256((body + "\n").encode()).hexdigest() == last[len(STAMP):].strip()


def write_sidecar(path: Path, text: str, mode: int) -> tuple[Path, bool]:
    """Write `text` (stamped) to `path`, or to `path.new` when `path` holds someone's edits.

    Returns (the path written, whether the existing file was kept).
    """
    data = stamped(text)
    if path.exists():
        try:
            current = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            current = None
        if current is not None and current != data and not is_pristine(current):
            new = path.with_name(path.name + ".new")
            write_atomic(new, data, mode=mode)
            return new, True
    write_atomic(path, data, mode=mode)
    return path, False
