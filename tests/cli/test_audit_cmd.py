"""`envbuilder audit` as a user types it: a committed lock against the committed offline OSV database
(real PyPA and GitHub advisories, tests/audit/data/README.md). This is the audit CI runs on every change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from envbuilder.audit import AuditReport

REPO = Path(__file__).resolve().parents[2]
DB = REPO / "tests" / "audit" / "data" / "osv"
# the v2.3.0 lock as committed before its security overrides (main at 1b77323: urllib3 1.26.20, cryptography
# 42.0.8); locks/v2.3.0 now takes the fixed releases, tests/lock/test_lock_security.py
LOCK = REPO / "tests" / "audit" / "data" / "lock-v2.3.0"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", "audit", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, check=False, timeout=300)


def test_audit_of_v2_3_0_lists_real_advisories_and_fails_on_them() -> None:
    got = _run(str(LOCK), "--db", str(DB))
    assert got.returncode == 98, got.stderr  # VulnerabilitiesFoundError: findings at or above --fail-on low
    lines = got.stdout.splitlines()
    row = next(line for line in lines if "GHSA-38jv-5279-wg99" in line)  # urllib3, CVE-2026-21441
    assert all(s in row for s in ("high 7.5", "urllib3", "1.26.20", "CVE-2026-21441", "PYSEC-2026-1996", "2.6.3"))
    assert any("GHSA-r6ph-v2qm-q3c2" in line and "cryptography" in line and "46.0.5" in line for line in lines)
    assert "error: " in got.stderr and "--fail-on low" in got.stderr and "fix: " in got.stderr
    assert "database: " in got.stderr and "13 records" in got.stderr


def test_json_report_is_deterministic_and_typed(tmp_path: Path) -> None:
    a = _run(str(LOCK), "--db", str(DB), "--json", "--fail-on", "none", "-o", str(tmp_path / "audit.json"))
    b = _run("--lock", str(LOCK), "--db", str(DB), "--json", "--fail-on", "none")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout == (tmp_path / "audit.json").read_text(encoding="utf-8")
    report = AuditReport.from_json(a.stdout)
    assert report.row == "v2.3.0" and report.packages == 395
    assert report.lock_sha256 == json.loads((LOCK / "envbuilder.lock.json").read_text())["lock_sha256"]
    assert report.database["kind"] == "offline" and report.database["records"] == 13
    assert [(f.package, f.id) for f in report.findings] == [  # most severe first, then by package
        ("cryptography", "GHSA-r6ph-v2qm-q3c2"), ("torch", "PYSEC-2025-189"), ("torch", "PYSEC-2026-139"),
        ("torch", "PYSEC-2026-2286"), ("transformers", "PYSEC-2026-2288"), ("urllib3", "GHSA-38jv-5279-wg99"),
        ("torch", "PYSEC-2025-191"), ("urllib3", "PYSEC-2026-141")]
    doc = json.loads(a.stdout)
    assert doc["counts"] == {"critical": 0, "high": 6, "medium": 2, "low": 0, "none": 0, "unknown": 0}
    assert doc["failing"] == 0
    first = doc["findings"][0]
    assert set(first) == {"id", "aliases", "package", "version", "fixed", "severity", "summary", "modified",
                          "ignored", "url"}


def test_threshold_and_ignore() -> None:
    assert _run(str(LOCK), "--db", str(DB), "--fail-on", "critical").returncode == 0  # nothing critical
    assert _run(str(LOCK), "--db", str(DB), "--fail-on", "high").returncode == 98
    doc = json.loads(_run(str(LOCK), "--db", str(DB), "--json", "--fail-on", "none").stdout)
    high = [f["id"] for f in doc["findings"] if f["severity"]["level"] == "high"]
    ignore = [a for i in high for a in ("--ignore", i)]
    got = _run(str(LOCK), "--db", str(DB), "--fail-on", "high", *ignore, "--ignore", "CVE-1999-0001")
    assert got.returncode == 0, got.stderr
    assert "(ignored)" in got.stdout and "CVE-1999-0001 matched no finding" in got.stderr
    # an alias accepts its finding too: CVE-2026-21441 is GHSA-38jv-5279-wg99
    doc = json.loads(_run(str(LOCK), "--db", str(DB), "--json", "--fail-on", "none", "--ignore",
                          "CVE-2026-21441").stdout)
    assert next(f for f in doc["findings"] if f["id"] == "GHSA-38jv-5279-wg99")["ignored"] is True
    over_json = _run(str(LOCK), "--db", str(DB), "--json", "--fail-on", "8.0")  # PYSEC-2026-2286 is 8.8
    assert over_json.returncode == 98 and json.loads(over_json.stdout)["failing"] > 0  # one JSON document


def test_bad_input_is_refused_with_its_own_code(tmp_path: Path) -> None:
    assert _run(str(LOCK), "--db", str(DB), "--fail-on", "nan").returncode == 18
    assert _run(str(LOCK), "--db", str(DB), "--osv-url", "http://127.0.0.1:9").returncode == 18
    assert _run(str(LOCK), "--osv-url", "file:///etc/passwd").returncode == 18
    bad_db = tmp_path / "db.jsonl"
    bad_db.write_text('{"id": 1}\n', encoding="utf-8")
    got = _run(str(LOCK), "--db", str(bad_db))
    assert got.returncode == 99 and "not an OSV record" in got.stderr
    # an edited uv.lock no longer matches its record: the audit would describe another lock
    lock = tmp_path / "lock"
    shutil.copytree(LOCK, lock)
    with open(lock / "uv.lock", "a", encoding="utf-8") as fh:
        fh.write("\n")
    got = _run(str(lock), "--db", str(DB))
    assert got.returncode == 19 and "uv.lock" in got.stderr


def test_unreachable_service_says_how_to_audit_offline() -> None:
    got = _run(str(LOCK), "--osv-url", "http://127.0.0.1:9")  # discard port: nothing listens
    assert got.returncode == 15, got.stderr
    assert "cannot be reached" in got.stderr and "--db" in got.stderr
