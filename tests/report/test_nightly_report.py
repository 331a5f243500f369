"""The dashboard: collect, history, regression gate, static site; and a real headless Chromium load.

Inputs are the real device certificates in bench/results/ (H100 x1, H200 x2, H200 x4). Later
nights are derived from them by changing one measured number, which is what a regression is.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from golden_files import updating

from envbuilder.certify.certificate import Certificate
from envbuilder.errors import ReportInputError
from envbuilder.report import ReportOptions, build_report
from envbuilder.report.gate import find_regressions
from envbuilder.report.metrics import metrics_of

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "results"
H100 = BENCH / "certify-h100" / "certificate.json"
ARTIFACTS = REPO / "build" / "test-artifacts"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300, env=os.environ.copy())


def _night(tmp: Path, name: str, cert: dict, scale: float = 1.0, gpu: str | None = None) -> Path:
    """A certificate like H100's with every tokens/s scaled (and optionally another GPU model)."""
    c = copy.deepcopy(cert)
    for ch in c["checks"]:
        if isinstance(ch.get("measured"), dict) and "tokens_per_s" in ch["measured"]:
            ch["measured"]["tokens_per_s"] = round(ch["measured"]["tokens_per_s"] * scale)
    if gpu:
        for g in c["host"]["gpus"]:
            g["name"] = gpu
    d = tmp / name
    d.mkdir()
    (d / "certificate.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
    return d / "certificate.json"


class _Grid(HTMLParser):
    """rows (data-row, data-status) and cells (data-check, data-status) of #grid, from a DOM dump."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str | None]] = []
        self.cells: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and "data-row" in a:
            self.rows.append(a)
            self.cells = []
        if tag == "td" and "data-check" in a:
            self.rows[-1].setdefault("cells", "")
            self.rows[-1]["cells"] = f"{self.rows[-1]['cells']}|{a['data-check']}={a['data-status']}"


def test_metrics_from_a_real_certificate() -> None:
    m = metrics_of(Certificate.read(BENCH / "certify-h200x2" / "certificate.json"))
    assert m["gemm_tflops:gemm-bf16"] == 669.0
    assert m["nccl_busbw_gbps:nccl-allreduce-2gpu"] == 332.7
    assert m["tokens_per_s:parallel:dp2-distopt"] == 417270.0


def test_gate_threshold() -> None:
    prev = {"gemm_tflops:gemm-bf16": 100.0, "nccl_busbw_gbps:x": 300.0, "tokens_per_s:a": 1000.0}
    cur = {"gemm_tflops:gemm-bf16": 89.0, "nccl_busbw_gbps:x": 291.0, "tokens_per_s:a": 2000.0, "new": 1.0}
    regs = find_regressions(cur, prev, 10.0)
    assert [r.metric for r in regs] == ["gemm_tflops:gemm-bf16"] and round(regs[0].drop_pct, 1) == 11.0
    assert [r.metric for r in find_regressions(cur, prev, 2.0)] == ["gemm_tflops:gemm-bf16", "nccl_busbw_gbps:x"]
    assert find_regressions(cur, prev, 11.5) == []


def test_site_from_bench_results_is_deterministic(tmp_path: Path) -> None:
    a = build_report(ReportOptions([BENCH], tmp_path / "a"))
    build_report(ReportOptions([BENCH], tmp_path / "b"))
    labels = [r["label"] for r in a.rows]
    assert labels == sorted(labels) and len(set(labels)) == len(labels) == len(list(BENCH.glob("*/certificate.json")))
    assert {"device-cuda-image · L1 · 1 × NVIDIA H100 80GB HBM3", "device-cuda-image · L2 · 2 × NVIDIA H200",
            "device-cuda-image · L2 · 4 × NVIDIA H200"} <= set(labels)
    for rel in ("index.html", "style.css", f"rows/{a.rows[0]['slug']}/index.html"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    h200x2 = next(r for r in a.rows if r["label"] == "device-cuda-image · L2 · 2 × NVIDIA H200")
    page = (tmp_path / "a" / "rows" / h200x2["slug"] / "index.html").read_text()
    assert page.count("<svg") == 3 and "parallel:tp2-sp" in page  # three loss curves on the H200 x2 page
    assert "<script" not in (tmp_path / "a" / "index.html").read_text()
    hist = json.loads((tmp_path / "a" / "history.json").read_text())
    assert len(hist["entries"]) == len(labels)


def test_regression_against_previous_night_same_gpu(tmp_path: Path) -> None:
    cert = json.loads(H100.read_text())
    site, hist = tmp_path / "site", tmp_path / "history.json"
    build_report(ReportOptions([_night(tmp_path, "n1", cert)], site, hist))
    # night 2: 20% slower on the same GPU model -> regressed; on another GPU model -> no previous
    slow = _night(tmp_path, "n2", cert, scale=0.8)
    other = _night(tmp_path, "n2b", cert, scale=0.5, gpu="NVIDIA A100-SXM4-80GB")
    r2 = build_report(ReportOptions([slow, other], site, hist))
    by = {r["gpu_model"]: r for r in r2.rows}
    regs = by["NVIDIA H100 80GB HBM3"]["regressions"]
    assert {g["metric"] for g in regs} == {"tokens_per_s:pretrain:torch-gpt-1gpu",
                                           "tokens_per_s:pretrain:mcore-gpt-1gpu"}
    assert all(19.9 < g["drop_pct"] < 20.1 for g in regs)
    assert by["NVIDIA A100-SXM4-80GB"]["perf"] == "no previous"
    index = (site / "index.html").read_text()
    assert 'data-perf="regressed"' in index and "−20.0%" in index
    row_page = (site / "rows" / by["NVIDIA H100 80GB HBM3"]["slug"] / "index.html").read_text()
    assert "▼ regressed" in row_page
    # the same night reported again compares with night 1 (not with itself); a looser threshold passes
    again = build_report(ReportOptions([slow], site, hist, threshold_pct=25.0))
    assert again.rows[0]["regressions"] == [] and again.rows[0]["perf"] == "ok"
    assert len(json.loads(hist.read_text())["entries"]) == 3
    gated = _cli("report", str(slow), "-o", str(site), "--history", str(hist), "--gate")
    assert gated.returncode == 94, gated.stderr
    assert "regression" in gated.stderr and "Traceback" not in gated.stderr
    assert _cli("report", str(slow), "-o", str(site), "--history", str(hist), "--gate",
                "--threshold", "30").returncode == 0


def test_refuses_to_replace_a_directory_that_is_not_a_dashboard(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ReportInputError, match="not an envbuilder dashboard"):
        build_report(ReportOptions([BENCH], mine))
    assert (mine / "notes.txt").read_text() == "keep me"
    with pytest.raises(ReportInputError, match=r"holds no certificate\.json"):
        build_report(ReportOptions([tmp_path / "mine"], tmp_path / "site"))
    bad = _cli("report", str(tmp_path / "nope"), "-o", str(tmp_path / "s2"))
    assert bad.returncode == 93 and "does not exist" in bad.stderr


needs_chromium = pytest.mark.skipif(not any(shutil.which(n) for n in ("chromium", "chromium-browser")),
                                    reason="chromium not installed (scripts/setup-host.sh installs it)")


@needs_chromium
def test_dashboard_in_headless_chromium(tmp_path: Path) -> None:
    from envbuilder.report.browser import check_page

    site = tmp_path / "site"
    res = build_report(ReportOptions([BENCH], site))
    shot = ARTIFACTS / "dashboard-bench.png"
    check = check_page(site / "index.html", screenshot=shot)
    assert check.console == [] and check.broken_links == [], check.to_dict()
    assert check.screenshot == shot.resolve() and shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    grid = _Grid()
    grid.feed(check.dom)  # the DOM Chromium built, not our HTML text
    assert [r["data-slug"] for r in grid.rows] == [r["slug"] for r in res.rows]
    assert all(r["data-status"] == "pass" for r in grid.rows)
    # the 26.04 host-torch night (its lock 680ef5149b15; the hermetic night of 26.04 is tagged with its own lock)
    h100 = str(next(r for r in grid.rows if r["data-slug"].endswith("-lock-680ef5149b15"))["cells"])
    assert "|overall=pass|" in h100 + "|" and "|kernel:flash-attn=not-installed" in h100
    assert "|pretrain:nemo-recipe=skipped" in h100 and "|nccl-allreduce-2gpu=not-run" in h100
    for r in res.rows:
        page = check_page(site / "rows" / r["slug"] / "index.html")
        assert page.ok, page.to_dict()
        assert 'id="certificate"' in page.dom


@needs_chromium
def test_browser_check_catches_console_errors_and_broken_links(tmp_path: Path) -> None:
    from envbuilder.report.browser import check_page

    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img src="gone.png"><a href="https://cdn.example/x.css">x</a>'
                   "<script>undefinedFn();</script></body></html>")
    check = check_page(bad)
    assert not check.ok
    assert any("undefinedFn" in m for m in check.console)
    assert "gone.png" in check.broken_links and any("not offline" in x for x in check.broken_links)




def test_the_committed_sample_dashboard_is_what_report_renders(tmp_path: Path) -> None:
    """Every page of bench/results/dashboard (the one golden copy of the dashboard) is what `envbuilder report`
    renders from the device certificates and their locks today.

    Regenerate: make dashboard-sample (or ENVBUILDER_UPDATE_GOLDEN=1 with this test)
    """
    sample = BENCH / "dashboard"
    if updating():
        shutil.rmtree(sample, ignore_errors=True)
        build_report(ReportOptions([BENCH], sample, locks=BENCH))
    res = build_report(ReportOptions([BENCH], tmp_path / "site", locks=BENCH))
    fresh = {"index.html": (tmp_path / "site" / "index.html").read_text()}
    for r in res.rows:
        fresh[f"rows/{r['slug']}/index.html"] = (tmp_path / "site" / "rows" / r["slug"] / "index.html").read_text()
    assert sorted(fresh) == sorted(str(p.relative_to(sample)) for p in sample.rglob("index.html"))
    for rel, text in fresh.items():
        assert (sample / rel).read_text() == text, f"{sample / rel} is stale; run make dashboard-sample"


def test_a_certificate_of_an_overridden_lock_is_labelled_with_the_lock(tmp_path: Path) -> None:
    """The 26.04 device runs certified a v2.7.3 lock made with --set torch==2.11.0, transformer-engine==2.14.1,
    nemo-toolkit==none, ...: that is not the v2.7.3 stack, and the dashboard used to label it "v2.7.3"."""
    res = build_report(ReportOptions([BENCH / "certify-26.04-h100"], tmp_path / "site", locks=BENCH))
    (row,) = res.rows
    assert row["row"] == "v2.7.3+set-48412a9bd209" and row["label"].startswith("v2.7.3+set-48412a9bd209 · L1")
    # without the lock the report cannot tell, and says the row; a new certificate names its lock itself
    plain = build_report(ReportOptions([BENCH / "certify-26.04-h100"], tmp_path / "plain"))
    assert plain.rows[0]["row"] == "v2.7.3"


def test_dashboard_shows_each_rows_audit_escaped(tmp_path: Path) -> None:
    """report --audit: a row whose certificate's lock was audited shows its findings (count on the grid, a table
    on its page, audit.json beside it); a row without one says so; advisory text is escaped, and an id that is
    not a plain OSV id gets no link."""
    from dataclasses import replace

    from audit import osv_records as osv

    from envbuilder.audit import AuditOptions, OfflineDatabase, Threshold, run_audit

    lock = REPO / "tests" / "audit" / "data" / "lock-v2.3.0"  # before its security overrides: findings to show
    # synthetic OSV records written here (tests/audit/osv_records.py)
    audit = run_audit(AuditOptions(lock, OfflineDatabase.open(osv.write_db(tmp_path / "osv")),
                                   Threshold.parse("high")))
    findings = len(osv.LOCK_FINDINGS) + 1  # and the hostile one
    failing = sum(e.level in ("high", "critical") for e in osv.LOCK_FINDINGS) + 1
    hostile = replace(audit.findings[0], id='X"><script>alert(1)</script>', summary="<img src=x onerror=alert(2)>")
    audit = replace(audit, findings=(*audit.findings, hostile))
    (tmp_path / "audits").mkdir()
    (tmp_path / "audits" / "audit.json").write_text(audit.to_json(), encoding="utf-8")
    h100 = json.loads(H100.read_text())
    audited = _night(tmp_path, "a", {**h100, "lock_sha256": audit.lock_sha256})
    other = _night(tmp_path, "b", h100, gpu="NVIDIA H200")
    res = build_report(ReportOptions([audited, other], tmp_path / "site", audits=(tmp_path / "audits",)))
    by_sha = {r["certificate_sha256"]: r for r in res.rows}
    row = next(r for r in res.rows if r["audit"] is not None)
    assert row["audit"]["findings"] == findings and row["audit"]["failing"] == failing
    assert row["audit"]["fail_on"] == "high" and 1 < failing < findings
    assert sum(r["audit"] is None for r in by_sha.values()) == 1
    index = (tmp_path / "site" / "index.html").read_text()
    assert "known vulnerabilities" in index and f'data-vulnerabilities="{findings}"' in index and "not audited" in index
    page_dir = tmp_path / "site" / "rows" / row["slug"]
    page = (page_dir / "index.html").read_text()
    assert (page_dir / "audit.json").read_text() == audit.to_json()
    assert f'<a href="https://osv.dev/vulnerability/{osv.URLLIB3_GH}">{osv.URLLIB3_GH}</a>' in page
    assert "<script>" not in page and "<img src=x" not in page and "&lt;img src=x" in page
    assert 'href="https://osv.dev/vulnerability/X' not in page  # the hostile id is text, not a link
    # without --audit the dashboard has no audit column (and its golden bytes stay as they were)
    plain = build_report(ReportOptions([audited], tmp_path / "plain"))
    assert "audit" not in plain.rows[0]
    assert "known vulnerabilities" not in (tmp_path / "plain" / "index.html").read_text()


def test_two_locks_of_one_row_gpus_and_level_are_two_results_and_one_lock_twice_is_refused(tmp_path: Path) -> None:
    """26.04 certified from its host-torch lock and from its hermetic lock on one H100 at level 1: two entries,
    each tagged with its lock (label and page); the same lock's certificate twice is one night named twice."""
    from envbuilder.errors import ReportInputError
    from envbuilder.report.collect import collect

    host_torch, hermetic = BENCH / "certify-26.04-h100-bundle", BENCH / "certify-26.04-hermetic-h100"
    entries = collect([host_torch / "certificate.json", hermetic / "certificate.json"])
    assert sorted(e.lock_tag or "" for e in entries) == ["532dffcfed88", "680ef5149b15"]
    assert len({e.slug for e in entries}) == 2 and all(e.label.endswith(f" · lock {e.lock_tag}") for e in entries)
    alone = collect([hermetic / "certificate.json"])
    assert alone[0].lock_tag is None and "lock" not in alone[0].slug  # no other lock: the row's own page
    copy = tmp_path / "again" / "certificate.json"
    copy.parent.mkdir()
    copy.write_bytes((hermetic / "certificate.json").read_bytes())
    with pytest.raises(ReportInputError, match="same row on the same GPUs and level"):
        collect([hermetic / "certificate.json", copy])
