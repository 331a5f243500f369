"""The whole local nightly path on CPU with the smoke row, as `make nightly` runs it:
plan -> lock --check -> build -> sbom -> export sqsh + sif -> certify --cpu (signed) -> verify-cert --key
-> report (regression gate) -> headless Chromium check; then a re-run resumes (skips the row).

Reuses the session's smoke lock and image (tests/conftest.py): the build step finds the image built
from this very lock and does not rebuild it; exports are uncompressed (--compression none) to keep CI
time down (compression itself is the export tests' business). Real Docker engine, real mksquashfs, real uv, real
Chromium; nothing is faked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from audit import osv_records

pytestmark = [pytest.mark.integration, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "test-artifacts"
WHEELS = Path("/opt/wheels")


def _envbuilder(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


class _Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-row"):
            self.rows[str(a["data-row"])] = str(a.get("data-status"))


def test_local_nightly_path_on_cpu_with_the_smoke_row(smoke_lockdir: Path, smoke_image: str,
                                                       debian_base_image: str, tmp_path: Path) -> None:
    # the committed-locks layout: LOCKS/<row>/ (a copy of the session's smoke lock, local wheels included)
    locks = tmp_path / "locks"
    shutil.copytree(smoke_lockdir, locks / "smoke")
    out = tmp_path / "nightly"
    plan = _envbuilder("nightly", "plan", "--rows", "smoke", "--level", "1")
    assert plan.returncode == 0, plan.stderr
    assert [r["row"] for r in json.loads(plan.stdout)["include"]] == ["smoke"]
    keys = json.loads(_envbuilder("keygen", "-o", str(tmp_path / "keys"), "--json").stdout)

    lock_args = ["--lock-arg=--find-links", f"--lock-arg={WHEELS}"] if any(WHEELS.glob("torch-*.whl")) else []
    common = ["--rows", "smoke", "--level", "1", "--cpu", "--steps", "10", "--parallel", "2", "-o", str(out),
              "--locks", str(locks), "--tag", "envbuilder-test/{row}:{lock12}", "--base", debian_base_image,
              "--build-arg=--no-scan", "--export-arg=--compression", "--export-arg=none",
              "--sign", keys["private"], "--key", keys["public"], *lock_args,
              "--browser-check", "--json",
              # the audit against an offline OSV database of synthetic records (tests/audit/osv_records.py:
              # the OSV service is not reachable here)
              "--audit-db", str(osv_records.write_db(tmp_path / "osv"))]
    run = _envbuilder("nightly", "run", *common)
    assert run.returncode == 0, run.stderr[-6000:]
    summary = json.loads(run.stdout)
    row = summary["rows"][0]
    assert row["status"] == "certified" and row["tag"] == smoke_image, row
    steps = {s["step"]: s["status"] for s in row["steps"]}
    assert steps == {"lock-check": "ok", "audit": "ok", "build": "cached", "sbom": "ok", "export-sqsh": "ok",
                     "export-sif": "ok", "certify": "ok", "verify": "ok"}
    audit = json.loads((out / "smoke" / "audit.json").read_text())
    assert audit["row"] == "smoke" and audit["database"]["kind"] == "offline" and audit["fail_on"] == "none"
    assert summary["report"]["status"] == "ok"

    cert_dir = out / "smoke" / "cert"
    cert = json.loads((cert_dir / "certificate.json").read_text())
    assert cert["status"] == "pass" and cert["row"] == "smoke" and cert["artifact"]["kind"] == "image"
    assert cert["artifact"]["sbom"]["name"] == "sbom.cdx.json"
    sbom = json.loads((cert_dir / "sbom.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.5"
    purls = [c.get("purl", "") for c in sbom["components"]]
    assert "torch" in {c["name"] for c in sbom["components"]}  # from uv export of the lock (a local wheel: no purl)
    assert any(p.startswith("pkg:pypi/einops@") for p in purls)
    assert any(p.startswith("pkg:deb/debian/python3") for p in purls)  # from the image's dpkg database
    assert len(sbom["vulnerabilities"]) == len(audit["findings"])  # the audit's findings, in CycloneDX
    assert (out / "smoke" / "smoke.sqsh").stat().st_size > 0 and (out / "smoke" / "smoke.sif").stat().st_size > 0

    # the DSSE statement's subject is the image digest; verify-cert --key holds and rejects an edit
    verify = ["verify-cert", str(cert_dir / "certificate.json"), "--lock", str(locks / "smoke"), "--image",
              smoke_image, "--key", keys["public"], "--json"]
    ok = _envbuilder(*verify)
    assert ok.returncode == 0, ok.stderr
    signed = json.loads(ok.stdout)["signature"]
    assert signed["subject"]["digest"]["sha256"] == cert["artifact"]["digest"].removeprefix("sha256:")

    # the dashboard: one row, passed, signed; loaded in Chromium with no console messages
    site = out / "site"
    index = (site / "index.html").read_text()
    rows = _Rows()
    rows.feed(index)
    assert rows.rows == {"smoke": "pass"}
    assert "signed ✓" in index
    row_page = (site / "rows" / json.loads((site / "dashboard.json").read_text())["rows"][0]["slug"] / "index.html")
    assert 'data-curve="pretrain:torch-gpt-cpu-dp2"' in row_page.read_text()  # the CPU pretrain's loss curve
    assert 'id="vulnerabilities"' in row_page.read_text() and "known vulnerabilities" in index
    assert (row_page.parent / "audit.json").is_file()
    browser = json.loads((site / "dashboard.json").read_text())
    assert browser["rows"][0]["status"] == "pass"
    shot = out / "dashboard.png"
    assert shot.read_bytes()[:4] == b"\x89PNG"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "nightly-smoke-dashboard.png")
    history = json.loads((out / "history.json").read_text())
    assert [e["row"] for e in history["entries"]] == ["smoke"]

    # a re-run resumes: the certificate still matches lock and image, so nothing is rebuilt or re-certified
    again = _envbuilder("nightly", "run", *common)
    assert again.returncode == 0, again.stderr[-4000:]
    resumed = json.loads(again.stdout)["rows"][0]
    assert resumed["status"] == "resumed" and [s["step"] for s in resumed["steps"]] == ["audit"]  # every night

    # an edited certificate no longer verifies against its signature
    (cert_dir / "certificate.json").write_text(json.dumps({**cert, "level": 2}, indent=2, sort_keys=True) + "\n")
    forged = _envbuilder(*verify)
    assert forged.returncode == 91, forged.stderr
