"""Download a file a lock names, once, into a content-addressed cache, checking its sha256.

Files are streamed to disk (a CUDA torch wheel is ~900 MB) and land under
`<cache>/files/<sha256>/<filename>` only once their hash matches, so a cache entry is always
whole and right. Network failures become NetworkError, a wrong hash HashMismatchError.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from envbuilder.errors import HashMismatchError, NetworkError, os_error
from envbuilder.lock.record import sha256_file
from envbuilder.lock.uvlock import LockedFile
from envbuilder.tls import ssl_context


def cache_root(override: Path | None = None) -> Path:
    """ENVBUILDER_CACHE_DIR, else $XDG_CACHE_HOME/envbuilder, else ~/.cache/envbuilder; created here, so a
    cache that cannot be (under /proc, read-only, full) is a typed error naming where it came from."""
    if override is not None:
        root, origin = Path(override).absolute(), "--cache-dir"
    elif os.environ.get("ENVBUILDER_CACHE_DIR"):
        root, origin = Path(os.environ["ENVBUILDER_CACHE_DIR"]).absolute(), "ENVBUILDER_CACHE_DIR"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root, origin = (Path(base) / "envbuilder").absolute(), "XDG_CACHE_HOME"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise os_error(exc, root, action=f"create the cache directory ({origin})", flag=origin) from exc
    return root



def cached_path(f: LockedFile, cache: Path) -> Path:
    return cache / "files" / f.sha256 / f.filename


def fetch(f: LockedFile, cache: Path, ca_bundle: Path | None = None) -> tuple[Path, bool]:
    """(path in the cache, whether it was downloaded now)."""
    target = cached_path(f, cache)
    if target.is_file() and (f.size is None or target.stat().st_size == f.size):
        return target, False
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{f.filename}.", suffix=".part", dir=target.parent)
    except OSError as exc:
        raise os_error(exc, target.parent, action="write in the cache", flag="--cache-dir") from exc
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb", buffering=0) as out:  # unbuffered: a full disk fails the write, here
            req = urllib.request.Request(f.url, headers={"User-Agent": "envbuilder"})
            with urllib.request.urlopen(req, timeout=120, context=ssl_context(ca_bundle)) as resp:
                while chunk := resp.read(1 << 20):
                    h.update(chunk)
                    try:  # a full or read-only cache is the disk's fault, not the network's
                        out.write(chunk)
                    except OSError as exc:
                        raise os_error(exc, target.parent, action="write in the cache", flag="--cache-dir") from exc
        if h.hexdigest() != f.sha256:
            raise HashMismatchError(f"{f.filename}: downloaded sha256 {h.hexdigest()[:16]}… is not the lock's "
                                    f"{f.sha256[:16]}…", "the index served other bytes: re-lock, or check the proxy",
                                    url=f.url)
        try:
            os.replace(tmp, target)
        except OSError as exc:
            raise os_error(exc, target.parent, action="write in the cache", flag="--cache-dir") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise NetworkError(f"cannot download {f.filename}: {exc}", "check network access and proxy settings",
                           url=f.url) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        for d in (target.parent, target.parent.parent):  # only when still empty: a failed download leaves
            with contextlib.suppress(OSError):                # no trace in the cache
                d.rmdir()
    return target, True


def verify(path: Path, sha256: str, what: str) -> None:
    digest = sha256_file(path)
    if digest != sha256:
        raise HashMismatchError(f"{what}: sha256 {digest[:16]}… is not the recorded {sha256[:16]}…",
                                "the file was changed or damaged: fetch it again")
