"""`envbuilder audit` as a user types it: a committed lock against an offline OSV database of synthetic records
written at test time (tests/audit/osv_records.py: the OSV service cannot be reached here, and real advisory
records may not be committed). This is the audit CI runs on every change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from audit import osv_records as osv

from envbuilder.audit import AuditReport
from envbuilder.audit.severity import LEVELS, Severity, Threshold

REPO = Path(__file__).resolve().parents[2]
# the v2.3.0 lock as committed before its security overrides (main at 1b77323: urllib3 1.26.20, cryptography
# 42.0.8); locks/v2.3.0 now takes the fixed releases, tests/lock/test_lock_security.py
LOCK = REPO / "tests" / "audit" / "data" / "lock-v2.3.0"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", "audit", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, check=False, timeout=300)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(osv.write_db(tmp_path_factory.mktemp("osv")))


def _reaching(level: str) -> list[osv.Expected]:
    """The expected findings a --fail-on LEVEL reaches."""
    t = Threshold.parse(level)
    return [e for e in osv.LOCK_FINDINGS if t.reached_by(Severity(e.level, e.score))]


def test_audit_of_v2_3_0_lists_the_advisories_and_fails_on_them(db: str) -> None:
    got = _run(str(LOCK), "--db", db)
    assert got.returncode == 98, got.stderr  # VulnerabilitiesFoundError: findings at or above --fail-on low
    lines = got.stdout.splitlines()
    row = next(line for line in lines if osv.URLLIB3_GH in line)  # urllib3, CVE-0000-0001, both records merged
    assert all(s in row for s in (f"high {osv.V_HIGH_7_5[1]}", "urllib3", osv.LOCKED["urllib3"], "CVE-0000-0001",
                                  osv.URLLIB3_PYPA, "2.6.3"))
    assert any(osv.CRYPTO_GH in line and "cryptography" in line and "46.0.5" in line for line in lines)
    assert not any(osv.JINJA2_WITHDRAWN in line or osv.URLLIB3_TWO_INTERVALS in line for line in lines)
    assert "error: " in got.stderr and "--fail-on low" in got.stderr and "fix: " in got.stderr
    assert "database: " in got.stderr and f"{len(osv.IDS)} records" in got.stderr


def test_json_report_is_deterministic_and_typed(tmp_path: Path, db: str) -> None:
    a = _run(str(LOCK), "--db", db, "--json", "--fail-on", "none", "-o", str(tmp_path / "audit.json"))
    b = _run("--lock", str(LOCK), "--db", db, "--json", "--fail-on", "none")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout == (tmp_path / "audit.json").read_text(encoding="utf-8")
    report = AuditReport.from_json(a.stdout)
    assert report.row == "v2.3.0" and report.packages == 395
    assert report.lock_sha256 == json.loads((LOCK / "envbuilder.lock.json").read_text())["lock_sha256"]
    assert report.database["kind"] == "offline" and report.database["records"] == len(osv.IDS)
    assert report.database["withdrawn"] == 1
    # most severe first, then by package and id
    expected = sorted(osv.LOCK_FINDINGS, key=lambda e: (-LEVELS.index(e.level), e.package, e.id))
    assert [(f.package, f.id) for f in report.findings] == [(e.package, e.id) for e in expected]
    doc = json.loads(a.stdout)
    assert doc["counts"] == {lvl: sum(e.level == lvl for e in osv.LOCK_FINDINGS) for lvl in (*LEVELS, "unknown")}
    assert doc["failing"] == 0
    first = doc["findings"][0]
    assert set(first) == {"id", "aliases", "package", "version", "fixed", "severity", "summary", "modified",
                          "ignored", "url"}


def test_threshold_and_ignore(db: str) -> None:
    critical = _run(str(LOCK), "--db", db, "--fail-on", "critical").returncode
    assert critical == (98 if _reaching("critical") else 0)
    assert _reaching("high") and _run(str(LOCK), "--db", db, "--fail-on", "high").returncode == 98
    doc = json.loads(_run(str(LOCK), "--db", db, "--json", "--fail-on", "none").stdout)
    high = [f["id"] for f in doc["findings"] if f["severity"]["level"] in ("high", "critical")]
    assert sorted(high) == sorted(e.id for e in _reaching("high"))
    ignore = [a for i in high for a in ("--ignore", i)]
    got = _run(str(LOCK), "--db", db, "--fail-on", "high", *ignore, "--ignore", "CVE-1999-0001")
    assert got.returncode == 0, got.stderr
    assert "(ignored)" in got.stdout and "CVE-1999-0001 matched no finding" in got.stderr
    # an alias accepts its finding too: CVE-0000-0001 is the urllib3 finding shown as URLLIB3_GH
    doc = json.loads(_run(str(LOCK), "--db", db, "--json", "--fail-on", "none", "--ignore", "CVE-0000-0001").stdout)
    assert next(f for f in doc["findings"] if f["id"] == osv.URLLIB3_GH)["ignored"] is True
    # a score: only findings of at least 8.0 (the torch and transformers records score 8.8) fail
    over = _run(str(LOCK), "--db", db, "--json", "--fail-on", "8.0")
    assert over.returncode == 98 and json.loads(over.stdout)["failing"] == len(_reaching("8.0"))  # one document
    assert 0 < len(_reaching("8.0")) < len(_reaching("high"))


def test_bad_input_is_refused_with_its_own_code(tmp_path: Path, db: str) -> None:
    assert _run(str(LOCK), "--db", db, "--fail-on", "nan").returncode == 18
    assert _run(str(LOCK), "--db", db, "--osv-url", "http://127.0.0.1:9").returncode == 18
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
    got = _run(str(lock), "--db", db)
    assert got.returncode == 19 and "uv.lock" in got.stderr


def test_unreachable_service_says_how_to_audit_offline() -> None:
    got = _run(str(LOCK), "--osv-url", "http://127.0.0.1:9")  # discard port: nothing listens
    assert got.returncode == 15, got.stderr
    assert "cannot be reached" in got.stderr and "--db" in got.stderr
