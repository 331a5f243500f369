"""Host side: does a certificate belong to this lock and artifact, and did it pass?"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envbuilder.certify.result import FAIL, PASS
from envbuilder.errors import CertificateMismatchError, CertificationFailedError


def load_certificate(path: Path) -> dict[str, Any]:
    try:
        cert = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CertificateMismatchError(f"{path} is not a readable certificate ({exc})",
                                       "pass the certificate.json written by `envbuilder certify -o DIR`") from exc
    if not isinstance(cert, dict) or "checks" not in cert or "status" not in cert:
        raise CertificateMismatchError(f"{path} is not an envbuilder certificate",
                                       "pass the certificate.json written by `envbuilder certify -o DIR`")
    return cert


def verify_certificate(cert: dict[str, Any], lock_sha256: str, artifact: dict[str, str] | None) -> dict[str, Any]:
    """Raise CertificateMismatchError / CertificationFailedError; return a summary when it holds."""
    if cert.get("lock_sha256") != lock_sha256:
        raise CertificateMismatchError(
            f"certificate is for lock {str(cert.get('lock_sha256'))[:12]}…, this lock is {lock_sha256[:12]}…",
            "certify this lock: envbuilder certify --lock DIR ...")
    statuses = [c.get("status") for c in cert["checks"]]
    consistent = (FAIL in statuses) == (cert["status"] == FAIL)
    if not consistent or cert["status"] not in (PASS, FAIL):
        raise CertificateMismatchError("certificate status does not agree with its checks (edited by hand?)",
                                       "re-run envbuilder certify")
    have = cert.get("artifact") or {}
    if artifact is not None:
        if have.get("kind") != artifact["kind"]:
            raise CertificateMismatchError(
                f"certificate is for a {have.get('kind')} artifact, not a {artifact['kind']}",
                f"certify the {artifact['kind']} itself")
        key = "digest" if artifact["kind"] == "image" else "sha256"
        if have.get(key) != artifact[key]:
            raise CertificateMismatchError(
                f"{artifact['kind']} {artifact.get('ref')} is {artifact[key][:19]}…, the certificate names "
                f"{str(have.get(key))[:19]}…", "certify this artifact (it was rebuilt or re-exported)")
    if cert["status"] != PASS:
        failed = [c["name"] for c in cert["checks"] if c.get("status") == FAIL]
        raise CertificationFailedError(f"the certificate records failed checks: {', '.join(failed)}",
                                       "fix the environment (see each check's advice) and certify again",
                                       failed=failed)
    return {"verified": True, "lock_sha256": lock_sha256, "artifact": have, "level": cert.get("level"),
            "row": cert.get("row"), "checks": len(cert["checks"])}


def verify_sbom(cert: dict[str, Any], cert_dir: Path) -> dict[str, Any] | None:
    """Recompute the sha256 of the SBOM the certificate names (it sits beside the certificate)."""
    import hashlib

    ref = (cert.get("artifact") or {}).get("sbom")
    if not ref:
        return None
    path = Path(cert_dir) / str(ref.get("name"))
    try:
        have = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise CertificateMismatchError(f"the certificate names SBOM {path}, which cannot be read ({exc.strerror})",
                                       "keep sbom.cdx.json beside certificate.json (copy the whole directory)") from exc
    if have != ref.get("sha256"):
        raise CertificateMismatchError(f"{path} is {have[:12]}…, the certificate names {str(ref.get('sha256'))[:12]}…",
                                       "restore the SBOM written with the certificate, or certify again")
    return {"name": ref.get("name"), "sha256": have, "verified": True}
