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
import subprocess
from pathlib import Path
from typing import Any

from envbuilder.errors import ArtifactCorruptError, OutputPathError, ToolMissingError
from envbuilder.export import sif as sifmod
from envbuilder.export.squashfs import SUPERBLOCK, Superblock, parse_superblock


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
    return sb


def list_files(path: Path, offset: int = 0) -> list[str]:
    """`unsquashfs -lln` of the filesystem: one `ls -l`-style line per entry, numeric ids."""
    tool = shutil.which("unsquashfs")
    if not tool:
        raise ToolMissingError("unsquashfs is not on PATH", "install squashfs-tools")
    cmd = [tool, "-lln"]
    if offset:
        cmd += ["-o", str(offset)]
    proc = subprocess.run([*cmd, "-d", "", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise _corrupt(path, f"unsquashfs cannot read the filesystem: {proc.stderr.strip()[-300:]}")
    return [line for line in proc.stdout.splitlines() if line.strip()]


def enroot_labels(path: Path) -> dict[str, str]:
    """enroot keeps the image labels as `# KEY VALUE` comments at the top of /etc/rc."""
    tool = shutil.which("unsquashfs")
    if not tool:
        raise ToolMissingError("unsquashfs is not on PATH", "install squashfs-tools")
    proc = subprocess.run([tool, "-cat", str(path), "etc/rc"], capture_output=True, check=False)
    labels: dict[str, str] = {}
    if proc.returncode != 0:
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
