"""Host side: sign a certificate as an in-toto statement in a DSSE envelope (ed25519), and verify it.

The envelope `certificate.dsse.json` sits beside `certificate.json`. Its statement's subject is
what the certificate certifies (the image digest, or the sqsh/SIF sha256; the lock's sha256 for
venv and in-place runs), and its predicate binds the exact bytes of certificate.json by sha256.
Editing either file, or signing with another key, makes `verify-cert --key PUB` fail.

Never imported by the in-environment modules (they have no `cryptography`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.atomic import write_atomic
from envbuilder.errors import CertificateUnsignedError, SignatureInvalidError, SigningKeyError

ENVELOPE_NAME = "certificate.dsse.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://github.com/envbuilder/envbuilder/certificate/v1"
#: a CI secret holding the PEM private key (used when --sign is not given)
KEY_ENV = "ENVBUILDER_SIGNING_KEY"


@dataclass(frozen=True)
class SignResult:
    envelope: Path
    keyid: str
    subject: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"envelope": str(self.envelope), "keyid": self.keyid, "subject": self.subject}


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path
    keyid: str

    def to_dict(self) -> dict[str, Any]:
        return {"private": str(self.private), "public": str(self.public), "keyid": self.keyid}


def _pae(payload_type: str, body: bytes) -> bytes:
    """DSSE pre-authentication encoding: what the signature covers."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def keyid_of(public_key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


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
    try:
        pem_bytes = Path(path).read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"cannot read signing key {path}: {exc.strerror}",
                              "pass the private key written by `make keys`") from exc
    return _private_from_pem(pem_bytes, str(path))


def load_public_key(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except OSError as exc:
        raise SigningKeyError(f"cannot read public key {path}: {exc.strerror}",
                              "pass the .pub file written by `make keys`") from exc
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(f"{path} is not a PEM public key ({exc})",
                              "pass the .pub file written by `make keys` (not the private key)") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{path} is a {type(key).__name__}, not an ed25519 key",
                              "pass the .pub file written by `make keys`")
    return key


def generate_keypair(private: Path, public: Path) -> KeyPair:
    """Write a new ed25519 pair (private 0600); never overwrites an existing key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    for p in (private, public):
        if p.exists():
            raise SigningKeyError(f"{p} exists; a new key would orphan every certificate signed with it",
                                  "remove it yourself if you mean to rotate keys, or choose another path")
    key = Ed25519PrivateKey.generate()
    private.parent.mkdir(parents=True, exist_ok=True)
    public.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(private, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()), mode=0o600)
    write_atomic(public, key.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo))
    return KeyPair(private, public, keyid_of(key.public_key()))


def subject_of(cert: dict[str, Any]) -> dict[str, Any]:
    """What the certificate certifies: image digest, artifact sha256, else the lock."""
    art = cert.get("artifact") or {}
    kind = art.get("kind")
    if kind == "image" and str(art.get("digest", "")).startswith("sha256:"):
        return {"name": str(art.get("ref") or "image"), "digest": {"sha256": str(art["digest"])[7:]}}
    if kind in ("sqsh", "sif") and art.get("sha256"):
        return {"name": Path(str(art.get("ref") or kind)).name, "digest": {"sha256": str(art["sha256"])}}
    if cert.get("lock_sha256"):
        return {"name": "uv.lock", "digest": {"sha256": str(cert["lock_sha256"])}}
    raise SigningKeyError("the certificate names neither an artifact digest nor a lock; nothing to sign for",
                          "certify an image, sqsh or SIF, or pass --lock")


def statement(cert_bytes: bytes) -> dict[str, Any]:
    cert = json.loads(cert_bytes)
    art = cert.get("artifact") or {}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject_of(cert)],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "certificate": {"name": "certificate.json", "sha256": hashlib.sha256(cert_bytes).hexdigest()},
            "row": cert.get("row"), "level": cert.get("level"), "status": cert.get("status"),
            "lock_sha256": cert.get("lock_sha256"), "artifact_kind": art.get("kind"),
            "sbom": art.get("sbom"),
        },
    }


def sign_certificate(cert_path: Path, key: Any) -> SignResult:
    """Write certificate.dsse.json beside cert_path, signed with `key` (an Ed25519PrivateKey)."""
    cert_bytes = Path(cert_path).read_bytes()
    stmt = statement(cert_bytes)
    body = json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()
    kid = keyid_of(key.public_key())
    env = {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(body).decode(),
           "signatures": [{"keyid": kid, "sig": base64.b64encode(key.sign(_pae(PAYLOAD_TYPE, body))).decode()}]}
    out = Path(cert_path).with_name(ENVELOPE_NAME)
    write_atomic(out, json.dumps(env, indent=2, sort_keys=True) + "\n")
    return SignResult(out, kid, stmt["subject"][0])


def envelope_path(cert_path: Path) -> Path:
    return Path(cert_path).with_name(ENVELOPE_NAME)


def verify_signature(cert_path: Path, public_key: Any) -> dict[str, Any]:
    """Raise unless the envelope beside cert_path is signed by public_key and binds cert_path's bytes."""
    from cryptography.exceptions import InvalidSignature

    env_path = envelope_path(cert_path)
    if not env_path.exists():
        raise CertificateUnsignedError(f"{cert_path} is unsigned (no {ENVELOPE_NAME} beside it)",
                                       "certify with --sign KEY (or $ENVBUILDER_SIGNING_KEY set)")
    bad = "re-certify and sign again; do not edit certificates or envelopes by hand"
    try:
        env = json.loads(env_path.read_text(encoding="utf-8"))
        body = base64.b64decode(env["payload"], validate=True)
        sigs = [(s.get("keyid"), base64.b64decode(s["sig"], validate=True)) for s in env["signatures"]]
        payload_type = env["payloadType"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SignatureInvalidError(f"{env_path} is not a DSSE envelope ({exc})", bad) from exc
    kid = keyid_of(public_key)
    ok = False
    for _, sig in sigs:
        try:
            public_key.verify(sig, _pae(payload_type, body))
            ok = True
            break
        except InvalidSignature:
            continue
    if not ok:
        named = ", ".join(str(k)[:12] for k, _ in sigs) or "none"
        raise SignatureInvalidError(f"{env_path}: no signature verifies with key {kid[:12]}… (signed by {named})",
                                    "pass the public key of the key that signed it, or " + bad)
    if payload_type != PAYLOAD_TYPE:
        raise SignatureInvalidError(f"{env_path} carries {payload_type}, not an in-toto statement", bad)
    stmt = json.loads(body)
    cert_bytes = Path(cert_path).read_bytes()
    have = hashlib.sha256(cert_bytes).hexdigest()
    want = stmt.get("predicate", {}).get("certificate", {}).get("sha256")
    if have != want:
        raise SignatureInvalidError(f"{cert_path} was changed after signing (sha256 {have[:12]}…, the signed "
                                    f"statement names {str(want)[:12]}…)", bad)
    if stmt.get("subject") != [subject_of(json.loads(cert_bytes))]:
        raise SignatureInvalidError("the signed statement's subject is not the certificate's artifact", bad)
    return {"signed": True, "keyid": kid, "subject": stmt["subject"][0], "predicate_type": stmt["predicateType"]}
