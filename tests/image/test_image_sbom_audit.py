"""The SBOM carries the audit: findings of the same lock become CycloneDX `vulnerabilities`.

Real uv export of a committed lock, synthetic advisories written at test time (tests/audit/osv_records.py: real
records may not be committed here), no image (the OS part is the nightly pipeline test's business)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from audit import osv_records as osv

from envbuilder.audit import AuditOptions, OfflineDatabase, Threshold, run_audit
from envbuilder.errors import SbomError
from envbuilder.image.sbom import build_sbom

REPO = Path(__file__).resolve().parents[2]
# the v2.3.0 lock as committed before its security overrides (urllib3 1.26.20, cryptography 42.0.8)
LOCK = REPO / "tests" / "audit" / "data" / "lock-v2.3.0"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return osv.write_db(tmp_path_factory.mktemp("osv"))


def test_findings_become_cyclonedx_vulnerabilities_of_the_locked_components(db: Path) -> None:
    audit = run_audit(AuditOptions(LOCK, OfflineDatabase.open(db), Threshold.parse("none"), (osv.URLLIB3_MEDIUM,)))
    result = build_sbom(LOCK, audit=audit)
    doc = result.document
    refs = {c["bom-ref"]: (c["name"], c["version"]) for c in doc["components"]}
    vulns = doc["vulnerabilities"]
    assert result.vulnerabilities == len(vulns) == len(audit.findings) == len(osv.LOCK_FINDINGS)
    for v in vulns:  # every finding points at a component of this very document
        (ref,) = [a["ref"] for a in v["affects"]]
        assert ref in refs and refs[ref][1] == v["affects"][0]["versions"][0]["version"]
    # urllib3: the GitHub-style and PyPA-style records of one CVE, one finding
    e = next(e for e in osv.LOCK_FINDINGS if e.id == osv.URLLIB3_GH)
    u = next(v for v in vulns if v["id"] == e.id)
    assert refs[u["affects"][0]["ref"]] == (e.package, e.version)
    assert {r["id"] for r in u["references"]} == set(e.aliases)
    assert u["ratings"] == [{"severity": e.level, "score": e.score, "method": "CVSSv31", "vector": e.vector,
                             "source": {"name": "OSV", "url": f"https://osv.dev/vulnerability/{e.id}"}}]
    assert u["recommendation"] == f"Upgrade {e.package} to {e.fixed[0]}"
    assert next(v for v in vulns if v["id"] == osv.URLLIB3_MEDIUM)["analysis"]["response"] == ["will_not_fix"]
    no_fix = next(v for v in vulns if v["id"] == osv.TORCH_EMPTY_EVENT_HIGH)  # its range ends in `{}`: no fix known
    assert no_fix["recommendation"].startswith("No fixed release")
    assert any(p["name"] == "envbuilder:audit-database" for p in doc["metadata"]["properties"])
    # same inputs, same bytes
    assert json.dumps(build_sbom(LOCK, audit=audit).document, sort_keys=True) == json.dumps(doc, sort_keys=True)


def test_an_audit_of_another_lock_is_refused(db: Path) -> None:
    audit = run_audit(AuditOptions(LOCK, OfflineDatabase.open(db), Threshold.parse("none")))
    with pytest.raises(SbomError, match="not of"):
        build_sbom(REPO / "locks" / "v2.3.1", audit=audit)


def test_cli_sbom_audit(tmp_path: Path, db: Path) -> None:
    audit = tmp_path / "audit.json"
    run = [sys.executable, "-m", "envbuilder"]
    got = subprocess.run([*run, "audit", str(LOCK), "--db", str(db), "--fail-on", "none", "-o", str(audit)],
                         capture_output=True, text=True, check=False)
    assert got.returncode == 0, got.stderr
    out = tmp_path / "sbom.cdx.json"
    got = subprocess.run([*run, "sbom", str(LOCK), "--audit", str(audit), "-o", str(out), "--json"],
                         capture_output=True, text=True, check=False)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["vulnerabilities"] == len(osv.LOCK_FINDINGS)
    assert len(json.loads(out.read_text())["vulnerabilities"]) == len(osv.LOCK_FINDINGS)
    audit.write_text("{}", encoding="utf-8")
    bad = subprocess.run([*run, "sbom", str(LOCK), "--audit", str(audit), "-o", str(out)], capture_output=True,
                         text=True, check=False)
    assert bad.returncode == 99 and "audit report" in bad.stderr
