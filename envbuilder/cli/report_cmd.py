"""`envbuilder report`: a static dashboard, history and regression gate from certificates."""

from __future__ import annotations

from pathlib import Path

import click

from envbuilder.cli.options import json_option, threshold_option
from envbuilder.console import emit_json, stderr_console
from envbuilder.errors import DashboardBrowserError, RegressionError


@click.command()
@click.argument("certs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Site directory (replaced whole; refuses a directory that is not a dashboard).")
@click.option("--history", type=click.Path(path_type=Path, dir_okay=False),
              help="History file read and extended (default: OUTPUT/history.json; a copy always lands there).")
@threshold_option("Regression threshold: percent drop in tokens/s, GEMM TFLOP/s or NCCL busbw against the "
                  "previous certificate of the row on the same GPU model.")
@click.option("--gate", is_flag=True, help="Exit 94 when any row regressed (after writing the site).")
@click.option("--locks", type=click.Path(path_type=Path, file_okay=False),
              help="Directory of lock directories (locks/<row>/); a row page links the lock whose uv.lock "
                   "sha256 its certificate names.")
@click.option("--audit", "audits", multiple=True, type=click.Path(path_type=Path),
              help="Audit reports (envbuilder audit -o audit.json), or directories holding them: each row shows "
                   "the known vulnerabilities of its certificate's lock (matched by uv.lock sha256). Repeatable.")
@click.option("--key", "public_key", type=click.Path(path_type=Path, dir_okay=False),
              help="ed25519 public key: check each certificate's DSSE signature (shown per row).")
@click.option("--browser-check", is_flag=True,
              help="Load index.html and every row page in headless Chromium; exit 97 on any console message "
                   "or missing local file.")
@click.option("--screenshot", type=click.Path(path_type=Path, dir_okay=False),
              help="With --browser-check: save a PNG of index.html here.")
@json_option("Print the dashboard summary as JSON on stdout.")
def report(certs: tuple[Path, ...], output: Path, history: Path | None, threshold_pct: float, gate: bool,
           locks: Path | None, audits: tuple[Path, ...], public_key: Path | None, browser_check: bool,
           screenshot: Path | None, as_json: bool) -> None:
    """Render CERTS (certificate files or directories holding them) as a static dashboard."""
    from envbuilder.report import ReportOptions, build_report

    console = stderr_console()
    result = build_report(ReportOptions(list(certs), output, history, threshold_pct, locks, public_key, audits),
                          progress=console.print)
    console.print(f"wrote {output}/index.html: {len(result.rows)} row(s), "
                  f"{sum(r['status'] != 'pass' for r in result.rows)} failed, {len(result.regressed)} regressed")
    summary = result.to_dict()
    if browser_check:
        from envbuilder.report.browser import check_page

        pages = [output / "index.html", *(output / "rows" / r["slug"] / "index.html" for r in result.rows)]
        checks = [check_page(p, screenshot if i == 0 else None) for i, p in enumerate(pages)]
        summary["browser"] = [c.to_dict() for c in checks]
        bad = [c for c in checks if not c.ok]
        if bad:
            first = bad[0]
            raise DashboardBrowserError(
                f"{len(bad)} page(s) did not load cleanly in Chromium; {first.page}: "
                f"{(first.console + first.broken_links)[0]}", "fix the page renderer (envbuilder/report/site.py)")
        console.print(f"chromium: {len(pages)} page(s) loaded with no console messages and no broken links")
    if as_json:
        emit_json(summary)
    if gate and result.regressed:
        regs = [f"{r['label']}: {g['metric']} −{g['drop_pct']}%" for r in result.regressed for g in r["regressions"]]
        raise RegressionError(f"{len(regs)} regression(s) beyond {threshold_pct:g}%: {'; '.join(regs[:3])}",
                              "find what changed since the previous night (lock diff, driver, host), or raise "
                              "--threshold if the drop is expected")
