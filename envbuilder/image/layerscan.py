"""Scan an image's layers (from `docker save`) for secret values: nothing may be found.

Every regular file of every layer tar is read, plus the image config (ENV, labels, history).
Needles are byte strings; CA bundles contribute the certificates that are not public roots
(a public root legitimately sits in certifi's or Debian's bundle inside the image).
"""

from __future__ import annotations

import base64
import hashlib
import re
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.*?)\s+-----END CERTIFICATE-----", re.S)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Finding:
    layer: str
    path: str
    needle: str


def pem_bodies(data: bytes) -> list[bytes]:
    """Base64 bodies (whitespace removed) of every certificate in a PEM bundle."""
    return [re.sub(rb"\s+", b"", m.group(1)) for m in _PEM.finditer(data)]


def public_roots() -> set[bytes]:
    """Bodies of well-known public roots: certifi's bundle and Debian's Mozilla set."""
    roots: set[bytes] = set()
    try:
        import certifi

        roots.update(pem_bodies(Path(certifi.where()).read_bytes()))
    except (ImportError, OSError):
        pass
    mozilla = Path("/usr/share/ca-certificates/mozilla")
    if mozilla.is_dir():
        for f in mozilla.glob("*.crt"):
            roots.update(pem_bodies(f.read_bytes()))
    return roots


def ca_needles(bundle: bytes, public: set[bytes] | None = None) -> dict[str, bytes]:
    """Needles for the bundle's private certificates: a 64-char line of the PEM body and a DER slice."""
    public = public_roots() if public is None else public
    out: dict[str, bytes] = {}
    for i, body in enumerate(pem_bodies(bundle)):
        if body in public or len(body) < 200:
            continue
        out[f"ca-cert-{i}-pem"] = body[64:128]
        der = base64.b64decode(body)
        out[f"ca-cert-{i}-der"] = der[len(der) // 2: len(der) // 2 + 48]
    return out


def _scan_stream(fh: IO[bytes], needles: dict[str, bytes]) -> set[str]:
    keep = max((len(n) for n in needles.values()), default=1) - 1
    found: set[str] = set()
    prev = b""
    while chunk := fh.read(_CHUNK):
        buf = prev + chunk
        for name, needle in needles.items():
            if name not in found and needle in buf:
                found.add(name)
        prev = buf[-keep:] if keep else b""
    return found


class _IterIO:
    """A read()-able view of an iterator of byte chunks (the SDK's save stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it: Iterator[bytes] = iter(chunks)
        self._buf = b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buf) < n:
            try:
                self._buf += next(self._it)
            except StopIteration:
                break
        if n < 0:
            data, self._buf = self._buf, b""
        else:
            data, self._buf = self._buf[:n], self._buf[n:]
        return data


class _HashingReader:
    """Pass reads through while hashing them: a layer tar's sha256 is its diff_id."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        self.sha.update(data)
        return data

    def drain(self) -> str:
        while self.read(_CHUNK):
            pass
        return f"sha256:{self.sha.hexdigest()}"


def scan_saved_image(chunks: Iterable[bytes], needles: dict[str, bytes]) -> tuple[list[Finding], dict[str, int]]:
    """Scan a `docker save` stream: every file of every layer, and the config/manifest files.

    Findings name the layer by its diff_id (sha256 of the layer tar), so a caller can tell
    the base image's layers from the ones the build added. Also returns counts
    {layers, files, bytes} so a caller can show the scan really read the image.
    """
    findings: list[Finding] = []
    stats = {"layers": 0, "files": 0, "bytes": 0}
    with tarfile.open(fileobj=_IterIO(chunks), mode="r|") as outer:  # type: ignore[call-overload]
        _scan_outer(outer, needles, findings, stats)
    return findings, stats


def _scan_outer(outer: tarfile.TarFile, needles: dict[str, bytes], findings: list[Finding],
                stats: dict[str, int]) -> None:
    for member in outer:
        if not member.isfile():
            continue
        fh = outer.extractfile(member)
        if fh is None:
            continue
        if member.name.endswith("layer.tar"):
            stats["layers"] += 1
            reader = _HashingReader(fh)
            hits: list[tuple[str, str]] = []
            with tarfile.open(fileobj=reader, mode="r|") as inner:  # type: ignore[call-overload]
                for f in inner:
                    if not f.isfile():
                        continue
                    data = inner.extractfile(f)
                    if data is None:
                        continue
                    stats["files"] += 1
                    stats["bytes"] += f.size
                    hits.extend((f.name, name) for name in sorted(_scan_stream(data, needles)))
            diff_id = reader.drain()
            findings.extend(Finding(diff_id, path, name) for path, name in hits)
        else:  # config JSON, manifest: ENV, labels and history live here
            for name in sorted(_scan_stream(fh, needles)):
                findings.append(Finding("(config)", member.name, name))

