"""The certificate (deterministic JSON) and the human report (Markdown + SVG loss curves)."""

from __future__ import annotations

import os
import platform
import re
import tempfile
from pathlib import Path
from typing import Any

from envbuilder import __version__
from envbuilder.certify import CERT_NAME, REPORT_NAME
from envbuilder.certify.certificate import CERT_SCHEMA, Artifact, CertHost, Certificate, GpuFacts, summarize
from envbuilder.certify.expect import Expectations
from envbuilder.certify.lossrule import RULE_TEXT
from envbuilder.certify.result import CheckResult, overall_status
from envbuilder.certify.svgplot import loss_svg


def build_certificate(exp: Expectations, facts: GpuFacts, checks: list[CheckResult], level: int,
                      torch_version: str | None, timestamp: str | None = None) -> Certificate:
    return Certificate(
        schema=CERT_SCHEMA, envbuilder_version=__version__, level=level, status=overall_status(checks),
        lock_sha256=exp.lock_sha256, row=exp.row, expectations_sha256=exp.sha256,
        artifact=exp.artifact if exp.artifact is not None else Artifact(),
        host=CertHost(facts.driver, facts.gpus, facts.count, platform.python_version(), torch_version),
        checks=list(checks), summary=summarize(checks), loss_rule=RULE_TEXT, created=timestamp or None,
        lock_name=exp.lock_name)


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")


def _fmt(v: Any) -> str:
    """Compact one-cell text: scalars as-is, lists joined, nested dicts abbreviated, empties dropped."""
    if v is None:
        return ""
    if isinstance(v, dict):
        parts = []
        for k, x in v.items():
            if x in (None, [], {}):
                continue
            if isinstance(x, dict):
                x = "{" + ", ".join(f"{a}: {_fmt(b)}" for a, b in list(x.items())[:4]) + \
                    (", …" if len(x) > 4 else "") + "}"
            elif isinstance(x, list):
                x = "[" + ", ".join(map(str, x[:4])) + (", …" if len(x) > 4 else "") + "]"
            parts.append(f"{k}={x}")
        return ", ".join(parts).replace("|", "/")
    return str(v).replace("|", "/")


def render_report(cert: Certificate) -> tuple[str, dict[str, str]]:
    """(markdown, {svg file name: svg text})."""
    h = cert.host
    gpus = ", ".join(sorted({g.name for g in h.gpus})) or "none"
    lines = [
        f"# Certificate: {cert.status.upper()}",
        "",
        f"- level: {cert.level}; row: {cert.row or 'none'}" + (f"; lock: {cert.lock_name}" if cert.lock_name else ""),
        f"- lock sha256: `{cert.lock_sha256 or 'none (no lock given)'}`",
        f"- artifact: {_fmt(cert.artifact.to_dict())}",
        f"- host: driver {h.driver or 'none'}, {h.gpu_count} x {gpus}; python {h.python}, torch {h.torch}",
        f"- loss rule: {cert.loss_rule}",
        f"- summary: {_fmt(cert.summary)}",
        "",
        "| check | level | status | measured | threshold | advice |",
        "|---|---|---|---|---|---|",
    ]
    svgs: dict[str, str] = {}
    for c in cert.checks:
        meas = _fmt(c.measured) or (c.detail or "")
        if c.status in ("skipped", "not-installed") and c.detail:
            meas = c.detail  # why it did not run says more than its (empty) measurements
        lines.append(f"| {c.name} | {c.level} | {c.status} | {meas[:160]} | {_fmt(c.threshold)[:120]} "
                     f"| {_fmt(c.advice)} |")
    curves = [c for c in cert.checks if c.losses]
    if curves:
        lines += ["", "## Loss curves", ""]
        for c in curves:
            fname = f"loss-{_slug(c.name)}.svg"
            svgs[fname] = loss_svg(f"{c.name} ({c.status})", c.losses or [])
            lines += [f"### {c.name}", "", f"![{c.name}]({fname})", ""]
    details = [c for c in cert.checks if c.status == "fail" and c.detail]
    if details:
        lines += ["", "## Failure details", ""]
        for c in details:
            lines += [f"### {c.name}", "", "```", c.detail or "", "```", ""]
    return "\n".join(lines).rstrip() + "\n", svgs


def write_outputs(cert: Certificate, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, svgs = render_report(cert)
    for name, text in svgs.items():
        _write(out_dir / name, text)
    _write(out_dir / REPORT_NAME, md)
    _write(out_dir / CERT_NAME, cert.to_json())  # last: its presence means the rest is complete
