"""Host side: does a certificate belong to this lock and artifact, and did it pass?"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from envbuilder.certify.result import FAIL, PASS
from envbuilder.errors import CertificateMismatchError, CertificationFailedError, MalformedFileError, OutputPathError

_FIX = "pass the certificate.json written by `envbuilder certify -o DIR`"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _malformed(path: Path, what: str) -> MalformedFileError:
    return MalformedFileError(f"{path}: {what}", _FIX, path=str(path))


def load_certificate(path: Path) -> dict[str, Any]:
    """Read a certificate and check the shape every field verification relies on."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise OutputPathError(f"cannot read {path}: {exc.strerror}", _FIX) from exc
    try:
        cert = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _malformed(path, "is not a JSON certificate (not UTF-8 JSON text)") from exc
    if not isinstance(cert, dict):
        raise _malformed(path, f"is a JSON {type(cert).__name__}, not a certificate object")
    for key in ("checks", "status", "lock_sha256"):
        if key not in cert:
            raise _malformed(path, f"has no '{key}' (not an envbuilder certificate)")
    if not isinstance(cert["checks"], list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("status"), str)
            for c in cert["checks"]):
        raise _malformed(path, "'checks' is not a list of {name, status} objects")
    if not isinstance(cert["status"], str):
        raise _malformed(path, "'status' is not a string")
    if not isinstance(cert["lock_sha256"], str) or not _SHA256.fullmatch(cert["lock_sha256"]):
        raise _malformed(path, "'lock_sha256' is not a sha256")
    if "artifact" in cert and not isinstance(cert["artifact"], (dict, type(None))):
        raise _malformed(path, "'artifact' is not an object")
    if "summary" in cert and not isinstance(cert["summary"], (dict, type(None))):
        raise _malformed(path, "'summary' is not an object")
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
    summary = cert.get("summary")
    if isinstance(summary, dict):
        counts = {s: statuses.count(s) for s in summary}
        if any(summary[s] != counts[s] for s in summary):
            raise CertificateMismatchError("certificate summary does not agree with its checks (edited by hand?)",
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
