"""The newest glibc a compiled wheel's shared objects need, read from their ELF version-needs tables.

A C extension built on this machine links against this machine's glibc, but it needs only the symbol versions
it really uses (pesq 0.0.4 built on glibc 2.36 needs GLIBC_2.14). The ELF `.gnu.version_r` section lists
them; the newest is what the target's glibc must be at least, which is what auditwheel checks for manylinux
tags. Read from the file itself (the ELF format is documented), so no binutils are needed.

Only glibc is judged: an object that needs versioned libstdc++ symbols (GLIBCXX_, CXXABI_) needs a C++ runtime
whose version the target's glibc does not tell, so such a wheel counts as unknown (the caller keeps its rule:
carried only to a target whose glibc is at least this machine's).
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
from pathlib import Path

from envbuilder.elf import read_sections

_SHT_GNU_VERNEED = 0x6FFFFFFE
_GLIBC = re.compile(rb"GLIBC_(\d+)\.(\d+)(?:\.(\d+))?\Z")
_CXX_RUNTIME = (b"GLIBCXX_", b"CXXABI_")
_MAX_SO = 1 << 30  # a shared object larger than this is not read (none of the stage-1 sdists comes close)


def elf_glibc_need(data: bytes) -> tuple[int, ...] | None:
    """The newest GLIBC_x.y a little-endian ELF64 object needs; () when it needs none; None when the bytes
    are not such an ELF object, its tables do not hold together, or it needs a versioned C++ runtime."""
    try:
        sections = read_sections(io.BytesIO(data))
        if sections is None:
            return None
        need: tuple[int, ...] = ()
        for sec in sections:
            if sec.type != _SHT_GNU_VERNEED:
                continue
            strtab = sections[sec.link].offset
            entry = sec.offset
            for _ in range(sec.info):  # the number of Verneed entries
                _ver, cnt, _file, aux, nxt = struct.unpack_from("<HHIII", data, entry)
                a = entry + aux
                for _ in range(cnt):
                    _hash, _flags, _other, name, anext = struct.unpack_from("<IHHII", data, a)
                    end = data.index(b"\0", strtab + name)
                    if data[strtab + name:end].startswith(_CXX_RUNTIME):
                        return None
                    m = _GLIBC.match(data[strtab + name:end])
                    if m:
                        need = max(need, tuple(int(g) for g in m.groups() if g is not None))
                    a += anext
                    if not anext:
                        break
                entry += nxt
                if not nxt:
                    break
        return need
    except (struct.error, IndexError, ValueError):
        return None


def wheel_glibc_need(wheel: Path) -> tuple[int, ...] | None:
    """The newest glibc any shared object in `wheel` needs (() when none needs one); None when one of them
    cannot be read, so the caller falls back to what it assumed before."""
    need: tuple[int, ...] = ()
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if not (info.filename.endswith(".so") or ".so." in info.filename) or info.file_size > _MAX_SO:
                continue
            got = elf_glibc_need(z.read(info))
            if got is None:
                return None
            need = max(need, got)
    return need
