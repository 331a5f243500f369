"""Build a squashfs with the real `mksquashfs`, fed the merged root filesystem as a tar on stdin.

`mksquashfs - OUT -tar` (squashfs-tools >= 4.5.1 as packaged by Debian 12) takes ownership and
modes from the tar headers, so the image's numeric uid/gid land in the filesystem and nothing of
the host's does; `-all-time`/`-mkfs-time` pin every timestamp and `-reproducible` (the default,
stated anyway) makes the output independent of thread scheduling.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from envbuilder import procs
from envbuilder.errors import DiskFullError, InvalidOptionError, SquashfsToolError, ToolMissingError
from envbuilder.safetext import printable

# enroot's default ENROOT_SQUASH_OPTIONS (NVIDIA/enroot conf/enroot.conf.in), minus -exit-on-error
# which we always add. Kept for --squash-options users who want enroot's exact bytes-on-disk layout.
ENROOT_SQUASH_OPTIONS = "-comp lzo -noD"
# Apptainer's SIF default: gzip, all other mksquashfs defaults.
SIF_SQUASH_OPTIONS = "-comp gzip"

# --compression NAME -> mksquashfs options. Compressed images usually start *faster*, not slower:
# reading the image from shared or local storage is the bottleneck, not decompression. DFKI's
# pyxis/enroot cluster measured container start from lz4/zstd images at or below uncompressed
# ones at a third to a half of the size (https://pegasus.dfki.de/posts/squashfs-compression) and
# moved every user to 1 MiB blocks + zstd (https://pegasus.dfki.de/posts/image-compression-epilog);
# the pyxis wiki's Setup page recommends ENROOT_SQUASH_OPTIONS "-comp zstd -Xcompression-level 3
# -b 1M" (https://github.com/NVIDIA/pyxis/wiki/Setup). zstd needs kernel >= 4.14 / a squashfuse
# built with zstd; lzo and gzip mount everywhere.
COMPRESSIONS: dict[str, str] = {
    "zstd": "-comp zstd -Xcompression-level 3 -b 1M",
    "lz4": "-comp lz4 -b 1M",
    "lzo": "-comp lzo",
    "gzip": "-comp gzip",
    "none": "-noI -noId -noD -noF -noX",
}
# sqsh: the pyxis guidance above. sif: gzip, Apptainer's own default (every Apptainer and
# Singularity version mounts it).
DEFAULT_COMPRESSION = {"sqsh": "zstd", "sif": "gzip"}


def compression_options(fmt: str, compression: str | None) -> str:
    name = compression or DEFAULT_COMPRESSION[fmt]
    if name not in COMPRESSIONS:
        raise InvalidOptionError(f"unknown compression {name!r}", f"use one of: {', '.join(COMPRESSIONS)}")
    return COMPRESSIONS[name]


def default_processors() -> int:
    """All cores this process may use (the cgroup/affinity view, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)

SQUASHFS_MAGIC = b"hsqs"
SUPERBLOCK = struct.Struct("<4sIIIIHHHHHHQQQQQQQQ")  # 96 bytes, squashfs 4.0
COMPRESSORS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}

# --squash-options takes only compression and tuning options (an allow-list: mksquashfs also takes
# pseudo-file definitions (-p/-pf, which can run host commands), actions, sort and exclude files,
# appends and offsets, all of which would change what the artifact holds or where it comes from).
_SIZE = r"\d+[KkMm]?"
_FLAGS = frozenset({
    "-noI", "-noId", "-noD", "-noF", "-noX", "-noInodeCompression", "-noIdTableCompression",
    "-noDataCompression", "-noFragmentCompression", "-noXattrCompression", "-no-fragments",
    "-always-use-fragments", "-no-duplicates", "-no-sparse", "-tailends", "-no-tailends", "-no-exports",
    "-exports", "-nopad", "-Xhc", "-reproducible",
})
#: option -> the pattern its one value must match
_VALUED = {
    "-comp": r"gzip|lzo|lz4|xz|zstd|lzma",
    "-b": _SIZE,
    "-Xcompression-level": r"\d{1,2}",
    "-Xwindow-size": r"\d{1,2}",
    "-Xstrategy": r"[a-z_]+(,[a-z_]+)*",
    "-Xalgorithm": r"lzo1x_\d{1,3}|lzo1x_999",
    "-Xbcj": r"[a-z0-9]+(,[a-z0-9]+)*",
    "-Xdict-size": r"\d+[KkMm%]?",
    "-processors": r"\d{1,4}",
    "-mem": r"\d+[KkMmGg]?",
    "-throttle": r"\d{1,2}",
    "-limit": r"\d{1,3}",
}
ALLOWED_SQUASH_OPTIONS = tuple(sorted(_FLAGS | set(_VALUED)))


@dataclass(frozen=True)
class Superblock:
    inodes: int
    mkfs_time: int
    block_size: int
    fragments: int
    compression: str
    flags: int
    ids: int
    version: str
    bytes_used: int

    def to_dict(self) -> dict[str, object]:
        return {
            "inodes": self.inodes,
            "mkfs_time": self.mkfs_time,
            "block_size": self.block_size,
            "fragments": self.fragments,
            "compression": self.compression,
            "flags": self.flags,
            "ids": self.ids,
            "version": self.version,
            "bytes_used": self.bytes_used,
        }


def parse_superblock(raw: bytes) -> Superblock | None:
    """None when `raw` does not start with a squashfs 4 superblock."""
    if len(raw) < SUPERBLOCK.size or raw[:4] != SQUASHFS_MAGIC:
        return None
    f = SUPERBLOCK.unpack(raw[: SUPERBLOCK.size])
    (_, inodes, mkfs_time, block_size, fragments, comp, _block_log, flags, ids, major, minor) = f[:11]
    bytes_used = f[12]
    return Superblock(
        inodes=inodes,
        mkfs_time=mkfs_time,
        block_size=block_size,
        fragments=fragments,
        compression=COMPRESSORS.get(comp, f"unknown({comp})"),
        flags=flags,
        ids=ids,
        version=f"{major}.{minor}",
        bytes_used=bytes_used,
    )


def mksquashfs_path() -> str:
    path = shutil.which("mksquashfs")
    if not path:
        raise ToolMissingError(
            "mksquashfs is not on PATH",
            "install squashfs-tools (apt-get install squashfs-tools; scripts/setup-host.sh does it)",
        )
    return path


def parse_squash_options(text: str) -> list[str]:
    """--squash-options: compression and tuning options only (ALLOWED_SQUASH_OPTIONS), each value checked."""
    fix = "pass only compression/tuning options, e.g. --squash-options '-comp zstd -b 1M' (allowed: " + \
        " ".join(ALLOWED_SQUASH_OPTIONS) + ")"
    try:
        args = shlex.split(text)
    except ValueError as exc:  # an unbalanced quote
        raise InvalidOptionError(f"--squash-options {printable(text)!r}: {exc}",
                                 "quote the whole option string once, e.g. --squash-options '-comp zstd -b 1M'"
                                 ) from exc
    i = 0
    while i < len(args):
        opt = args[i]
        if opt in _FLAGS:
            i += 1
            continue
        pattern = _VALUED.get(opt)
        if pattern is None:
            raise InvalidOptionError(f"--squash-options may not contain {printable(opt)!r} (export controls what the "
                                     "artifact holds, its layout and its determinism)", fix)
        if i + 1 >= len(args) or not re.fullmatch(pattern, args[i + 1]):
            value = printable(args[i + 1]) if i + 1 < len(args) else "nothing"
            raise InvalidOptionError(f"--squash-options {opt} takes a value like {pattern!r}, not {value!r}", fix)
        i += 2
    return args


@dataclass(frozen=True)
class SquashSpec:
    mtime: int
    options: list[str]
    processors: int | None = None
    offset: int = 0
    root_mode: int = 0o755
    root_uid: int = 0
    root_gid: int = 0


def mksquashfs_command(out: Path, spec: SquashSpec, source: str = "-") -> list[str]:
    """mksquashfs reading a tar on stdin (source "-") or the directory `source`."""
    feed = ["-tar", "-no-strip"] if source == "-" else []
    cmd = [
        mksquashfs_path(), source, str(out), *feed, "-noappend", "-reproducible",
        "-exit-on-error", "-no-progress", "-quiet", "-no-xattrs",
        "-mkfs-time", str(spec.mtime), "-all-time", str(spec.mtime),
        "-root-mode", f"{spec.root_mode:o}", "-root-uid", str(spec.root_uid), "-root-gid", str(spec.root_gid),
    ]  # fmt: skip
    if spec.processors:
        cmd += ["-processors", str(spec.processors)]
    if spec.offset:
        cmd += ["-o", str(spec.offset)]
    return cmd + spec.options


def _is_disk_full(stderr_text: str) -> bool:
    return "No space left on device" in stderr_text


class FeedRefused(RuntimeError):
    """The directory feed never started mksquashfs (its mount was refused): nothing was written."""


def build_squashfs(out: Path, spec: SquashSpec, write_tar: Callable[[IO[bytes]], object]) -> str:
    """Run mksquashfs writing `out`; `write_tar(stdin)` streams the root filesystem tar into it.

    Returns mksquashfs's stderr. Raises DiskFullError on ENOSPC (or a nearly full output/work filesystem),
    SquashfsToolError on other failures.
    """
    return _run(mksquashfs_command(out, spec), out, write_tar)


def build_squashfs_from_dir(out: Path, spec: SquashSpec, prefix: list[str], cwd: Path, source: str,
                            refused: Callable[[int, str], bool]) -> str:
    """Run `prefix + mksquashfs SOURCE out` in cwd (prefix: what makes SOURCE, e.g. a mount).

    Raises FeedRefused when `refused(returncode, stderr)` says mksquashfs never ran.
    """
    return _run([*prefix, *mksquashfs_command(out, spec, source)], out, None, cwd, refused)


def _run(cmd: list[str], out: Path, write_tar: Callable[[IO[bytes]], object] | None, cwd: Path | None = None,
         refused: Callable[[int, str], bool] | None = None) -> str:
    with tempfile.TemporaryFile() as err:
        # own process group, dies with envbuilder (even on SIGKILL): no orphan mksquashfs writing `out`
        proc = procs.popen(cmd, stdin=subprocess.PIPE if write_tar else subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
        broken: BaseException | None = None
        try:
            if write_tar is not None:
                assert proc.stdin is not None
                write_tar(proc.stdin)
                proc.stdin.close()
        except BrokenPipeError as exc:  # mksquashfs died first: its stderr says why
            broken = exc
        except BaseException:
            procs.kill_group(proc)
            raise
        rc = proc.wait()
        err.seek(0)
        text = err.read().decode(errors="replace")
    if refused is not None and rc != 0 and refused(rc, text):
        raise FeedRefused(text.strip()[-500:])
    if rc != 0 or broken is not None:
        full = [d for d in dict.fromkeys([out.parent, *([cwd] if cwd else [])]) if _nearly_full(d)]
        if _is_disk_full(text) or full:
            where = full[0] if full else out.parent
            raise DiskFullError(
                f"no space left on the filesystem of {where} while mksquashfs wrote the image",
                "free space there or choose another -o path; nothing partial was left",
            )
        said = text.strip()[-2000:] or "no message"
        raise SquashfsToolError(f"mksquashfs exited with {rc}: {said}",
                                "rerun with -v; if it persists, pass --feed tar (or report it with the command above)")
    return text


#: below this, a failed mksquashfs that printed nothing is taken for a full disk (it does not always say so:
#: a full work directory under the mount feed ended with exit 1 and an empty stderr)
NEARLY_FULL_BYTES = 64 * 1024 * 1024


def _nearly_full(path: Path) -> bool:
    try:
        return shutil.disk_usage(path).free < NEARLY_FULL_BYTES
    except OSError:
        return False


def raise_if_enospc(exc: OSError, where: Path) -> None:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        raise DiskFullError(
            f"no space left on the filesystem of {where}",
            "free space there or choose another -o path; nothing partial was left",
        ) from exc


def file_size(path: Path) -> int:
    return os.stat(path).st_size
