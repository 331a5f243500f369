"""The section headers of a 64-bit little-endian ELF file, read from the file itself (the format is documented,
so no binutils or CUDA tools are needed). Kernels read them for CUDA fat binaries, the bundle for the glibc
symbol versions a compiled wheel needs."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

_NAMES_MAX = 1 << 20  # a section-name table larger than this is not an object envbuilder built or carries


@dataclass(frozen=True)
class Section:
    name: bytes
    type: int
    offset: int
    size: int
    link: int  # sh_link: for a version-needs section, the index of its string table
    info: int  # sh_info: for a version-needs section, the number of entries


def read_sections(fh: BinaryIO) -> list[Section] | None:
    """Every section header of the ELF64 file at `fh` (read from its start), or None when it is not a
    little-endian ELF64 file or its header table does not hold together."""
    fh.seek(0)
    head = fh.read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if not shoff or shentsize != 64 or not 0 < shnum < 65536 or shstrndx >= shnum:  # ELF64 headers are 64 bytes
        return None
    fh.seek(shoff)
    table = fh.read(shentsize * shnum)
    if len(table) < shentsize * shnum:
        return None
    rows = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
    fh.seek(rows[shstrndx][4])
    names = fh.read(min(rows[shstrndx][5], _NAMES_MAX))
    out = []
    for name_off, sh_type, _flags, _addr, offset, size, link, info, _align, _entsize in rows:
        end = names.find(b"\0", name_off)
        out.append(Section(names[name_off:end if end >= 0 else None], sh_type, offset, size, link, info))
    return out
