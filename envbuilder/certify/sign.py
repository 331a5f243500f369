"""Host side: sign a certificate as an in-toto statement in a DSSE envelope (ed25519), and verify it.

The envelope `certificate.dsse.json` sits beside `certificate.json`. Its statement's subject is
what the certificate certifies (the image digest, or the sqsh/SIF sha256; the lock's sha256 for
venv and in-place runs), and its predicate binds the exact bytes of certificate.json by sha256.
Editing either file, or signing with another key, makes `verify-cert --key PUB` fail. The keys and
the envelope are envbuilder.dsse's (the wheel cache signs its entries with the same code).

Never imported by the in-environment modules (they have no `cryptography`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.atomic import write_atomic
from envbuilder.certify.certificate import Certificate
from envbuilder.dsse import (
    IN_TOTO_PAYLOAD_TYPE,
    MAX_ENVELOPE_BYTES,
    STATEMENT_TYPE,
    Envelope,
    canonical_json,
    keyid_of,
)
from envbuilder.errors import CertificateUnsignedError, SignatureInvalidError, SigningKeyError
from envbuilder.jsonread import Fields, loads_json, read_bytes
from envbuilder.safetext import printable

ENVELOPE_NAME = "certificate.dsse.json"
PAYLOAD_TYPE = IN_TOTO_PAYLOAD_TYPE
PREDICATE_TYPE = "https://github.com/envbuilder/envbuilder/certificate/v1"


@dataclass(frozen=True)
class SignResult:
    envelope: Path
    keyid: str
    subject: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"envelope": str(self.envelope), "keyid": self.keyid, "subject": self.subject}


def subject_of(cert: Certificate) -> dict[str, Any]:
    """What the certificate certifies: image digest, artifact sha256, else the lock."""
    art = cert.artifact
    if art.kind == "image" and (art.digest or "").startswith("sha256:"):
        return {"name": art.ref or "image", "digest": {"sha256": str(art.digest)[7:]}}
    if art.kind in ("sqsh", "sif") and art.sha256:
        return {"name": Path(art.ref or art.kind).name, "digest": {"sha256": art.sha256}}
    if cert.lock_sha256:
        return {"name": "uv.lock", "digest": {"sha256": cert.lock_sha256}}
    raise SigningKeyError("the certificate names neither an artifact digest nor a lock; nothing to sign for",
                          "certify an image, sqsh or SIF, or pass --lock")


def statement(cert_bytes: bytes) -> dict[str, Any]:
    cert = Certificate.from_json(cert_bytes, "certificate.json", SigningKeyError)
    art = cert.artifact
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject_of(cert)],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "certificate": {"name": "certificate.json", "sha256": hashlib.sha256(cert_bytes).hexdigest()},
            "row": cert.row, "level": cert.level, "status": cert.status,
            "lock_sha256": cert.lock_sha256, "artifact_kind": art.kind,
            "sbom": art.sbom.to_dict() if art.sbom else None,
        },
    }


def sign_certificate(cert_path: Path, key: Any, cert_bytes: bytes | None = None) -> SignResult:
    """Write certificate.dsse.json beside cert_path, signed with `key` (an Ed25519PrivateKey).

    `cert_bytes`: the certificate as the caller read and checked it (certify passes the bytes it wrote
    itself, so what is signed is exactly what was verified, never a file read back from disk)."""
    if cert_bytes is None:
        cert_bytes = read_bytes(cert_path, what="certificate")
    stmt = statement(cert_bytes)
    env = Envelope.sign(PAYLOAD_TYPE, canonical_json(stmt), key)
    out = Path(cert_path).with_name(ENVELOPE_NAME)
    write_atomic(out, env.to_json())
    return SignResult(out, env.signatures[0][0], stmt["subject"][0])


def envelope_path(cert_path: Path) -> Path:
    return Path(cert_path).with_name(ENVELOPE_NAME)


def verify_signature(cert_path: Path, public_key: Any) -> dict[str, Any]:
    """Raise unless the envelope beside cert_path is signed by public_key and binds cert_path's bytes."""
    env_path = envelope_path(cert_path)
    if not env_path.exists():
        raise CertificateUnsignedError(f"{cert_path} is unsigned (no {ENVELOPE_NAME} beside it)",
                                       "certify with --sign KEY (or $ENVBUILDER_SIGNING_KEY set)")
    bad = "re-certify and sign again; do not edit certificates or envelopes by hand"
    try:
        raw = read_bytes(env_path, what="DSSE envelope", max_bytes=MAX_ENVELOPE_BYTES)
    except OSError as exc:
        raise SignatureInvalidError(f"cannot read {env_path}: {exc.strerror}", bad) from exc
    env = Envelope.from_json(raw, str(env_path), SignatureInvalidError, bad)
    kid = keyid_of(public_key)
    if env.payload_type != PAYLOAD_TYPE:  # first: an edited payloadType also breaks every signature
        raise SignatureInvalidError(f"{env_path} has payloadType {printable(env.payload_type)[:80]!r}, not "
                                    f"{PAYLOAD_TYPE}: the envelope was edited, or is not a certificate's", bad)
    if env.verified_by([public_key]) is None:
        if any(k == kid for k, _ in env.signatures):
            raise SignatureInvalidError(f"{env_path}: the signature of key {kid[:12]}… no longer verifies: the "
                                        "envelope's payload was changed after signing", bad)
        raise SignatureInvalidError(f"{env_path} is signed by {env.signer_names}, not by key {kid[:12]}…",
                                    "pass the public key of the key that signed it, or " + bad)
    stmt = Fields.of(loads_json(env.body, what=f"the statement in {env_path}", error=SignatureInvalidError, fix=bad),
                     f"the statement in {env_path}", SignatureInvalidError, bad)
    cert_bytes = read_bytes(cert_path, what="certificate")
    have = hashlib.sha256(cert_bytes).hexdigest()
    want = stmt.obj("predicate").obj("certificate").sha256("sha256")
    if have != want:
        raise SignatureInvalidError(f"{cert_path} was changed after signing (sha256 {have[:12]}…, the signed "
                                    f"statement names {str(want)[:12]}…)", bad)
    if stmt.array("subject") != [subject_of(Certificate.from_json(cert_bytes, str(cert_path), SignatureInvalidError,
                                                                  bad))]:
        raise SignatureInvalidError("the signed statement's subject is not the certificate's artifact", bad)
    stmt.string("predicateType")
    return {"signed": True, "keyid": kid, "subject": stmt["subject"][0], "predicate_type": stmt["predicateType"]}
