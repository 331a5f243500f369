"""Text that came from a file or an option, made safe for where it goes: a path or a terminal.

Standard library only (certify's in-environment modules may use it).

- `plain_name`: the one allow-list for a name that is joined to a path (a wheel file named by a
  manifest, a row, a key name): letters, digits and `._+!-`, not empty, not hidden, not `..`, no
  separator, at most 255 bytes. Everything that takes a name from a file checks it here first.
- `plain_relpath`: a relative path made of plain names (`wheels/torch-2.7.0-….whl`).
- `printable`: control characters (ESC, CR, BEL, newlines, DEL, C1) written as visible escapes, so a
  crafted label or file name cannot rewrite the terminal around envbuilder's own verdict.
"""

from __future__ import annotations

import math
import re
import unicodedata

#: the characters a plain name may hold (wheel and sdist file names, row tags, key names)
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]*")
MAX_NAME_BYTES = 255


def plain_name_problem(value: object) -> str | None:
    """Why `value` is not a plain name (None when it is one)."""
    if not isinstance(value, str):
        return f"is not a string (it is {type(value).__name__})"
    if value == "":
        return "is empty"
    if value in (".", ".."):
        return f"is {value!r}"
    if value.startswith("."):
        return "starts with '.' (a hidden name)"
    if "/" in value or "\\" in value:
        return "holds a path separator"
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    if not PLAIN_NAME.fullmatch(value):
        bad = sorted({c for c in value if not re.fullmatch(r"[A-Za-z0-9._+!-]", c)})
        return "holds " + ", ".join(repr(c) for c in bad[:5]) + " (only letters, digits and ._+!- are allowed)"
    return None


def is_plain_name(value: object) -> bool:
    return plain_name_problem(value) is None


def plain_relpath_problem(value: object) -> str | None:
    """Why `value` is not a relative path of plain names (None when it is one)."""
    if not isinstance(value, str):
        return f"is not a string (it is {type(value).__name__})"
    if value.startswith("/"):
        return "is an absolute path"
    parts = value.split("/")
    for part in parts:
        problem = plain_name_problem(part)
        if problem is not None:
            return f"has a part {printable(part)!r} that {problem}" if part else "has an empty part"
    return None


def finite(value: object) -> float | None:
    """`value` as a finite float, or None if it is not a number (bool is not a number) or not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return out if math.isfinite(out) else None


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def printable(text: object, keep: str = "") -> str:
    """`text` with every control or format character written as an escape (ESC -> \\e, BEL -> \\x07).

    `keep`: characters left as they are (the console keeps the newlines of a multi-line message)."""
    s = str(text)
    if s.isprintable():
        return s
    out = []
    for c in s:
        if c.isprintable() or c == " " or c in keep:
            out.append(c)
        elif c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif unicodedata.category(c) in ("Zl", "Zp", "Zs"):  # odd spaces and line separators
            out.append(f"\\u{ord(c):04x}")
        elif ord(c) < 0x100:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return "".join(out)
