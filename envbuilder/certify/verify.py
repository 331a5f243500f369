"""Host side: does a certificate belong to this lock and artifact, and did it pass?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuilder.certify.certificate import Artifact, Certificate
from envbuilder.certify.result import FAIL, PASS
from envbuilder.errors import CertificateMismatchError, CertificationFailedError, MalformedFileError
from envbuilder.jsonread import Fields, read_json

_FIX = "pass the certificate.json written by `envbuilder certify -o DIR`"


def _malformed(path: Path, what: str) -> MalformedFileError:
    return MalformedFileError(f"{path}: {what}", _FIX, path=str(path))


def load_certificate(path: Path) -> Certificate:
    """Read a certificate for verify-cert (size, depth and every field checked; it must name its lock)."""
    try:
        value = read_json(path, what="certificate", error=MalformedFileError, fix=_FIX, allow_nan=True)
    except MalformedFileError as exc:
        if "not UTF-8" in exc.cause or "not valid JSON" in exc.cause:
            raise _malformed(path, "is not a JSON certificate (not UTF-8 JSON text)") from None
        raise
    if not isinstance(value, dict):
        raise _malformed(path, f"is a JSON {type(value).__name__}, not a certificate object")
    for key in ("checks", "status", "lock_sha256"):
        if key not in value:
            raise _malformed(path, f"has no '{key}' (not an envbuilder certificate)")
    if not isinstance(value["checks"], list):
        raise _malformed(path, "'checks' is not a list of {name, status} objects")
    doc = Fields(value, f"certificate {path}", MalformedFileError, _FIX)
    doc.sha256("lock_sha256")  # verify-cert binds a certificate to a lock: one without is not verifiable
    return Certificate.from_fields(doc)


def verify_certificate(cert: Certificate, lock_sha256: str, artifact: Artifact | None) -> dict[str, Any]:
    """Raise CertificateMismatchError / CertificationFailedError; return a summary when it holds."""
    if cert.lock_sha256 != lock_sha256:
        raise CertificateMismatchError(
            f"certificate is for lock {str(cert.lock_sha256)[:12]}…, this lock is {lock_sha256[:12]}…",
            "certify this lock: envbuilder certify --lock DIR ...")
    statuses = [c.status for c in cert.checks]
    consistent = (FAIL in statuses) == (cert.status == FAIL)
    if not consistent or cert.status not in (PASS, FAIL):
        raise CertificateMismatchError("certificate status does not agree with its checks (edited by hand?)",
                                       "re-run envbuilder certify")
    if any(n != statuses.count(s) for s, n in cert.summary.items()):
        raise CertificateMismatchError("certificate summary does not agree with its checks (edited by hand?)",
                                       "re-run envbuilder certify")
    have = cert.artifact
    if artifact is not None:
        if have.kind != artifact.kind:
            raise CertificateMismatchError(f"certificate is for a {have.kind} artifact, not a {artifact.kind}",
                                           f"certify the {artifact.kind} itself")
        want, got = (artifact.digest, have.digest) if artifact.kind == "image" else (artifact.sha256, have.sha256)
        if got != want:
            raise CertificateMismatchError(
                f"{artifact.kind} {artifact.ref} is {str(want)[:19]}…, the certificate names {str(got)[:19]}…",
                "certify this artifact (it was rebuilt or re-exported)")
    if cert.status != PASS:
        failed = [c.name for c in cert.failed_checks()]
        raise CertificationFailedError(f"the certificate records failed checks: {', '.join(failed)}",
                                       "fix the environment (see each check's advice) and certify again",
                                       failed=failed)
    return {"verified": True, "lock_sha256": lock_sha256, "artifact": have.to_dict(), "level": cert.level,
            "row": cert.row, "checks": len(cert.checks)}


def verify_sbom(cert: Certificate, cert_dir: Path) -> dict[str, Any] | None:
    """Recompute the sha256 of the SBOM the certificate names (it sits beside the certificate)."""
    import hashlib

    ref = cert.artifact.sbom
    if ref is None:
        return None
    path = Path(cert_dir) / ref.name  # a plain name: the reader saw to it
    try:
        have = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise CertificateMismatchError(f"the certificate names SBOM {path}, which cannot be read ({exc.strerror})",
                                       "keep sbom.cdx.json beside certificate.json (copy the whole directory)") from exc
    if have != ref.sha256:
        raise CertificateMismatchError(f"{path} is {have[:12]}…, the certificate names {ref.sha256[:12]}…",
                                       "restore the SBOM written with the certificate, or certify again")
    return {"name": ref.name, "sha256": have, "verified": True}
