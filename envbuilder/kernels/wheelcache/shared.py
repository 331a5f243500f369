"""Reading from and publishing to a shared wheel cache, for one `wheels` run (and every command that runs one).

Reading (`SharedCache.fetch`): the entry stored under the key -> its signature and binding checked
(entry.open_entry) -> the wheel streamed into the run's work directory with its size and sha256
checked -> handed back to the pipeline, which re-checks the archs of its fat binaries exactly as
after a build (kernels/pipeline.py) and only then files it in the local cache. Nothing reaches the
local cache, a wheelhouse or a venv before every check passed.

A cache that cannot be reached is given up for the rest of the run with one warning, and every
package it would have served is built instead. Refused entries (unsigned, bad signature, tampered,
wrong archs) and refused credentials are errors: they stop the run.

Publishing (`publish`): every wheel of a finished run, from the local cache, sealed (signed with the
ed25519 key of `envbuilder keygen`) and stored through the transport; an entry already there with
the same bytes is left alone (ed25519 signatures are deterministic, so a republish is a no-op).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.errors import WheelCacheUnreachableError
from envbuilder.kernels.wheelcache.entry import SharedEntry, Trust, open_entry, seal_entry
from envbuilder.kernels.wheelcache.transport import Transport, WheelRef, open_transport, require_writable
from envbuilder.kernels.wheelcache.url import CacheUrl

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CacheSource:
    """`--cache URL` with its trust: what the CLI parses once for every command that reads a shared cache."""

    url: CacheUrl
    trusted_keys: tuple[Path, ...] = ()
    trust_unsigned: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url.text, "trusted_keys": [str(p) for p in self.trusted_keys],
                "trust_unsigned": self.trust_unsigned}


@dataclass(frozen=True)
class PublishTarget:
    """`--publish URL` with its signing key (--sign KEY, else $ENVBUILDER_SIGNING_KEY), or --no-sign."""

    url: CacheUrl
    sign_key: Path | None = None
    unsigned: bool = False


class SharedCache:
    """One shared cache, read by the packages of one run (thread-safe: packages may build in parallel)."""

    def __init__(self, source: CacheSource, ca_bundle: Path | None, progress: Progress,
                 transport: Transport | None = None) -> None:
        self.source = source
        self.trust = Trust.load(source.trusted_keys, source.trust_unsigned)
        self.transport = transport or open_transport(source.url, ca_bundle)
        self.progress = progress
        self.gave_up: str | None = None
        self._lock = threading.Lock()

    def fetch(self, key: str, package: str, work: Path) -> tuple[SharedEntry, Path] | None:
        """(the accepted entry, its wheel downloaded into `work`), or None: a miss, or the cache is down."""
        if self.gave_up is not None:
            return None
        where = f"{self.source.url}:{key[:16]}…"
        try:
            data = self.transport.entry(key)
            if data is None:
                return None
            entry = open_entry(data, key, self.trust, where)
            ref = WheelRef(entry.cached.wheel, entry.cached.sha256, entry.size)
            self.progress(f"  {package}: downloading {ref.filename} ({ref.size / 1e6:.1f} MB) from {self.source.url}")
            work.mkdir(parents=True, exist_ok=True)
            dest = work / ref.filename
            if not self.transport.fetch(ref, dest):
                self.progress(f"  {package}: {where} names {ref.filename}, which the cache does not hold: building")
                return None
        except WheelCacheUnreachableError as exc:
            self._give_up(exc)
            return None
        return entry, dest

    def _give_up(self, exc: WheelCacheUnreachableError) -> None:
        with self._lock:
            if self.gave_up is None:
                self.gave_up = exc.cause
                self.progress(f"warning: the shared wheel cache is unreachable: {exc.cause}; building instead "
                              f"({exc.fix})")


@dataclass(frozen=True)
class Published:
    package: str
    wheel: str
    key: str
    status: str                 # published | present

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "wheel": self.wheel, "cache_key": self.key, "status": self.status}


def load_signing_key(target: PublishTarget) -> Any | None:
    """The private key entries are signed with; None for --no-sign. Loaded before any work, so a missing
    key fails the run at once rather than after an hour of compiling."""
    if target.unsigned:
        return None
    from envbuilder.dsse import load_private_key

    return load_private_key(target.sign_key)


def publish(target: PublishTarget, signing_key: Any | None, wheels: list[tuple[Any, Path]], ca_bundle: Path | None,
            progress: Progress, transport: Transport | None = None) -> list[Published]:
    """Store each (CachedWheel, wheel path) in the target cache; entries already there unchanged are skipped."""
    transport = transport or open_transport(target.url, ca_bundle)
    require_writable(transport)
    out = []
    for cached, wheel in wheels:
        size = wheel.stat().st_size
        envelope = seal_entry(cached, size, signing_key)
        try:
            there = transport.entry(cached.key)
        except WheelCacheUnreachableError:
            there = None  # a directory not made yet; a registry that is down fails the upload below
        if there == envelope:
            progress(f"  {cached.facts.package}: {cached.wheel} is already in {target.url}")
            out.append(Published(cached.facts.package, cached.wheel, cached.key, "present"))
            continue
        progress(f"  {cached.facts.package}: publishing {cached.wheel} ({size / 1e6:.1f} MB) to {target.url}")
        transport.publish(cached.key, envelope, wheel, WheelRef(cached.wheel, cached.sha256, size))
        out.append(Published(cached.facts.package, cached.wheel, cached.key, "published"))
    return out
