"""GPU architectures embedded in a shared object, read from its CUDA fat binaries (stdlib only).

nvcc places one fat binary per translation unit in the `.nv_fatbin` section: a 16-byte header
(magic 0xBA55ED50, version, header size, payload size) followed by entries, each with its own
header that names its kind (1 = PTX, 2 = ELF/SASS) and its sm number at byte 28. Compressed
entries keep those headers uncompressed, so the list is readable without cuobjdump, which many
environments lack. The layout is the one cuobjdump's `--list-elf`/`--list-ptx` report; the
device runs cross-check the two (BENCHMARKS.md "Kernels on the GPU machines").
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

_MAGIC = struct.pack("<I", 0xBA55ED50)
_KIND = {1: "ptx", 2: "sass"}


def fatbin_archs(path: Path) -> dict[str, set[int]]:
    """{'sass': {80, 90}, 'ptx': {90}} for one file; empty sets when it holds no fat binary."""
    found: dict[str, set[int]] = {"sass": set(), "ptx": set()}
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            size = len(buf)
            pos = buf.find(_MAGIC)
            while pos != -1:
                version, hsize, total = struct.unpack_from("<HHQ", buf, pos + 4) if pos + 16 <= size else (0, 0, 0)
                start, end = pos + hsize, pos + hsize + total
                if version == 1 and hsize == 16 and total > 0 and end <= size:
                    entry = start
                    while entry + 32 <= end:
                        kind, _ver, ehsize, payload = struct.unpack_from("<HHIQ", buf, entry)
                        sm = struct.unpack_from("<I", buf, entry + 28)[0]
                        if kind not in _KIND or ehsize < 32 or not 10 <= sm <= 200:
                            break
                        found[_KIND[kind]].add(sm)
                        entry += ehsize + payload
                    pos = buf.find(_MAGIC, max(end, pos + 4))
                else:
                    pos = buf.find(_MAGIC, pos + 4)
    except (OSError, ValueError):  # unreadable, or empty (mmap of 0 bytes)
        pass
    return found


def runs_on(archs: dict[str, set[int]], sm: int) -> bool:
    """SASS for the same major and an equal-or-lower minor, or PTX the driver can JIT (<= sm)."""
    major = sm // 10
    return any(s // 10 == major and s <= sm for s in archs["sass"]) or any(p <= sm for p in archs["ptx"])
