"""The nightly dashboard: a static site, a metric history and a regression gate, from certificates.

Reads certificates (and, when given, lock directories to link beside them); never runs checks.

Layout (pipeline order):
    collect  -> certificate files or directories -> CertEntry (bytes, parsed JSON, row key)
    metrics  -> tokens/s, GEMM TFLOP/s, NCCL bus bandwidth out of a certificate's checks
    history  -> history.json across nights; the previous certificate of a row on a GPU model
    gate     -> regressions: a metric that dropped more than the threshold
    site     -> index.html (rows x checks grid) and one page per row (HTML + inline SVG, no JS)
    browser  -> load a page in headless Chromium: console messages, DOM, screenshot
"""

from envbuilder.report.pipeline import ReportOptions, ReportResult, build_report

__all__ = ["ReportOptions", "ReportResult", "build_report"]
