"""CycloneDX SBOM of a lock (uv export --format cyclonedx1.5) plus, given an image, its OS packages.

The Python part is uv's own export of uv.lock (--frozen: nothing is re-resolved). The OS part is
the image's dpkg database, read by running dpkg-query in a throwaway container with no network.
Given an audit report of the same lock (`envbuilder audit LOCKDIR -o audit.json`), its findings become
the document's CycloneDX `vulnerabilities`, each pointing at the locked component it affects.
The document is deterministic: uv's random serial number and timestamp are replaced by a UUID
derived from the lock and image, so the same inputs give the same bytes.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from envbuilder import __version__, procs
from envbuilder.atomic import write_atomic
from envbuilder.audit.report import AuditReport, Finding
from envbuilder.canonical import sha256_file
from envbuilder.errors import SbomError
from envbuilder.lock.uvrun import uv_binary, uv_env

SBOM_NAME = "sbom.cdx.json"
_OS_SCRIPT = ('. /etc/os-release 2>/dev/null; echo "os\t${ID:-unknown}\t${VERSION_CODENAME:-${VERSION_ID:-}}"; '
              "command -v dpkg-query >/dev/null && dpkg-query -W -f='pkg\\t${Package}\\t${Version}\\t"
              "${Architecture}\\n' || echo nodpkg")


@dataclass
class SbomResult:
    document: dict[str, Any]
    python_components: int
    os_components: int
    os_note: str | None = None
    vulnerabilities: int | None = None  # None: no audit was given
    path: Path | None = None
    sha256: str | None = field(default=None)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path) if self.path else None, "sha256": self.sha256,
                "python_components": self.python_components, "os_components": self.os_components,
                "os_note": self.os_note, "vulnerabilities": self.vulnerabilities,
                "spec_version": self.document.get("specVersion")}


def uv_cyclonedx(lockdir: Path) -> dict[str, Any]:
    cmd = [uv_binary(), "export", "--format", "cyclonedx1.5", "--frozen", "--no-emit-project",
           "--preview-features", "sbom-export", "--all-extras", "--all-groups"]
    proc = procs.run(cmd, cwd=lockdir, capture_output=True, text=True, env=uv_env(None), check=False)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SbomError(f"uv export --format cyclonedx1.5 failed in {lockdir}: {tail[0]}",
                        "check that the directory holds the pyproject.toml and uv.lock written by envbuilder lock")
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise SbomError(f"uv export printed no CycloneDX JSON ({exc})", "upgrade uv (envbuilder pins it)") from exc
    return doc


def image_os_packages(image: str) -> tuple[str, str, list[tuple[str, str, str]] | None]:
    """(distro id, codename, [(package, version, arch)]) or None packages when the image has no dpkg."""
    cmd = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", _OS_SCRIPT]
    try:
        proc = procs.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SbomError(f"cannot run {image} to list its OS packages ({exc})", "start the Docker engine") from exc
    if proc.returncode != 0:
        raise SbomError(f"listing OS packages in {image} failed: {proc.stderr.strip()[-200:]}",
                        "check the image exists locally (docker image inspect) and has /bin/sh")
    distro, codename, pkgs = "unknown", "", []
    nodpkg = False
    for line in proc.stdout.splitlines():
        parts = line.split("\t")
        if parts[0] == "os" and len(parts) >= 3:
            distro, codename = parts[1], parts[2]
        elif parts[0] == "pkg" and len(parts) == 4:
            pkgs.append((parts[1], parts[2], parts[3]))
        elif line.strip() == "nodpkg":
            nodpkg = True
    return distro, codename, (None if nodpkg else sorted(pkgs))


def _os_component(distro: str, codename: str, name: str, version: str, arch: str) -> dict[str, Any]:
    qual = f"arch={arch}" + (f"&distro={codename}" if codename else "")
    return {"type": "library", "bom-ref": f"deb:{name}@{version}", "name": name, "version": version,
            "purl": f"pkg:deb/{distro}/{quote(name)}@{quote(version)}?{qual}",
            "properties": [{"name": "envbuilder:source", "value": "image dpkg database"}]}


#: CycloneDX 1.5 rating methods for the vectors an audit scores
_METHODS = {"CVSS:3.1": "CVSSv31", "CVSS:3.0": "CVSSv3", "CVSS_V2": "CVSSv2"}


def _rating(f: Finding) -> dict[str, Any]:
    sev = f.severity
    out: dict[str, Any] = {"severity": sev.level, "source": {"name": "OSV", "url": f.url}}
    kind, _, vector = sev.source.partition(" ")
    if sev.score is not None:
        out["score"] = sev.score
    if kind == "CVSS_V3":
        out["method"], out["vector"] = _METHODS.get(vector.split("/", 1)[0], "CVSSv3"), vector
    elif kind == "CVSS_V2":
        out["method"], out["vector"] = "CVSSv2", vector
    else:
        out["method"] = "other"
    return out


def vulnerabilities(audit: AuditReport, components: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The audit's findings as CycloneDX 1.5 `vulnerabilities`, each affecting the component uv exported for it."""
    refs = {(str(c.get("name", "")).lower(), str(c.get("version", ""))): str(c.get("bom-ref", ""))
            for c in components}
    out = []
    for f in audit.findings:
        v: dict[str, Any] = {
            "bom-ref": f"vuln:{f.id}:{f.package}@{f.version}", "id": f.id,
            "source": {"name": "OSV", "url": f.url},
            "references": [{"id": a, "source": {"name": "OSV", "url": f"https://osv.dev/vulnerability/{quote(a)}"}}
                           for a in f.aliases],
            "ratings": [_rating(f)],
            "description": f.summary,
            "recommendation": (f"Upgrade {f.package} to {' or '.join(f.fixed)}" if f.fixed
                               else f"No fixed release of {f.package} is known"),
            "affects": [{"ref": refs.get((f.package.lower(), f.version), f"pkg:pypi/{quote(f.package)}@{f.version}"),
                         "versions": [{"version": f.version, "status": "affected"}]}],
            "properties": [{"name": "envbuilder:fixed", "value": ", ".join(f.fixed) or "none"},
                           {"name": "envbuilder:osv-modified", "value": f.modified}],
        }
        if f.ignored:
            v["analysis"] = {"response": ["will_not_fix"], "detail": "accepted with envbuilder audit --ignore"}
        out.append(v)
    return out


def build_sbom(lockdir: Path, image: str | None = None, image_id: str | None = None,
               audit: AuditReport | None = None) -> SbomResult:
    lockdir = Path(lockdir)
    if not (lockdir / "uv.lock").exists():
        raise SbomError(f"{lockdir} has no uv.lock", "pass the directory written by `envbuilder lock`")
    lock_sha = sha256_file(lockdir / "uv.lock")
    if audit is not None and audit.lock_sha256 != lock_sha:
        raise SbomError(f"the audit report is of lock {audit.lock_sha256[:12]}…, not of {lockdir} "
                        f"({lock_sha[:12]}…)", f"audit this lock first: envbuilder audit {lockdir} -o audit.json")
    doc = uv_cyclonedx(lockdir)
    py = list(doc.get("components") or [])
    meta = doc.setdefault("metadata", {})
    meta.pop("timestamp", None)
    meta.setdefault("tools", []).append({"vendor": "envbuilder", "name": "envbuilder", "version": __version__})
    props = [{"name": "envbuilder:lock-sha256", "value": lock_sha}]
    os_components: list[dict[str, Any]] = []
    note = None
    if image is not None:
        distro, codename, pkgs = image_os_packages(image)
        if pkgs is None:
            note = f"{image} has no dpkg database; its OS packages are not listed"
        else:
            os_components = [_os_component(distro, codename, *p) for p in pkgs]
        meta["component"] = {"type": "container", "bom-ref": f"image:{image}", "name": image,
                             "version": image_id or "unknown",
                             "properties": [{"name": "envbuilder:os", "value": f"{distro} {codename}".strip()}]}
        props.append({"name": "envbuilder:image", "value": image})
        if image_id:
            props.append({"name": "envbuilder:image-id", "value": image_id})
        if note:
            props.append({"name": "envbuilder:os-packages", "value": note})
    if audit is not None:
        db = audit.database
        props.append({"name": "envbuilder:audit-database",
                      "value": str(db.get("url") or f"{db.get('path')} sha256 {db.get('sha256')}")})
        doc["vulnerabilities"] = vulnerabilities(audit, py)
    meta["properties"] = props
    doc["components"] = py + os_components
    seed = f"{lock_sha}|{image or ''}|{image_id or ''}"
    doc["serialNumber"] = f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'envbuilder-sbom:' + seed)}"
    return SbomResult(doc, len(py), len(os_components), note,
                      None if audit is None else len(doc["vulnerabilities"]))


def write_sbom(result: SbomResult, out: Path) -> SbomResult:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(result.document, indent=2, sort_keys=True) + "\n")
    result.path, result.sha256 = out, sha256_file(out)
    return result
