"""The nightly's audit step: every row's lock against OSV, every night (resumed rows too), its report
feeding the SBOM and the dashboard. Real `envbuilder nightly step audit` runs on a committed lock against the
committed offline database (tests/audit/data/osv)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from envbuilder.nightly.pipeline import NightlyOptions, report_args
from envbuilder.nightly.steps import RowConfig, command

REPO = Path(__file__).resolve().parents[2]
DB = REPO / "tests" / "audit" / "data" / "osv"


def test_audit_is_a_step_and_feeds_the_sbom() -> None:
    cfg = RowConfig(row="v2.3.0", audit_db=DB, audit_fail_on="high")
    assert cfg.steps()[:3] == ["lock-check", "audit", "build"]
    assert command(cfg, "audit") == ["audit", "locks/v2.3.0", "--json", "-o", "build/nightly/v2.3.0/audit.json",
                                     "--fail-on", "high", "--db", str(DB)]
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


def _step(tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", "nightly", "step", "audit", "--row", "v2.3.0",
                           "--locks", str(tmp / "locks"), "-o", str(tmp / "out"), "--audit-db", str(DB), *extra],
                          capture_output=True, text=True, cwd=REPO, check=False, timeout=300)


def test_the_step_writes_the_report_and_fails_the_row_only_when_asked(tmp_path: Path) -> None:
    # the v2.3.0 lock as committed before its security overrides (urllib3 1.26.20, cryptography 42.0.8)
    shutil.copytree(REPO / "tests" / "audit" / "data" / "lock-v2.3.0", tmp_path / "locks" / "v2.3.0")
    ok = _step(tmp_path)
    assert ok.returncode == 0, ok.stderr
    report = json.loads((tmp_path / "out" / "v2.3.0" / "audit.json").read_text())
    assert report["fail_on"] == "none" and len(report["findings"]) == 8
    assert "$ envbuilder audit" in (tmp_path / "out" / "v2.3.0" / "logs" / "audit.log").read_text()
    strict = _step(tmp_path, "--audit-fail-on", "high")
    assert strict.returncode == 98 and "audit: failed" in strict.stderr
    assert _step(tmp_path, "--audit-fail-on", "nan").returncode == 18
