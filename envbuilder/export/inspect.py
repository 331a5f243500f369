"""`envbuilder inspect FILE`: read an exported .sqsh or .sif back and verify its structure.

Checks (each failure is ArtifactCorruptError, exit 44, naming the first problem):
  SIF   magic, version, descriptor table inside the file and sized dtotal x 585, free count,
        every used object inside the data section, no overlaps, one primary partition whose arch
        matches the header, a squashfs superblock at the partition offset whose bytes_used fits.
  sqsh  squashfs 4.0 superblock ("hsqs"), bytes_used within the file.
  both  with --list, `unsquashfs -lln` must read the whole directory tree.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from envbuilder import procs
from envbuilder.errors import ArtifactCorruptError, OutputPathError, ToolMissingError
from envbuilder.export import sif as sifmod
from envbuilder.export.squashfs import COMPRESSORS, SUPERBLOCK, Superblock, parse_superblock


def _corrupt(path: Path, what: str) -> ArtifactCorruptError:
    return ArtifactCorruptError(
        f"{path}: {what}",
        "the file is truncated or damaged: export it again (envbuilder export) and re-copy it",
        path=str(path),
    )


def _check_squashfs(path: Path, offset: int, available: int) -> Superblock:
    with open(path, "rb") as fh:
        fh.seek(offset)
        raw = fh.read(SUPERBLOCK.size)
    sb = parse_superblock(raw)
    where = f" at offset {offset}" if offset else ""
    if sb is None:
        if len(raw) < SUPERBLOCK.size:
            raise _corrupt(path, f"truncated: no room for a squashfs superblock{where}")
        raise _corrupt(path, f"no squashfs superblock (magic 'hsqs'){where}")
    if sb.version != "4.0":
        raise _corrupt(path, f"squashfs version {sb.version} (expected 4.0){where}")
    if sb.bytes_used > available:
        raise _corrupt(
            path, f"truncated: squashfs{where} needs {sb.bytes_used} bytes but only {available} are there"
        )
    _check_tables(path, offset, raw, where)
    return sb


_NONE = 0xFFFFFFFFFFFFFFFF  # an absent optional table
_METADATA_BLOCK = 8192


def _check_tables(path: Path, offset: int, raw: bytes, where: str) -> None:
    """The rest of the superblock, every table offset, and the inode table's first metadata block.

    A damaged superblock or inode table passes a magic/size check but no reader can open the
    filesystem; these are the fields the kernel and unsquashfs read first.
    """
    f = SUPERBLOCK.unpack(raw[: SUPERBLOCK.size])
    inodes, block_size, comp, block_log, ids = f[1], f[3], f[5], f[6], f[8]
    root_inode, bytes_used, id_table, xattr_table, inode_table, dir_table, frag_table, lookup_table = f[11:19]
    if not 4096 <= block_size <= 1 << 20 or block_size & (block_size - 1) or 1 << block_log != block_size:
        raise _corrupt(path, f"squashfs{where}: block size {block_size} / block_log {block_log} is not valid")
    if comp not in COMPRESSORS:
        raise _corrupt(path, f"squashfs{where}: unknown compressor id {comp}")
    if inodes == 0 or ids == 0:
        raise _corrupt(path, f"squashfs{where}: {inodes} inodes and {ids} ids (an image has at least one of each)")
    required = {"inode_table_start": inode_table, "directory_table_start": dir_table, "id_table_start": id_table}
    optional = {"fragment_table_start": frag_table, "lookup_table_start": lookup_table,
                "xattr_id_table_start": xattr_table}
    for name, value in {**required, **optional}.items():
        if name in optional and value == _NONE:
            continue
        if not SUPERBLOCK.size <= value < bytes_used:
            raise _corrupt(path, f"squashfs{where}: {name} {value} lies outside the filesystem "
                                 f"({SUPERBLOCK.size}..{bytes_used})")
    if not inode_table < dir_table:
        raise _corrupt(path, f"squashfs{where}: inode table ({inode_table}) does not come before the directory "
                             f"table ({dir_table})")
    if (root_inode >> 16) >= dir_table - inode_table or (root_inode & 0xFFFF) >= _METADATA_BLOCK:
        raise _corrupt(path, f"squashfs{where}: root inode reference {root_inode:#x} points outside the inode table")
    with open(path, "rb") as fh:
        fh.seek(offset + inode_table)
        head = fh.read(2)
        if len(head) < 2:
            raise _corrupt(path, f"squashfs{where}: truncated inode table")
        header = int.from_bytes(head, "little")
        size, compressed = header & 0x7FFF, not header & 0x8000
        if not 0 < size <= _METADATA_BLOCK or inode_table + 2 + size > dir_table:
            raise _corrupt(path, f"squashfs{where}: the inode table's first block header ({header:#06x}) is "
                                 "damaged")
        block = fh.read(size)
    data = _decompress(COMPRESSORS[comp], block) if compressed else block
    if data is None:
        return  # lzo/lz4/zstd: no stdlib decompressor; the header and offsets were checked
    if not isinstance(data, bytes) or len(data) < 16:
        raise _corrupt(path, f"squashfs{where}: the inode table's first block does not decompress")
    inode_type = int.from_bytes(data[:2], "little")
    if not 1 <= inode_type <= 14:
        raise _corrupt(path, f"squashfs{where}: the first inode has type {inode_type} (valid: 1..14)")


def _decompress(name: str, block: bytes) -> bytes | bool | None:
    """Decompressed block; False when it fails; None when no stdlib decompressor exists for `name`."""
    import lzma
    import zlib

    try:
        if name == "gzip":
            return zlib.decompress(block)
        if name == "xz":
            return lzma.decompress(block, format=lzma.FORMAT_XZ)
        if name == "lzma":
            return lzma.decompress(block, format=lzma.FORMAT_ALONE)
    except (zlib.error, lzma.LZMAError):
        return False
    return None


def list_files(path: Path, offset: int = 0) -> list[str]:
    """`unsquashfs -lln` of the filesystem: one `ls -l`-style line per entry, numeric ids."""
    tool = shutil.which("unsquashfs")
    if not tool:
        raise ToolMissingError("unsquashfs is not on PATH", "install squashfs-tools")
    cmd = [tool, "-lln"]
    if offset:
        cmd += ["-o", str(offset)]
    proc = procs.run([*cmd, "-d", "", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise _corrupt(path, f"unsquashfs cannot read the filesystem: {proc.stderr.strip()[-300:]}")
    return [line for line in proc.stdout.splitlines() if line.strip()]


def enroot_labels(path: Path) -> dict[str, str]:
    """enroot keeps the image labels as `# KEY VALUE` comments at the top of /etc/rc."""
    tool = shutil.which("unsquashfs")
    if not tool:
        raise ToolMissingError("unsquashfs is not on PATH", "install squashfs-tools")
    proc = procs.run([tool, "-cat", str(path), "etc/rc"], capture_output=True, check=False)
    labels: dict[str, str] = {}
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace")
        if "FATAL ERROR" in err or "failed to read" in err:  # the inode or directory table is damaged
            raise _corrupt(path, f"unsquashfs cannot read the filesystem: {err.strip().splitlines()[-1][:200]}")
        return labels  # not an enroot-style image: no /etc/rc
    for line in proc.stdout.decode(errors="replace").splitlines():
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(" ")
        labels[key] = value
    return labels


def inspect_artifact(path: Path, with_listing: bool = False) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise OutputPathError(f"{path} is not a file", "pass the path of a .sqsh or .sif file")
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(64)
    report: dict[str, Any] = {"path": str(path), "size": size}
    offset = 0
    if sifmod.is_sif(head):
        s = sifmod.read_sif(path)
        part = s.primary_partition()
        if part is None:
            raise _corrupt(path, "no primary system partition")
        sb = _check_squashfs(path, part.offset, part.size)
        labels: dict[str, Any] = {}
        deffile = ""
        for d in s.used():
            if d.datatype == sifmod.DATA_LABELS:
                try:
                    labels = json.loads(s.read_object(d) or b"{}")
                except ValueError as exc:
                    raise _corrupt(path, f"labels object {d.id} is not JSON: {exc}") from exc
            elif d.datatype == sifmod.DATA_DEFFILE:
                deffile = s.read_object(d).decode(errors="replace")
        report.update(
            {
                "format": "sif",
                "header": s.header_dict(),
                "descriptors": [d.to_dict() for d in s.used()],
                "primary_partition": part.to_dict(),
                "labels": labels,
                "deffile": deffile,
                "squashfs": sb.to_dict(),
            }
        )
        offset = part.offset
    elif head[:4] == b"hsqs":
        sb = _check_squashfs(path, 0, size)
        report.update({"format": "sqsh", "squashfs": sb.to_dict(), "labels": enroot_labels(path)})
    elif len(head) < 4:
        raise _corrupt(path, f"truncated: {size} bytes, too short for a squashfs or SIF header")
    else:
        raise _corrupt(path, "neither a SIF file (SIF_MAGIC at byte 32) nor a squashfs image ('hsqs')")
    report["checks"] = "ok"
    if with_listing:
        report["files"] = list_files(path, offset)
    return report
