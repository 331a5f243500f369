"""The Singularity Image Format (SIF), written and read to the Sylabs specification.

Layout and field order follow the reference implementation, github.com/sylabs/sif/v2
pkg/sif (sif.go `header`, descriptor.go `rawDescriptor`; Debian: golang-github-sylabs-sif-dev),
all little-endian, packed without alignment (Go encoding/binary):

  header (128 bytes)
    launch[32]  "#!/usr/bin/env run-singularity\\n" NUL-padded
    magic[10]   "SIF_MAGIC\\0"      version[3] "01\\0"      arch[3] "02\\0" (amd64)
    id[16]      UUID
    ctime, mtime, dfree, dtotal, descroff, descrlen, dataoff, datalen   (int64 each)
  descriptors (dtotal x 585 bytes) at descroff (4096, as the reference writer does)
    datatype i32, used u8, id u32, groupid u32 (|0xf0000000), link u32,
    offset i64, size i64, size_with_padding i64, ctime i64, mtime i64, uid i64, gid i64,
    name[128], extra[384]  (partition extra: fstype i32, parttype i32, arch[3])
  data objects from dataoff; partitions aligned to 4096.
"""

from __future__ import annotations

import itertools
import os
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder.errors import ArtifactCorruptError

LAUNCH_SCRIPT = b"#!/usr/bin/env run-singularity\n"
MAGIC = b"SIF_MAGIC\x00"
VERSION = b"01\x00"
HEADER = struct.Struct("<32s10s3s3s16sqqqqqqqq")
DESCRIPTOR = struct.Struct("<iBIIIqqqqqqq128s384s")
PARTITION_EXTRA = struct.Struct("<ii3s")
DESCRIPTORS_OFFSET = 4096
DESCRIPTOR_CAPACITY = 48
PARTITION_ALIGN = 4096
GROUP_MASK = 0xF0000000
DEFAULT_GROUP = 1

# DataType (sif.go): iota + 0x4001
DATA_TYPES = {
    0x4001: "Def.FILE",
    0x4002: "Env.Vars",
    0x4003: "JSON.Labels",
    0x4004: "FS",
    0x4005: "Signature",
    0x4006: "JSON.Generic",
    0x4007: "Generic/Raw",
    0x4008: "Cryptographic Message",
    0x4009: "SBOM",
}
DATA_DEFFILE, DATA_LABELS, DATA_PARTITION, DATA_GENERIC_JSON = 0x4001, 0x4003, 0x4004, 0x4006
FS_TYPES = {1: "Squashfs", 2: "Ext3", 3: "Archive", 4: "Raw", 5: "Encrypted squashfs"}
FS_SQUASH = 1
PART_TYPES = {1: "System", 2: "*System", 3: "Data", 4: "Overlay"}
PART_PRIMSYS = 2
ARCHES = {
    "00": "unknown", "01": "386", "02": "amd64", "03": "arm", "04": "arm64", "05": "ppc64",
    "06": "ppc64le", "07": "mips", "08": "mipsle", "09": "mips64", "10": "mips64le",
    "11": "s390x", "12": "riscv64",
}  # fmt: skip
ARCH_CODES = {v: k for k, v in ARCHES.items()}

assert HEADER.size == 128 and DESCRIPTOR.size == 585


def arch_code(goarch: str) -> bytes:
    code = ARCH_CODES.get(goarch)
    if code is None or goarch == "unknown":
        raise ValueError(f"architecture {goarch!r} has no SIF code")
    return code.encode() + b"\x00"


def deterministic_id(*parts: str) -> uuid.UUID:
    """Same inputs, same UUID (uuid5), so two exports of one image are byte-identical."""
    return uuid.uuid5(uuid.NAMESPACE_URL, "envbuilder:sif:" + ":".join(parts))


@dataclass
class ObjectSpec:
    """A data object to place in the SIF (the partition is passed separately: it is large)."""

    datatype: int
    data: bytes
    name: str = ""


def _descriptor(
    datatype: int, obj_id: int, offset: int, size: int, padded: int, t: int, name: str, extra: bytes
) -> bytes:
    return DESCRIPTOR.pack(
        datatype, 1, obj_id, DEFAULT_GROUP | GROUP_MASK, 0, offset, size, padded, t, t, 0, 0,
        name.encode()[:128], extra,
    )  # fmt: skip


def layout(objects: list[ObjectSpec]) -> tuple[int, int]:
    """(data offset, partition offset) for `objects` followed by the aligned partition."""
    data_off = DESCRIPTORS_OFFSET + DESCRIPTOR_CAPACITY * DESCRIPTOR.size
    end = data_off + sum(len(o.data) for o in objects)
    part_off = -(-end // PARTITION_ALIGN) * PARTITION_ALIGN
    return data_off, part_off


def write_sif_prefix(
    path: Path, objects: list[ObjectSpec], part_offset: int, part_size: int, arch: str, sif_id: uuid.UUID, t: int
) -> None:
    """Write header, descriptors and the small objects into `path`, whose partition is already
    in place at `part_offset` (mksquashfs wrote it there with -o)."""
    data_off, expect_part = layout(objects)
    if expect_part != part_offset:
        raise ValueError("partition offset does not match the object layout")
    descriptors = []
    blobs = b""
    pos = data_off
    for i, obj in enumerate(objects, start=1):
        descriptors.append(_descriptor(obj.datatype, i, pos, len(obj.data), len(obj.data), t, obj.name, b""))
        blobs += obj.data
        pos += len(obj.data)
    part_id = len(objects) + 1
    extra = PARTITION_EXTRA.pack(FS_SQUASH, PART_PRIMSYS, arch_code(arch))
    descriptors.append(
        _descriptor(DATA_PARTITION, part_id, part_offset, part_size, part_offset - pos + part_size, t, "", extra)
    )
    used = len(descriptors)
    table = b"".join(descriptors) + b"\x00" * (DESCRIPTOR.size * (DESCRIPTOR_CAPACITY - used))
    datalen = part_offset + part_size - data_off
    header = HEADER.pack(
        LAUNCH_SCRIPT, MAGIC, VERSION, arch_code(arch), sif_id.bytes, t, t,
        DESCRIPTOR_CAPACITY - used, DESCRIPTOR_CAPACITY, DESCRIPTORS_OFFSET, len(table), data_off, datalen,
    )  # fmt: skip
    gap = b"\x00" * (part_offset - pos)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, header + b"\x00" * (DESCRIPTORS_OFFSET - HEADER.size), 0)
        os.pwrite(fd, table, DESCRIPTORS_OFFSET)
        os.pwrite(fd, blobs + gap, data_off)
        os.fsync(fd)
    finally:
        os.close(fd)


def partition_offset(objects: list[ObjectSpec]) -> int:
    return layout(objects)[1]


# --- reading -----------------------------------------------------------------------


@dataclass
class Descriptor:
    index: int
    datatype: int
    used: bool
    id: int
    group_id: int
    link: int
    offset: int
    size: int
    size_with_padding: int
    ctime: int
    mtime: int
    uid: int
    gid: int
    name: str
    extra: bytes

    @property
    def type_name(self) -> str:
        return DATA_TYPES.get(self.datatype, f"unknown(0x{self.datatype:x})")

    def partition(self) -> dict[str, str] | None:
        if self.datatype != DATA_PARTITION:
            return None
        fs, pt, arch = PARTITION_EXTRA.unpack(self.extra[: PARTITION_EXTRA.size])
        return {
            "fstype": FS_TYPES.get(fs, f"unknown({fs})"),
            "parttype": PART_TYPES.get(pt, f"unknown({pt})"),
            "arch": ARCHES.get(arch[:2].decode(errors="replace"), "unknown"),
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "datatype": self.type_name,
            "group_id": self.group_id & ~GROUP_MASK,
            "link": self.link,
            "offset": self.offset,
            "size": self.size,
            "size_with_padding": self.size_with_padding,
            "ctime": self.ctime,
            "mtime": self.mtime,
            "name": self.name,
        }
        part = self.partition()
        if part:
            out.update(part)
        return out


@dataclass
class SifFile:
    path: Path
    file_size: int
    launch: str
    magic: bytes
    version: str
    arch: str
    id: uuid.UUID
    ctime: int
    mtime: int
    dfree: int
    dtotal: int
    descroff: int
    descrlen: int
    dataoff: int
    datalen: int
    descriptors: list[Descriptor] = field(default_factory=list)

    def header_dict(self) -> dict[str, Any]:
        return {
            "launch": self.launch,
            "magic": self.magic.rstrip(b"\x00").decode(errors="replace"),
            "version": self.version,
            "arch": self.arch,
            "id": str(self.id),
            "ctime": self.ctime,
            "mtime": self.mtime,
            "descriptors_free": self.dfree,
            "descriptors_total": self.dtotal,
            "descriptors_offset": self.descroff,
            "descriptors_size": self.descrlen,
            "data_offset": self.dataoff,
            "data_size": self.datalen,
        }

    def used(self) -> list[Descriptor]:
        return [d for d in self.descriptors if d.used]

    def read_object(self, d: Descriptor) -> bytes:
        with open(self.path, "rb") as fh:
            fh.seek(d.offset)
            return fh.read(d.size)

    def primary_partition(self) -> Descriptor | None:
        for d in self.used():
            part = d.partition()
            if part and part["parttype"] == "*System":
                return d
        return None


def _corrupt(path: Path, what: str) -> ArtifactCorruptError:
    return ArtifactCorruptError(
        f"{path}: {what}",
        "the file is truncated or damaged: export it again (envbuilder export) and re-copy it",
        path=str(path),
    )


def is_sif(head: bytes) -> bool:
    return len(head) >= 42 and head[32:42] == MAGIC


def read_sif(path: Path) -> SifFile:
    """Parse and structurally verify a SIF file; ArtifactCorruptError names the first problem."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        raw = fh.read(HEADER.size)
        if len(raw) < HEADER.size:
            raise _corrupt(path, f"truncated: {size} bytes, shorter than the {HEADER.size}-byte SIF header")
        f = HEADER.unpack(raw)
        sif = SifFile(
            path=path, file_size=size, launch=f[0].rstrip(b"\x00").decode(errors="replace"), magic=f[1],
            version=f[2].rstrip(b"\x00").decode(errors="replace"),
            arch=ARCHES.get(f[3][:2].decode(errors="replace"), "unknown"), id=uuid.UUID(bytes=f[4]),
            ctime=f[5], mtime=f[6], dfree=f[7], dtotal=f[8], descroff=f[9], descrlen=f[10],
            dataoff=f[11], datalen=f[12],
        )  # fmt: skip
        if sif.magic != MAGIC:
            raise _corrupt(path, "bad magic: not a SIF file (expected SIF_MAGIC at byte 32)")
        if f[2] != VERSION:
            raise _corrupt(path, f"unsupported SIF version {sif.version!r} (expected '01')")
        if sif.dtotal < 0 or sif.dtotal * DESCRIPTOR.size != sif.descrlen:
            raise _corrupt(path, f"descriptor table size {sif.descrlen} != {sif.dtotal} x {DESCRIPTOR.size}")
        if sif.descroff < HEADER.size or sif.descroff + sif.descrlen > size:
            raise _corrupt(
                path, f"truncated: descriptor table [{sif.descroff}, +{sif.descrlen}) lies past the end ({size})"
            )
        if sif.dataoff < sif.descroff + sif.descrlen or sif.dataoff + sif.datalen > size:
            raise _corrupt(
                path, f"truncated: data section [{sif.dataoff}, +{sif.datalen}) lies past the end ({size} bytes)"
            )
        fh.seek(sif.descroff)
        table = fh.read(sif.descrlen)
    for i in range(sif.dtotal):
        f = DESCRIPTOR.unpack_from(table, i * DESCRIPTOR.size)
        desc = Descriptor(
            index=i, datatype=f[0], used=bool(f[1]), id=f[2], group_id=f[3], link=f[4], offset=f[5],
            size=f[6], size_with_padding=f[7], ctime=f[8], mtime=f[9], uid=f[10], gid=f[11],
            name=f[12].rstrip(b"\x00").decode(errors="replace"), extra=f[13],
        )  # fmt: skip
        sif.descriptors.append(desc)
    used = sif.used()
    if sif.dfree != sif.dtotal - len(used):
        raise _corrupt(path, f"descriptors_free {sif.dfree} disagrees with {len(used)} used of {sif.dtotal}")
    spans: list[tuple[int, int, int]] = []
    for d in used:
        if d.offset < sif.dataoff or d.size < 0 or d.offset + d.size > sif.dataoff + sif.datalen:
            raise _corrupt(path, f"object {d.id} ({d.type_name}) [{d.offset}, +{d.size}) lies outside the data")
        spans.append((d.offset, d.offset + d.size, d.id))
    spans.sort()
    for (_a0, a1, aid), (b0, _b1, bid) in itertools.pairwise(spans):
        if b0 < a1:
            raise _corrupt(path, f"objects {aid} and {bid} overlap")
    primaries = [d for d in used if (d.partition() or {}).get("parttype") == "*System"]
    if len(primaries) > 1:
        raise _corrupt(path, "more than one primary system partition")
    prim_part = primaries[0].partition() if primaries else None
    if prim_part and prim_part["arch"] != sif.arch:
        raise _corrupt(path, "header arch differs from the primary partition's arch")
    return sif
