"""Host side: does a certificate belong to this lock and artifact, and did it pass?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuilder.certify.result import FAIL, PASS
from envbuilder.errors import CertificateMismatchError, CertificationFailedError, MalformedFileError
from envbuilder.jsonread import Fields, read_json

_FIX = "pass the certificate.json written by `envbuilder certify -o DIR`"


def _malformed(path: Path, what: str) -> MalformedFileError:
    return MalformedFileError(f"{path}: {what}", _FIX, path=str(path))


#: what a check's status may be (certify/result.py)
STATUSES = frozenset({"pass", "fail", "skipped", "not-installed"})


def check_certificate(doc: Fields, *, lock_required: bool = True) -> dict[str, Any]:
    """Every field a reader of a certificate relies on, typed; `doc`'s error class reports the first wrong one.

    The typed Certificate record (code-shape issue) is this check's eventual home.
    """
    doc.integer("schema", default=1, min=1)
    doc.string("status", choices=("pass", "fail"))
    doc.integer("level", default=0, min=0, max=9)
    doc.sha256("lock_sha256") if lock_required else doc.sha256("lock_sha256", default=None)
    doc.string("row", default=None, max_len=200)
    doc.string("created", default=None, max_len=64)
    for c in doc.objs("checks"):
        c.string("name", nonempty=True, max_len=200)
        c.string("status", choices=STATUSES)
        c.integer("level", default=0, min=0, max=9)
        c.numbers("losses", default=None, allow_nonfinite=True)
    summary = doc.obj("summary", default=None)
    if summary is not None:
        for k in summary:
            summary.integer(k, min=0)
    art = doc.obj("artifact", default=None)
    if art is not None:
        art.string("kind", default=None, max_len=40)
        art.string("ref", default=None)
        art.string("digest", default=None, max_len=80)
        art.sha256("sha256", default=None)
        sbom = art.obj("sbom", default=None)
        if sbom is not None:
            sbom.string("name", plain=True)
            sbom.sha256("sha256")
    return doc.data


def load_certificate(path: Path) -> dict[str, Any]:
    """Read a certificate (size, depth and every field checked) for verify-cert."""
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
    return check_certificate(Fields(value, f"certificate {path}", MalformedFileError, _FIX))


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
    path = Path(cert_dir) / str(ref["name"])  # a plain name: check_certificate saw to it
    try:
        have = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise CertificateMismatchError(f"the certificate names SBOM {path}, which cannot be read ({exc.strerror})",
                                       "keep sbom.cdx.json beside certificate.json (copy the whole directory)") from exc
    if have != ref.get("sha256"):
        raise CertificateMismatchError(f"{path} is {have[:12]}…, the certificate names {str(ref.get('sha256'))[:12]}…",
                                       "restore the SBOM written with the certificate, or certify again")
    return {"name": ref.get("name"), "sha256": have, "verified": True}
