"""ed25519 keys and DSSE envelopes: the one signer envbuilder has.

`envbuilder keygen` makes the pair. Certificates (certify/sign.py) and the shared kernel-wheel
cache's entries (kernels/wheelcache) are both signed here, as a DSSE envelope over an in-toto
statement: the signature covers the pre-authentication encoding of (payload type, payload), so
neither can be swapped without breaking it.

`cryptography` is imported inside the functions: the in-environment certify modules never load it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.errors import EnvbuilderError, InvalidOptionError, SignatureInvalidError, SigningKeyError
from envbuilder.safetext import plain_name_problem, printable

#: the payload type of an in-toto statement
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
#: a CI secret holding the PEM private key (used when --sign is not given)
KEY_ENV = "ENVBUILDER_SIGNING_KEY"
#: a key file is a few hundred bytes: anything much larger is not one (and /dev/zero never ends)
_MAX_KEY_BYTES = 64 * 1024
#: envelopes hold a statement of a few KiB
_MAX_ENVELOPE_BYTES = 4 << 20
MAX_ENVELOPE_BYTES = _MAX_ENVELOPE_BYTES


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path
    keyid: str

    def to_dict(self) -> dict[str, Any]:
        return {"private": str(self.private), "public": str(self.public), "keyid": self.keyid}


def keyid_of(public_key: Any) -> str:
    """sha256 of the raw 32-byte public key: what envelopes name their signer by."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise SigningKeyError(f"cannot read {what} {path}: {exc.strerror}",
                              "pass the file written by `envbuilder keygen` (make keys)") from exc
    if len(data) > _MAX_KEY_BYTES:
        raise SigningKeyError(f"{path} is larger than {_MAX_KEY_BYTES // 1024} KiB: not a PEM key",
                              "pass the file written by `envbuilder keygen` (make keys)")
    return data


def _private_from_pem(pem: bytes, where: str) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(f"{where} is not an unencrypted PEM private key ({exc})",
                              "create a key pair with `make keys` (envbuilder keygen)") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{where} is a {type(key).__name__}, not an ed25519 key",
                              "create an ed25519 key pair with `make keys` (envbuilder keygen)")
    return key


def load_private_key(path: Path | None) -> Any:
    """The key from `path`, or (when path is None) the PEM text in $ENVBUILDER_SIGNING_KEY."""
    if path is None:
        pem = os.environ.get(KEY_ENV, "")
        if not pem.strip():
            raise SigningKeyError(f"no signing key: --sign not given and ${KEY_ENV} is empty",
                                  f"pass --sign KEY.pem or set {KEY_ENV} from a CI secret")
        return _private_from_pem(pem.encode(), f"${KEY_ENV}")
    return _private_from_pem(_read_key_file(Path(path), "signing key"), str(path))


def load_public_key(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read_key_file(Path(path), "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(f"{path} is not a PEM public key ({exc})",
                              "pass the .pub file written by `make keys` (not the private key)") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{path} is a {type(key).__name__}, not an ed25519 key",
                              "pass the .pub file written by `make keys`")
    return key


def key_paths(directory: Path, name: str) -> tuple[Path, Path]:
    """DIR/NAME.key and DIR/NAME.pub, for a plain, visible NAME (never '', '.x', '..' or 'a/b')."""
    problem = plain_name_problem(name)
    if problem is not None:
        raise InvalidOptionError(f"--name {printable(name)!r} is not a key name: it {problem}",
                                 "pass a plain name such as envbuilder-signing (letters, digits, ._+-)")
    return Path(directory) / f"{name}.key", Path(directory) / f"{name}.pub"


def generate_keypair(private: Path, public: Path) -> KeyPair:
    """Write a new ed25519 pair (private 0600); never overwrites an existing key.

    Two runs at once cannot mix their halves: the directory is locked (flock) for the check and the
    writes, each file appears whole and only if it did not exist (a hard link of a complete temp file,
    which fails with EEXIST), and a run that fails removes what it made (the directory too, if new).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private, public = Path(private), Path(public)
    directories = sorted({private.parent, public.parent})  # locked in one order: two runs never deadlock
    created = [d for directory in directories for d in _make_dirs(directory)]
    made: list[Path] = []
    fds: list[int] = []
    try:
        try:
            for directory in directories:
                fds.append(os.open(directory, os.O_RDONLY | os.O_DIRECTORY))
                fcntl.flock(fds[-1], fcntl.LOCK_EX)
            for p in (private, public):
                if p.exists() or p.is_symlink():
                    raise SigningKeyError(f"{p} exists; a new key would orphan every signature made with it",
                                          "remove it yourself if you mean to rotate keys, or choose another path")
            key = Ed25519PrivateKey.generate()
            _write_new(private, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()), 0o600)
            made.append(private)
            _write_new(public, key.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)
            made.append(public)
        finally:
            for fd in fds:
                os.close(fd)  # drops the flock
    except BaseException:
        for p in made:
            with contextlib.suppress(OSError):
                p.unlink()
        for d in reversed(created):
            with contextlib.suppress(OSError):
                d.rmdir()  # only when still empty
        raise
    return KeyPair(private, public, keyid_of(key.public_key()))


def _make_dirs(directory: Path) -> list[Path]:
    """mkdir -p; returns the directories it created, outermost first."""
    missing = []
    d = directory
    while not d.exists():
        missing.append(d)
        d = d.parent
    for m in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(m, 0o755)
    return list(reversed(missing))


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create `path` with `data`, whole, only if it does not exist (EEXIST otherwise, never a replace)."""
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise SigningKeyError(f"{path} appeared while this key was made (another keygen run?)",
                                  "keep the pair that run made, or choose another --name") from None
    except OSError as exc:  # name the key file, not a temp name (or none: a full disk's write names no file)
        raise type(exc)(exc.errno, exc.strerror or str(exc), str(path)) from exc
    finally:
        if tmp:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE pre-authentication encoding: what the signature covers."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def canonical_json(obj: Any) -> bytes:
    """The bytes a statement is signed as: sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Envelope:
    """A parsed DSSE envelope: the payload type, the payload bytes, and (keyid, signature) pairs."""

    payload_type: str
    body: bytes
    signatures: tuple[tuple[str, bytes], ...]

    @classmethod
    def sign(cls, payload_type: str, body: bytes, key: Any) -> Envelope:
        """Sign `body` with `key` (an Ed25519PrivateKey)."""
        return cls(payload_type, body, ((keyid_of(key.public_key()), key.sign(pae(payload_type, body))),))

    def to_json(self) -> str:
        return json.dumps({"payloadType": self.payload_type, "payload": base64.b64encode(self.body).decode(),
                           "signatures": [{"keyid": k, "sig": base64.b64encode(s).decode()}
                                          for k, s in self.signatures]}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, data: bytes | str, where: str,
                  error: type[EnvbuilderError] = SignatureInvalidError, fix: str = "") -> Envelope:
        """Parse an envelope; anything of another shape raises `error` (a typed error naming `where`)."""
        from envbuilder.jsonread import Fields, loads_json

        try:
            doc = Fields.of(loads_json(data, what="it", error=error, fix=fix, max_bytes=_MAX_ENVELOPE_BYTES),
                            "it", error, fix)
            payload_type = doc.string("payloadType", nonempty=True)
            body = base64.b64decode(doc.string("payload", max_len=_MAX_ENVELOPE_BYTES), validate=True)
            pairs = tuple((str(s.string("keyid", default="")), base64.b64decode(s.string("sig"), validate=True))
                          for s in doc.objs("signatures"))
        except (ValueError, binascii.Error) as exc:
            raise error(f"{where} is not a DSSE envelope (a payload or signature is not base64: {exc})",
                        fix or None) from exc
        except error as exc:
            raise error(f"{where} is not a DSSE envelope ({exc.cause})", fix or None) from exc
        return cls(payload_type, body, pairs)

    def verified_by(self, public_keys: Sequence[Any]) -> str | None:
        """The key id of the first of `public_keys` whose signature verifies, else None."""
        from cryptography.exceptions import InvalidSignature

        message = pae(self.payload_type, self.body)
        for key in public_keys:
            for _, sig in self.signatures:
                try:
                    key.verify(sig, message)
                except InvalidSignature:
                    continue
                return keyid_of(key)
        return None

    @property
    def signer_names(self) -> str:
        return ", ".join(k[:12] for k, _ in self.signatures) or "none"
