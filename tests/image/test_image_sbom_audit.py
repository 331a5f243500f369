"""The SBOM carries the audit: findings of the same lock become CycloneDX `vulnerabilities`.

Real uv export of a committed lock, real advisories (tests/audit/data/osv/), no image (the OS part is the
nightly pipeline test's business)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.audit import AuditOptions, OfflineDatabase, Threshold, run_audit
from envbuilder.errors import SbomError
from envbuilder.image.sbom import build_sbom

REPO = Path(__file__).resolve().parents[2]
# the v2.3.0 lock as committed before its security overrides (urllib3 1.26.20, cryptography 42.0.8)
LOCK = REPO / "tests" / "audit" / "data" / "lock-v2.3.0"
DB = REPO / "tests" / "audit" / "data" / "osv"


def test_findings_become_cyclonedx_vulnerabilities_of_the_locked_components() -> None:
    audit = run_audit(AuditOptions(LOCK, OfflineDatabase.open(DB), Threshold.parse("none"), ("PYSEC-2026-141",)))
    result = build_sbom(LOCK, audit=audit)
    doc = result.document
    refs = {c["bom-ref"]: (c["name"], c["version"]) for c in doc["components"]}
    vulns = doc["vulnerabilities"]
    assert result.vulnerabilities == len(vulns) == len(audit.findings) == 8
    for v in vulns:  # every finding points at a component of this very document
        (ref,) = [a["ref"] for a in v["affects"]]
        assert ref in refs and refs[ref][1] == v["affects"][0]["versions"][0]["version"]
    u = next(v for v in vulns if v["id"] == "GHSA-38jv-5279-wg99")
    assert refs[u["affects"][0]["ref"]] == ("urllib3", "1.26.20")
    assert {r["id"] for r in u["references"]} == {"CVE-2026-21441", "PYSEC-2026-1996"}
    assert u["ratings"] == [{"severity": "high", "score": 7.5, "method": "CVSSv31",
                             "vector": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H",
                             "source": {"name": "OSV", "url": "https://osv.dev/vulnerability/GHSA-38jv-5279-wg99"}}]
    assert u["recommendation"] == "Upgrade urllib3 to 2.6.3"
    assert next(v for v in vulns if v["id"] == "PYSEC-2026-141")["analysis"]["response"] == ["will_not_fix"]
    assert next(v for v in vulns if v["id"] == "PYSEC-2026-139")["recommendation"].startswith("No fixed release")
    assert any(p["name"] == "envbuilder:audit-database" for p in doc["metadata"]["properties"])
    # same inputs, same bytes
    assert json.dumps(build_sbom(LOCK, audit=audit).document, sort_keys=True) == json.dumps(doc, sort_keys=True)


def test_an_audit_of_another_lock_is_refused() -> None:
    audit = run_audit(AuditOptions(LOCK, OfflineDatabase.open(DB), Threshold.parse("none")))
    with pytest.raises(SbomError, match="not of"):
        build_sbom(REPO / "locks" / "v2.3.1", audit=audit)


def test_cli_sbom_audit(tmp_path: Path) -> None:
    audit = tmp_path / "audit.json"
    run = [sys.executable, "-m", "envbuilder"]
    got = subprocess.run([*run, "audit", str(LOCK), "--db", str(DB), "--fail-on", "none", "-o", str(audit)],
                         capture_output=True, text=True, check=False)
    assert got.returncode == 0, got.stderr
    out = tmp_path / "sbom.cdx.json"
    got = subprocess.run([*run, "sbom", str(LOCK), "--audit", str(audit), "-o", str(out), "--json"],
                         capture_output=True, text=True, check=False)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["vulnerabilities"] == 8
    assert len(json.loads(out.read_text())["vulnerabilities"]) == 8
    audit.write_text("{}", encoding="utf-8")
    bad = subprocess.run([*run, "sbom", str(LOCK), "--audit", str(audit), "-o", str(out)], capture_output=True,
                         text=True, check=False)
    assert bad.returncode == 99 and "audit report" in bad.stderr
