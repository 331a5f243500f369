"""The uv binary envbuilder depends on (the `uv` package from PyPI) and its version.

One place for both, used by lock (records the version), image (copies the binary into the
build context) and host (doctor reports it). Base layer: host/ may use it too.
"""

from __future__ import annotations

import re

from envbuilder import procs

VERSION_TIMEOUT_S = 10.0


def uv_binary() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def uv_version(timeout: float = VERSION_TIMEOUT_S) -> str | None:
    """'0.13.9', or None when the uv package is missing or its binary does not answer."""
    try:
        out = procs.run([uv_binary(), "--version"], capture_output=True, text=True, timeout=timeout,
                        check=True).stdout
    except Exception:  # ImportError, OSError, timeout, non-zero exit: all mean "unknown"
        return None
    m = re.search(r"uv (\S+)", out)
    return m.group(1) if m else None
