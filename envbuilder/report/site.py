"""Static HTML: index.html (rows × checks grid) and one page per row. No JavaScript, no external assets.

Every status is shown as text and a symbol as well as a colour, so the grid reads in greyscale,
for colour-blind readers and in a text browser. Pages are deterministic for the same inputs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html import escape
from typing import Any

from envbuilder.audit.report import AuditReport
from envbuilder.audit.severity import Threshold
from envbuilder.certify.result import CheckResult
from envbuilder.certify.svgplot import loss_svg
from envbuilder.report.collect import CertEntry
from envbuilder.report.gate import Regression
from envbuilder.report.metrics import describe

SYMBOL = {"pass": "✓", "fail": "✗", "skipped": "–", "not-installed": "∅", "not-run": "·"}

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #111; }
table { border-collapse: collapse; }
th, td { border: 1px solid #bbb; padding: 3px 6px; vertical-align: top; }
th.check { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; font-weight: normal; }
tbody th { white-space: nowrap; text-align: left; }
td.st { text-align: center; white-space: nowrap; font-size: 12px; }
.st-pass { background: #c8f0c8; color: #0a4d0a; }
.st-fail { background: #f7c0c0; color: #7a0000; font-weight: bold; }
.st-skipped { background: #fdf0b8; color: #5c4a00; }
.st-not-installed { background: #e6e6e6; color: #444; }
.st-not-run { background: #fff; color: #888; }
.regressed { background: #f7c0c0; color: #7a0000; font-weight: bold; }
.ok { color: #0a4d0a; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; max-height: 40em; }
.legend span { display: inline-block; padding: 2px 6px; margin-right: 4px; border: 1px solid #bbb; }
nav a { margin-right: 1em; }
"""


@dataclass
class RowView:
    """What a row's page and grid line show, beyond the certificate itself."""

    entry: CertEntry
    previous_sha256: str | None = None
    regressions: list[Regression] = field(default_factory=list)
    signature: str = "unsigned"
    files: list[str] = field(default_factory=list)  # copied beside the row page
    lock_files: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    audit: AuditReport | None = None  # the audit of this certificate's lock, when one was given
    audited: bool = False  # audits were given to the report (the grid then has a column for them)

    @property
    def audit_summary(self) -> dict[str, Any] | None:
        a = self.audit
        if a is None:
            return None
        return {"findings": len(a.active), "ignored": len(a.findings) - len(a.active),
                "counts": {k: n for k, n in a.counts.items() if n}, "fail_on": a.fail_on,
                "failing": len(a.failing(Threshold.parse(a.fail_on))), "database": a.database}

    def vulnerability_text(self) -> str:
        """'6 high, 2 medium' (most severe first), 'none known', or 'not audited'."""
        if self.audit is None:
            return "not audited"
        counts = [(lvl, n) for lvl, n in reversed(list(self.audit.counts.items())) if n]
        order = {lvl: i for i, lvl in enumerate(("critical", "high", "medium", "low", "none", "unknown"))}
        return ", ".join(f"{n} {lvl}" for lvl, n in sorted(counts, key=lambda c: order[c[0]])) or "none known"

    @property
    def perf(self) -> str:
        if self.regressions:
            return "regressed"
        return "no previous" if self.previous_sha256 is None else "ok"


def _page(title: str, body: str, css_href: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{escape(title)}</title><link rel="stylesheet" href="{css_href}"></head>\n'
            f"<body>\n{body}\n</body></html>\n")


def status_cell(status: str, check: str) -> str:
    s = status if status in SYMBOL else "not-run"
    return (f'<td class="st st-{s}" data-check="{escape(check)}" data-status="{s}">'
            f'{SYMBOL[s]} {escape(s)}</td>')


def columns(entries: list[CertEntry]) -> list[str]:
    """Every check name any certificate ran, by level, then in the order certificates list them."""
    order: dict[str, tuple[int, int]] = {}
    for e in entries:
        for i, c in enumerate(e.cert.checks):
            order.setdefault(c.name, (c.level, i))
    return sorted(order, key=lambda n: (order[n], n))


def render_index(views: list[RowView], threshold_pct: float) -> str:
    cols = columns([v.entry for v in views])
    audited = any(v.audited for v in views)
    head = "".join(f'<th class="check" scope="col">{escape(c)}</th>' for c in cols)
    lines = []
    for v in views:
        e = v.entry
        by_name = {c.name: c.status for c in e.cert.checks}
        cells = "".join(status_cell(by_name.get(c, "not-run"), c) for c in cols)
        perf_cls = "regressed" if v.regressions else "ok"
        perf = escape(v.perf) + ("".join(f"<br>{escape(r.metric)} −{r.drop_pct:.1f}%" for r in v.regressions))
        vulns = ""
        if audited:
            n = len(v.audit.active) if v.audit else -1
            cls = "regressed" if n > 0 else "ok" if n == 0 else ""
            vulns = (f'<td class="{cls}" data-vulnerabilities="{n}">'
                     f'<a href="rows/{e.slug}/index.html#vulnerabilities">{escape(v.vulnerability_text())}</a></td>')
        lines.append(
            f'<tr data-row="{escape(e.row)}" data-slug="{e.slug}" data-status="{escape(e.cert.status)}">'
            f'<th scope="row"><a href="rows/{e.slug}/index.html">{escape(e.label)}</a></th>'
            + status_cell(e.cert.status, "overall")
            + f'<td class="{perf_cls}" data-perf="{escape(v.perf)}">{perf}</td>'
            f'<td data-signature="{escape(v.signature)}">{escape(v.signature)}</td>{vulns}{cells}</tr>')
    counts = {s: sum(1 for v in views if v.entry.cert.status == s) for s in ("pass", "fail")}
    regressed = sum(1 for v in views if v.regressions)
    legend = "".join(f'<span class="st-{s}">{SYMBOL[s]} {s}</span>' for s in SYMBOL)
    body = (f"<h1>envbuilder certification</h1>\n"
            f'<p id="summary">{len(views)} row(s): {counts["pass"]} passed, {counts["fail"]} failed, '
            f"{regressed} regressed (a drop of more than {threshold_pct:g}% in tokens/s, GEMM TFLOP/s or NCCL "
            f"bus bandwidth against the previous certificate of the row on the same GPU model and count).</p>\n"
            f'<p class="legend">{legend}</p>\n'
            f'<table id="grid"><thead><tr><th scope="col">row · level · GPUs</th><th class="check" scope="col">'
            f'overall</th><th scope="col">perf</th><th scope="col">signature</th>'
            + ('<th scope="col">known vulnerabilities</th>' if audited else "")
            + f'{head}</tr></thead>\n<tbody>\n'
            + "\n".join(lines) + "\n</tbody></table>\n"
            '<p><a href="history.json">history.json</a> · <a href="dashboard.json">dashboard.json</a></p>')
    return _page("envbuilder certification", body, "style.css")


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)[:400]
    return str(v)


def _curve(ch: CheckResult) -> str:
    name = ch.name
    svg = loss_svg(f"{name} ({ch.status})", [float(x) for x in ch.losses or []])
    return (f'<figure data-curve="{escape(name)}">{svg}'
            f"<figcaption>loss per step, {escape(name)}</figcaption></figure>")


def render_row(v: RowView, threshold_pct: float) -> str:
    e = v.entry
    c = e.cert
    host = c.host
    facts = [("status", f'{SYMBOL.get(c.status, "")} {c.status}'), ("row", e.row), ("level", c.level),
             ("GPUs", f"{e.gpu_count} × {e.gpu_model}" if e.gpu_count else "none (CPU)"),
             ("driver", host.driver), ("python / torch", f"{host.python} / {host.torch}"),
             ("lock sha256", c.lock_sha256 or "none"), ("artifact", _fmt(c.artifact.to_dict())),
             ("certificate sha256", e.sha256), ("signature", v.signature),
             ("created", c.created or "not recorded"),
             ("envbuilder", c.envbuilder_version)]
    facts_html = "".join(f'<tr><th scope="row">{escape(k)}</th><td>{escape(str(x))}</td></tr>' for k, x in facts)
    checks = "".join(
        f'<tr data-check="{escape(ch.name)}"><td>{escape(ch.name)}</td>'
        f'<td>{ch.level}</td>{status_cell(ch.status, ch.name)}'
        f'<td>{escape(_fmt(ch.measured) or (ch.detail or ""))}</td>'
        f'<td>{escape(_fmt(ch.threshold))}</td><td>{escape(_fmt(ch.advice))}</td></tr>'
        for ch in c.checks)
    curves = "".join(_curve(ch) for ch in c.checks if ch.losses)
    regress = "".join(f"<li class=\"regressed\">{escape(describe(r.metric))}: {r.previous:g} → {r.current:g} "
                      f"(−{r.drop_pct:.1f}%, threshold {threshold_pct:g}%)</li>" for r in v.regressions)
    keys = sorted({k for x in v.history for k in (x.get("metrics") or {})})
    hist_rows = []
    for x in v.history:
        bad = {r.metric for r in v.regressions} if x.get("certificate_sha256") == e.sha256 else set()
        metrics = x.get("metrics") or {}
        cells = "".join(f'<td class="regressed">{escape(str(metrics.get(k, "")))} ▼ regressed</td>' if k in bad
                        else f'<td>{escape(str(metrics.get(k, "")))}</td>' for k in keys)
        hist_rows.append(f'<tr><td>{escape(str(x.get("created") or ""))}</td>'
                         f'<td><code>{escape(str(x.get("certificate_sha256"))[:12])}</code></td>'
                         f'<td>{escape(str(x.get("status")))}</td>{cells}</tr>')
    hist_head = "".join(f"<th>{escape(describe(k))}</th>" for k in keys)
    files = " · ".join(f'<a href="{escape(f)}">{escape(f)}</a>' for f in v.files + v.lock_files)
    cert_json = json.dumps(c.to_dict(), indent=2, sort_keys=True, ensure_ascii=False)
    body = (f'<nav><a href="../../index.html">← all rows</a></nav>\n<h1>{escape(e.label)}</h1>\n'
            f'<table id="facts">{facts_html}</table>\n'
            f"<h2>Performance against the previous certificate</h2>\n"
            + (f'<ul id="regressions">{regress}</ul>' if regress else
               f'<p id="regressions">{escape(v.perf)}</p>')
            + f'\n<h2>Checks</h2>\n<table id="checks"><thead><tr><th>check</th><th>level</th><th>status</th>'
            f"<th>measured</th><th>threshold</th><th>advice</th></tr></thead><tbody>{checks}</tbody></table>\n"
            f"<h2>Loss curves</h2>\n{curves or '<p>no training checks ran</p>'}\n"
            f'<h2>History (same row, same GPU model and count)</h2>\n<table id="history"><thead><tr><th>created</th>'
            f"<th>certificate</th><th>status</th>{hist_head}</tr></thead><tbody>{''.join(hist_rows)}</tbody></table>\n"
            + (_vulnerabilities(v) if v.audited else "")
            + f"<h2>Files</h2>\n<p>{files or 'none'}</p>\n"
            + ("" if v.lock_files else "<p>lock: no lock directory with this lock's sha256 was given "
               "(envbuilder report --locks DIR)</p>\n")
            + f'<h2>Certificate</h2>\n<pre id="certificate">{escape(cert_json)}</pre>')
    return _page(e.label, body, "../../style.css")


_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,100}")


def _vulnerabilities(v: RowView) -> str:
    """The audit of the row's lock: every finding, escaped (advisory text is data from a database)."""
    a = v.audit
    if a is None:
        return ('<h2 id="vulnerabilities">Known vulnerabilities</h2>\n<p>not audited: no audit report of this '
                "lock was given (envbuilder report --audit)</p>\n")
    db = a.database
    where = (f"OSV service {db.get('url')}" if db.get("kind") == "osv-service" else
             f"offline database {db.get('path')} ({db.get('records')} records, newest modified "
             f"{db.get('newest_modified')}, sha256 {str(db.get('sha256'))[:12]})")
    rows = []
    for f in a.findings:
        ident = (f'<a href="https://osv.dev/vulnerability/{escape(f.id)}">{escape(f.id)}</a>'
                 if _SAFE_ID.fullmatch(f.id) else escape(f.id))
        score = f" {f.severity.score:g}" if f.severity.score is not None else ""
        ignored = ' data-ignored="true"' if f.ignored else ""
        rows.append(f'<tr data-vuln="{escape(f.id)}" data-severity="{escape(f.severity.level)}"{ignored}>'
                    f"<td>{escape(f.severity.level + score)}{' (ignored)' if f.ignored else ''}</td>"
                    f"<td>{escape(f.package)}</td><td>{escape(f.version)}</td><td>{ident}</td>"
                    f"<td>{escape(' '.join(f.aliases))}</td><td>{escape(f.fixed_text)}</td>"
                    f"<td>{escape(f.summary)}</td></tr>")
    table = ('<table id="vulnerability-table"><thead><tr><th>severity</th><th>package</th><th>version</th>'
             "<th>id</th><th>aliases</th><th>fixed in</th><th>summary</th></tr></thead><tbody>"
             + "".join(rows) + "</tbody></table>") if rows else "<p>no known vulnerability</p>"
    problems = (f"<p>{len(a.problems)} advisory range(s) could not be evaluated (audit.json, 'problems')</p>"
                if a.problems else "")
    return (f'<h2 id="vulnerabilities">Known vulnerabilities</h2>\n<p>{escape(v.vulnerability_text())} in '
            f"{a.packages} locked package versions; database: {escape(where)}; --fail-on {escape(a.fail_on)}</p>\n"
            f"{table}\n{problems}\n")
