"""The nightly's audit step: every row's lock against OSV, every night (resumed rows too), its report
feeding the SBOM and the dashboard. Real `envbuilder nightly step audit` runs on a committed lock against an
offline database of synthetic records written at test time (tests/audit/osv_records.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from audit import osv_records as osv

from envbuilder.audit.severity import Severity, Threshold
from envbuilder.nightly.pipeline import NightlyOptions, report_args
from envbuilder.nightly.steps import RowConfig, command

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return osv.write_db(tmp_path_factory.mktemp("osv"))


def test_audit_is_a_step_and_feeds_the_sbom(db: Path) -> None:
    cfg = RowConfig(row="v2.3.0", audit_db=db, audit_fail_on="high")
    assert cfg.steps()[:3] == ["lock-check", "audit", "build"]
    assert command(cfg, "audit") == ["audit", "locks/v2.3.0", "--json", "-o", "build/nightly/v2.3.0/audit.json",
                                     "--fail-on", "high", "--db", str(db)]
    assert command(cfg, "sbom")[-2:] == ["--audit", "build/nightly/v2.3.0/audit.json"]
    off = RowConfig(row="v2.3.0", audit=False)
    assert "audit" not in off.steps() and "--audit" not in command(off, "sbom")


def test_report_reads_the_audits_when_there_are_some(tmp_path: Path) -> None:
    template = RowConfig(row="", output=tmp_path)
    opts = NightlyOptions(["v2.3.0"], template)
    assert "--audit" not in report_args(opts)
    (tmp_path / "v2.3.0").mkdir()
    (tmp_path / "v2.3.0" / "audit.json").write_text("{}")
    args = report_args(opts)
    assert args[args.index("--audit") + 1] == str(tmp_path)


def _step(tmp: Path, db: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", "nightly", "step", "audit", "--row", "v2.3.0",
                           "--locks", str(tmp / "locks"), "-o", str(tmp / "out"), "--audit-db", str(db), *extra],
                          capture_output=True, text=True, cwd=REPO, check=False, timeout=300)


def test_the_step_writes_the_report_and_fails_the_row_only_when_asked(tmp_path: Path, db: Path) -> None:
    # the v2.3.0 lock as committed before its security overrides (urllib3 1.26.20, cryptography 42.0.8)
    shutil.copytree(REPO / "tests" / "audit" / "data" / "lock-v2.3.0", tmp_path / "locks" / "v2.3.0")
    ok = _step(tmp_path, db)
    assert ok.returncode == 0, ok.stderr
    report = json.loads((tmp_path / "out" / "v2.3.0" / "audit.json").read_text())
    assert report["fail_on"] == "none"
    assert sorted(f["id"] for f in report["findings"]) == sorted(e.id for e in osv.LOCK_FINDINGS)
    assert "$ envbuilder audit" in (tmp_path / "out" / "v2.3.0" / "logs" / "audit.log").read_text()
    assert any(Threshold.parse("high").reached_by(Severity(e.level, e.score)) for e in osv.LOCK_FINDINGS)
    strict = _step(tmp_path, db, "--audit-fail-on", "high")
    assert strict.returncode == 98 and "audit: failed" in strict.stderr
    assert _step(tmp_path, db, "--audit-fail-on", "nan").returncode == 18
