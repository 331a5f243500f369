"""Atomic file and directory replacement: a failed run never leaves a half-written output."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def write_atomic(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    """Write to a temp file in the same directory, fsync, then rename over `path`."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def staging_dir(target: Path) -> Iterator[Path]:
    """A temp directory beside `target` (same filesystem, so the final rename is atomic).

    Removed on exit unless it was promoted with `promote_dir`.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging.", dir=target.parent))
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with renameat2(RENAME_EXCHANGE); False if unsupported."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return bool(rc == 0)


def promote_dir(staging: Path, target: Path) -> None:
    """Replace directory `target` by `staging` so readers see the old or the new, never a mix."""
    staging, target = Path(staging), Path(target)
    if not target.exists():
        os.rename(staging, target)
        return
    if _renameat2_exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # staging now holds the old contents
        return
    # Fallback (filesystems without RENAME_EXCHANGE): two renames; the old copy survives
    # under .old until the new one is in place.
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        shutil.rmtree(old)
    os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
