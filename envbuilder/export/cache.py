"""Content-addressed export cache: an artifact is filed under a key made of everything its
bytes depend on, so re-exporting an unchanged image is a hard link (plus the sha256 that the
export reports anyway), and a cluster that points ENVBUILDER_EXPORT_CACHE at shared storage
reuses one node's artifacts on every other by digest.

The key covers: the image ID (the sha256 of its config, which names every layer's diff ID),
the format, the exact mksquashfs options, the provenance written into the artifact (source
date, lock sha256, row), the image reference (SIF only: its definition file names it), the
mksquashfs version, and a digest of the export code itself. An entry is trusted only when its
sha256 still matches the one recorded when it was stored; otherwise it is dropped and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder import __version__, procs
from envbuilder.atomic import write_atomic
from envbuilder.canonical import sha256_file
from envbuilder.export.formats import get_format
from envbuilder.paths import cache_dir

CACHE_VERSION = 1
_CODE = Path(__file__).resolve().parent


def default_root() -> Path:
    explicit = os.environ.get("ENVBUILDER_EXPORT_CACHE")
    return Path(explicit) if explicit else cache_dir() / "exports"


def default_max_bytes() -> int:
    """Size bound of the cache (ENVBUILDER_EXPORT_CACHE_MAX_GB, default 20 GB): least recently used
    entries go first. An entry whose artifact is still hard-linked to an output costs no extra space,
    but it counts, so the bound is conservative."""
    raw = os.environ.get("ENVBUILDER_EXPORT_CACHE_MAX_GB", "20")
    try:
        return int(float(raw) * 1e9)
    except ValueError:
        return int(20e9)


def code_digest() -> str:
    """sha256 over the export package's sources: a change in how artifacts are made is a new key."""
    h = hashlib.sha256()
    for path in sorted(_CODE.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def mksquashfs_version(binary: str) -> str:
    out = procs.run([binary, "-version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0].strip() if (out.stdout or out.stderr) else "unknown"


def export_key(*, image_id: str, fmt: str, squash_args: list[str], source_date_epoch: int, lock_sha256: str,
               row: str, image_ref: str, mksquashfs: str, feed: str = "tar") -> str:
    # feed: mksquashfs lays out a mounted directory and a tar stream differently (other bytes)
    material = {
        "cache_version": CACHE_VERSION, "envbuilder": __version__, "code": code_digest(),
        "image_id": image_id, "format": fmt, "squash_args": squash_args, "mksquashfs": mksquashfs, "feed": feed,
        "source_date_epoch": source_date_epoch, "lock_sha256": lock_sha256, "row": row,
        "image_ref": image_ref if get_format(fmt).carries_deffile else "",  # the definition file names it
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    artifact: Path
    meta: Path

    def read_meta(self) -> dict[str, Any]:
        data = json.loads(self.meta.read_text())
        if not isinstance(data, dict):
            raise ValueError("cache metadata is not an object")
        return data


class ExportCache:
    def __init__(self, root: Path | None = None, max_bytes: int | None = None) -> None:
        self.root = Path(root) if root else default_root()
        self.max_bytes = default_max_bytes() if max_bytes is None else max_bytes

    def entry(self, key: str, fmt: str) -> CacheEntry:
        d = self.root / key[:2]
        return CacheEntry(d / f"{key}.{fmt}", d / f"{key}.json")

    def fetch(self, key: str, fmt: str, dest_tmp: Path) -> dict[str, Any] | None:
        """Materialize the cached artifact at dest_tmp (a temp name beside the output).

        Returns the stored metadata with the verified sha256, or None on a miss. A corrupt or
        tampered entry is removed (never served).
        """
        e = self.entry(key, fmt)
        try:
            meta = e.read_meta()
            if e.artifact.stat().st_size != meta.get("size"):
                raise ValueError("size differs")
        except (OSError, ValueError):
            return None
        _link_or_copy(e.artifact, dest_tmp)
        digest = sha256_file(dest_tmp)
        if digest != meta.get("sha256"):
            with contextlib.suppress(OSError):
                dest_tmp.unlink()
            self.evict(key, fmt)
            return None
        with contextlib.suppress(OSError):
            os.utime(e.meta)  # recently used: evicted last
        return meta

    def store(self, key: str, fmt: str, artifact: Path, meta: dict[str, Any]) -> Path | None:
        """File `artifact` under `key`; None when the cache cannot be written (never fails an export)."""
        e = self.entry(key, fmt)
        try:
            e.artifact.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=e.artifact.parent)
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                tmp.unlink()
                _link_or_copy(artifact, tmp)
                os.replace(tmp, e.artifact)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
            write_atomic(e.meta, json.dumps(meta, indent=2, sort_keys=True) + "\n")
        except OSError:
            return None
        self.prune(keep=e.artifact)
        return e.artifact

    def prune(self, keep: Path | None = None) -> list[Path]:
        """Drop least recently used entries until the cache fits max_bytes; returns what was dropped."""
        entries = []
        for meta in self.root.glob("*/*.json"):
            for art in meta.parent.glob(meta.stem + ".*"):
                if art.suffix != ".json" and not art.name.endswith(".tmp"):
                    with contextlib.suppress(OSError):
                        entries.append((meta.stat().st_mtime, art.stat().st_size, art, meta))
        total = sum(size for _, size, _, _ in entries)
        dropped = []
        for _, size, art, meta in sorted(entries, key=lambda x: x[0]):
            if total <= self.max_bytes:
                break
            if art == keep:
                continue
            for p in (meta, art):
                with contextlib.suppress(OSError):
                    p.unlink()
            total -= size
            dropped.append(art)
        return dropped

    def evict(self, key: str, fmt: str) -> None:
        e = self.entry(key, fmt)
        for p in (e.meta, e.artifact):
            with contextlib.suppress(OSError):
                p.unlink()


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link when src and dst share a filesystem (instant), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
