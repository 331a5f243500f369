"""Where the shared wheel cache lives, one object per transport, behind one protocol.

Modelled on export/formats.py: the reader and the publisher (wheelcache/shared.py) are written
once against `Transport`; each transport only moves bytes. An entry is two things: the signed
envelope (stored under the cache key) and the wheel (stored by its sha256). Publishing stores the
wheel first and the envelope last, so a reader never sees an entry whose wheel is not whole, an
interrupted upload leaves no entry, and two publishers of one key each leave a whole entry (the
last one wins).

    DirectoryTransport   file:// or a path: a directory on this host or a shared filesystem
    HttpIndexTransport   http(s)://: the same layout served by any static HTTP server; read-only
    OciTransport         oci://: a registry, each entry an OCI artifact tagged with its key (oci.py)

The directory layout (`Layout`) is also a PEP 503 "simple" index (pages under simple/, written by
pep503.py), so pip and uv install from it directly: `uv pip install --index-url URL/simple/ ...`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ClassVar, Protocol

from envbuilder.errors import (
    HashMismatchError,
    WheelCachePublishError,
    WheelCacheUnreachableError,
)
from envbuilder.kernels.wheelcache.entry import MAX_ENTRY_BYTES
from envbuilder.kernels.wheelcache.http import HttpClient, Response
from envbuilder.kernels.wheelcache.url import CacheUrl

_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class WheelRef:
    """A wheel as an entry names it: file name (a plain name), sha256 and size."""

    filename: str
    sha256: str
    size: int


class Transport(Protocol):
    @property
    def url(self) -> CacheUrl:
        """The cache this transport reads (and writes)."""

    @property
    def writable(self) -> bool:
        """Whether `publish` works here (an HTTP index is read-only: publish to the directory it serves)."""

    def entry(self, key: str) -> bytes | None:
        """The envelope stored under `key`, or None (a miss). Unreachable: WheelCacheUnreachableError."""

    def fetch(self, ref: WheelRef, dest: Path) -> bool:
        """Stream the wheel into the new file `dest`; False when the cache does not hold it.
        More bytes than `ref.size`, or other bytes than `ref.sha256`: HashMismatchError."""

    def publish(self, key: str, envelope: bytes, wheel: Path, ref: WheelRef) -> None:
        """Store the wheel, then the envelope under `key` (last: it makes the entry visible)."""


class Layout:
    """Paths of the directory layout, relative to its root (also the HTTP index's URLs)."""

    MARKER: ClassVar[str] = "envbuilder-wheel-cache.json"
    ENTRIES: ClassVar[str] = "entries"
    FILES: ClassVar[str] = "files"
    SIMPLE: ClassVar[str] = "simple"

    @staticmethod
    def entry(key: str) -> str:
        if not _HEX64.fullmatch(key):
            raise ValueError(f"{key!r} is not a cache key")
        return f"entries/{key}.dsse.json"

    @staticmethod
    def wheel(ref: WheelRef) -> str:
        return f"files/{ref.sha256}/{ref.filename}"


def receive(src: IO[bytes], dest: Path, ref: WheelRef, where: str) -> None:
    """Copy `src` into the new file `dest`, hashing as it goes; refuse more bytes than the entry names, or
    other bytes (the file is removed)."""
    h = hashlib.sha256()
    size = 0
    try:
        with open(dest, "xb") as out:
            while chunk := src.read(1 << 20):
                size += len(chunk)
                if size > ref.size:
                    raise HashMismatchError(
                        f"{where} served more than the {ref.size} bytes its signed entry names for {ref.filename}",
                        "the cache's copy was changed: republish it (envbuilder wheels --publish), or use another "
                        "--cache")
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != ref.sha256:
            raise HashMismatchError(
                f"{where} served {ref.filename} with sha256 {h.hexdigest()[:16]}…, not the {ref.sha256[:16]}… its "
                f"signed entry names ({size} bytes)",
                "the cache's copy was changed or damaged: republish it (envbuilder wheels --publish), or use "
                "another --cache; nothing was installed from it")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            dest.unlink()
        raise


@dataclass(frozen=True)
class DirectoryTransport:
    """A directory: on this host, or a shared filesystem every host mounts (NFS, Lustre, GPFS)."""

    url: CacheUrl
    writable: ClassVar[bool] = True
    #: a publisher's temp files older than this are a killed publish's, removed by the next publish
    STALE_SECONDS: ClassVar[float] = 24 * 3600

    @property
    def root(self) -> Path:
        assert self.url.path is not None
        return self.url.path

    def entry(self, key: str) -> bytes | None:
        from envbuilder.jsonread import read_bytes

        if not self.root.is_dir():
            raise WheelCacheUnreachableError(f"the wheel cache {self.root} is not a directory here",
                                             "mount the shared filesystem, or fix --cache")
        path = self.root / Layout.entry(key)
        if not path.exists():
            return None
        try:
            return read_bytes(path, what="wheel-cache entry", max_bytes=MAX_ENTRY_BYTES)
        except OSError as exc:
            raise WheelCacheUnreachableError(f"cannot read {path}: {exc.strerror}", "check its permissions") from exc

    def fetch(self, ref: WheelRef, dest: Path) -> bool:
        path = self.root / Layout.wheel(ref)
        try:
            src = open(path, "rb")  # noqa: SIM115 (closed below; a missing file is a miss)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise WheelCacheUnreachableError(f"cannot read {path}: {exc.strerror}", "check its permissions") from exc
        with src:
            receive(src, dest, ref, f"the wheel cache {self.root}")
        return True

    def publish(self, key: str, envelope: bytes, wheel: Path, ref: WheelRef) -> None:
        from envbuilder.atomic import write_atomic
        from envbuilder.kernels.wheelcache import pep503

        self._claim()
        target = self.root / Layout.wheel(ref)
        if not _holds(target, ref):
            target.parent.mkdir(parents=True, exist_ok=True)
            self._sweep(target.parent)
            _copy_atomic(wheel, target)
        entries = self.root / Layout.ENTRIES
        entries.mkdir(exist_ok=True)
        self._sweep(entries)
        write_atomic(self.root / Layout.entry(key), envelope, mode=0o644)
        pep503.write_pages(self.root)

    def _claim(self) -> None:
        """Make the root a wheel cache, or refuse a directory that holds something else. Under the root's lock:
        publishers that start at once on a new directory each see the others' entries as the cache's own."""
        import json

        from envbuilder.atomic import write_atomic
        from envbuilder.kernels.wheelcache.pep503 import locked

        marker = self.root / Layout.MARKER
        if marker.is_file():
            return
        self._refuse_foreign()
        self.root.mkdir(parents=True, exist_ok=True)
        with locked(self.root):
            if marker.is_file():
                return
            self._refuse_foreign()
            write_atomic(marker, json.dumps({"schema": 1, "layout": "envbuilder wheel cache: entries/<key>.dsse.json, "
                                             "files/<sha256>/<wheel>, simple/ (PEP 503)"}, indent=2) + "\n",
                         mode=0o644)

    def _refuse_foreign(self) -> None:
        from envbuilder.kernels.wheelcache.pep503 import LOCK_NAME

        ours = {Layout.MARKER, Layout.ENTRIES, Layout.FILES, Layout.SIMPLE, LOCK_NAME}
        if not self.root.is_dir():
            return
        foreign = sorted(p.name for p in self.root.iterdir()
                         if p.name not in ours and not p.name.startswith(f".{Layout.MARKER}."))
        if foreign:
            raise WheelCachePublishError(f"{self.root} is not an envbuilder wheel cache (no {Layout.MARKER}) and holds "
                                         f"{', '.join(foreign[:3])}: publishing would mix entries into it",
                                         "publish to a new or empty directory, or to the cache's own root")

    def _sweep(self, d: Path) -> None:
        now = time.time()
        for p in d.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > self.STALE_SECONDS:
                    p.unlink()


def _holds(path: Path, ref: WheelRef) -> bool:
    from envbuilder.canonical import sha256_file

    try:
        return path.stat().st_size == ref.size and sha256_file(path) == ref.sha256
    except OSError:
        return False


def _copy_atomic(src: Path, dest: Path) -> None:
    """Copy into a temp file beside `dest`, fsync, rename: a killed copy leaves a hidden .tmp, never `dest`."""
    import shutil

    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@dataclass
class HttpIndexTransport:
    """A published directory served over HTTP(S) by any static server; read-only."""

    url: CacheUrl
    ca_bundle: Path | None = None
    writable: ClassVar[bool] = False

    def __post_init__(self) -> None:
        import urllib.parse

        assert self.url.base is not None
        parts = urllib.parse.urlsplit(self.url.base)
        self.client = HttpClient(f"{parts.scheme}://{parts.netloc}", self.ca_bundle, "the wheel index")
        self.path = parts.path

    def _get(self, rel: str) -> Response:
        resp = self.client.request("GET", self.path + rel)
        if resp.status == 401 and self.client.authorization is None:
            resp.body.close()
            self.client.answer_challenge(resp, "")
            resp = self.client.request("GET", self.path + rel)
        if resp.status in (401, 403):
            resp.body.close()
            raise self.client.refused(resp.status)
        return resp

    def entry(self, key: str) -> bytes | None:
        resp = self._get(Layout.entry(key))
        with resp.body:
            if resp.status == 404:
                return None
            if resp.status != 200:
                raise WheelCacheUnreachableError(f"the wheel index at {self.url} answered HTTP {resp.status} for an "
                                                 "entry", "check that the URL is the published directory's root")
            return resp.read(MAX_ENTRY_BYTES)

    def fetch(self, ref: WheelRef, dest: Path) -> bool:
        resp = self._get(Layout.wheel(ref))
        with resp.body:
            if resp.status == 404:
                return False
            if resp.status != 200:
                raise WheelCacheUnreachableError(f"the wheel index at {self.url} answered HTTP {resp.status} for "
                                                 f"{ref.filename}", "check the server")
            receive(resp.body, dest, ref, f"the wheel index at {self.url}")
        return True

    def publish(self, key: str, envelope: bytes, wheel: Path, ref: WheelRef) -> None:
        require_writable(self)


def require_writable(transport: Transport) -> None:
    """--publish names a cache that takes uploads (an HTTP index does not: its directory does)."""
    if not transport.writable:
        raise WheelCachePublishError(f"--publish {transport.url}: an HTTP index is read-only",
                                     "publish to the directory the server serves (--publish file:///DIR or DIR); "
                                     "every publish there rewrites the PEP 503 pages too")


def open_transport(url: CacheUrl, ca_bundle: Path | None = None) -> Transport:
    """The transport object for `url`."""
    if url.kind == "directory":
        return DirectoryTransport(url)
    if url.kind == "http":
        return HttpIndexTransport(url, ca_bundle)
    from envbuilder.kernels.wheelcache.oci import OciTransport

    return OciTransport(url, ca_bundle)
