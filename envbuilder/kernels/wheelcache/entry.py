"""A shared cache entry: one wheel, signed as an in-toto statement in a DSSE envelope (envbuilder.dsse).

    subject    [{"name": "<wheel file name>", "digest": {"sha256": "<the wheel's sha256>"}}]
    predicate  the local cache's entry (`CachedWheel`: key, the BuildKey facts, archs, patch,
               compile time) and the wheel's size

Every transport stores the envelope under the cache key and the wheel by its sha256. A reader
(`open_entry`) trusts nothing it did not check: the signature by a trusted key (or, with
--trust-unsigned, none at all), the payload type, the statement's shape (envbuilder.jsonread), that
the entry is the one asked for (the predicate's key is the key asked for, and the BuildKey facts
hash to it again), and that the wheel's name is a plain wheel file name of that package.
The wheel's bytes and archs are checked once downloaded (wheelcache/shared.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from envbuilder.dsse import IN_TOTO_PAYLOAD_TYPE, STATEMENT_TYPE, Envelope, canonical_json, keyid_of
from envbuilder.errors import (
    EnvbuilderError,
    SigningKeyError,
    WheelCacheSignatureError,
    WheelCacheUnsignedError,
)
from envbuilder.jsonread import Fields, loads_json
from envbuilder.kernels.cache import CachedWheel

PREDICATE_TYPE = "https://github.com/envbuilder/envbuilder/wheel-cache-entry/v1"
#: an entry is a few KiB; its envelope is read with this limit
MAX_ENTRY_BYTES = 1 << 20
_BAD = ("do not use this cache until it is repaired: republish the entry with `envbuilder wheels --publish`, "
        "or pass another --cache")


@dataclass(frozen=True)
class Trust:
    """Which entries a reader accepts: signed by one of `keys`, or (unsigned_ok) unsigned ones too."""

    keys: tuple[Any, ...]           # Ed25519PublicKey
    unsigned_ok: bool = False

    @classmethod
    def load(cls, key_files: Sequence[Path], unsigned_ok: bool) -> Trust:
        from envbuilder.dsse import load_public_key

        if not key_files and not unsigned_ok:
            raise SigningKeyError("--cache needs the public key its entries are signed with",
                                  "pass --trusted-key PUB (the .pub of the publisher's `envbuilder keygen` pair), "
                                  "or --trust-unsigned to accept entries on their sha256 alone")
        return cls(tuple(load_public_key(p) for p in key_files), unsigned_ok)

    @property
    def keyids(self) -> list[str]:
        return [keyid_of(k) for k in self.keys]

    def describe(self) -> str:
        if self.keys:
            named = ", ".join(k[:12] for k in self.keyids)
            return f"signed by {named}" + (" (or unsigned)" if self.unsigned_ok else "")
        return "unsigned accepted (--trust-unsigned): sha256 and archs checked, signatures not"


@dataclass(frozen=True)
class SharedEntry:
    """An entry a reader accepted: what the local cache keeps, the wheel's size, and who signed it."""

    cached: CachedWheel
    size: int
    signer: str | None              # key id, or None (unsigned, accepted with --trust-unsigned)

    @property
    def key(self) -> str:
        return self.cached.key


def statement(cached: CachedWheel, size: int) -> dict[str, Any]:
    return {"_type": STATEMENT_TYPE, "subject": [{"name": cached.wheel, "digest": {"sha256": cached.sha256}}],
            "predicateType": PREDICATE_TYPE, "predicate": {"entry": cached.to_dict(), "size": size}}


def seal_entry(cached: CachedWheel, size: int, signing_key: Any | None) -> bytes:
    """The envelope a publisher stores: signed with `signing_key`, or with no signature (publish --no-sign)."""
    body = canonical_json(statement(cached, size))
    env = (Envelope.sign(IN_TOTO_PAYLOAD_TYPE, body, signing_key) if signing_key is not None
           else Envelope(IN_TOTO_PAYLOAD_TYPE, body, ()))
    return env.to_json().encode()


def open_entry(data: bytes, key: str, trust: Trust, where: str) -> SharedEntry:
    """The entry in `data` (an envelope read from `where`) if `trust` accepts it and it is the entry of `key`."""
    env = Envelope.from_json(data, where, WheelCacheSignatureError, _BAD)
    signer = _check_signature(env, trust, where)
    if env.payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise WheelCacheSignatureError(f"{where} carries {env.payload_type}, not an in-toto statement", _BAD)
    doc = Fields.of(loads_json(env.body, what=f"the statement of {where}", error=WheelCacheSignatureError, fix=_BAD,
                               max_bytes=MAX_ENTRY_BYTES), f"the statement of {where}", WheelCacheSignatureError, _BAD)
    if doc.string("_type") != STATEMENT_TYPE or doc.string("predicateType") != PREDICATE_TYPE:
        raise WheelCacheSignatureError(f"{where} is not a wheel-cache entry (predicate {doc.string('predicateType')})",
                                       _BAD)
    predicate = doc.obj("predicate")
    cached = CachedWheel.from_fields(predicate.obj("entry"))
    size = predicate.integer("size", min=1)
    subjects = doc.objs("subject")
    if len(subjects) != 1 or subjects[0].string("name") != cached.wheel \
            or subjects[0].obj("digest").sha256("sha256") != cached.sha256:
        raise WheelCacheSignatureError(f"{where}: the statement's subject is not the wheel its predicate names", _BAD)
    _check_binding(cached, key, where)
    return SharedEntry(cached, size, signer)


def _check_signature(env: Envelope, trust: Trust, where: str) -> str | None:
    if not env.signatures:
        if trust.unsigned_ok:
            return None
        raise WheelCacheUnsignedError(f"{where} is unsigned",
                                      "ask its publisher to publish with a signing key (--sign KEY or "
                                      "$ENVBUILDER_SIGNING_KEY), or pass --trust-unsigned to accept it on its "
                                      "sha256 alone")
    if not trust.keys:  # --trust-unsigned and no key to check with: the signature cannot be checked
        return None
    signer = env.verified_by(trust.keys)
    if signer is None:
        raise WheelCacheSignatureError(f"{where}: no signature verifies with the trusted key(s) "
                                       f"{', '.join(k[:12] for k in trust.keyids)} (signed by {env.signer_names})",
                                       "pass the publisher's public key with --trusted-key, or " + _BAD)
    return signer


def _check_binding(cached: CachedWheel, key: str, where: str) -> None:
    """The entry is the one asked for: its key, the key its facts hash to, and a wheel of that package."""
    recomputed = cached.facts.key
    if cached.key != key or recomputed != key:
        raise WheelCacheSignatureError(f"{where} is stored under key {key[:16]}… but is the entry of key "
                                       f"{(cached.key if cached.key != key else recomputed)[:16]}… "
                                       f"({cached.facts.package} {cached.facts.version}): an entry moved to another "
                                       "key", _BAD)
    try:
        name, _version, _build, _tags = parse_wheel_filename(cached.wheel)
    except InvalidWheelFilename as exc:
        raise WheelCacheSignatureError(f"{where}: {cached.wheel!r} is not a wheel file name", _BAD) from exc
    if name != canonicalize_name(cached.facts.package):
        raise WheelCacheSignatureError(f"{where}: the wheel {cached.wheel} is not a wheel of {cached.facts.package}",
                                       _BAD)


def peek_subject(data: bytes) -> tuple[str, str, str, str] | None:
    """(package, version, wheel name, sha256) of an envelope, unverified: for the PEP 503 pages, which list
    what the cache holds for pip and uv (they check each wheel's sha256 from the page; envbuilder checks the
    signature itself). None when the envelope is not an entry."""
    try:
        env = Envelope.from_json(data, "entry", WheelCacheSignatureError)
        doc = Fields.of(loads_json(env.body, what="entry", error=WheelCacheSignatureError, fix="",
                                   max_bytes=MAX_ENTRY_BYTES), "entry", WheelCacheSignatureError, "")
        entry = doc.obj("predicate").obj("entry")
        return (entry.string("package", plain=True), entry.string("version"), entry.string("wheel", plain=True),
                entry.sha256("sha256"))
    except EnvbuilderError:
        return None
