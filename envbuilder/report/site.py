"""Static HTML: index.html (rows × checks grid) and one page per row. No JavaScript, no external assets.

Every status is shown as text and a symbol as well as a colour, so the grid reads in greyscale,
for colour-blind readers and in a text browser. Pages are deterministic for the same inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html import escape
from typing import Any

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
    head = "".join(f'<th class="check" scope="col">{escape(c)}</th>' for c in cols)
    lines = []
    for v in views:
        e = v.entry
        by_name = {c.name: c.status for c in e.cert.checks}
        cells = "".join(status_cell(by_name.get(c, "not-run"), c) for c in cols)
        perf_cls = "regressed" if v.regressions else "ok"
        perf = escape(v.perf) + ("".join(f"<br>{escape(r.metric)} −{r.drop_pct:.1f}%" for r in v.regressions))
        lines.append(
            f'<tr data-row="{escape(e.row)}" data-slug="{e.slug}" data-status="{escape(e.cert.status)}">'
            f'<th scope="row"><a href="rows/{e.slug}/index.html">{escape(e.label)}</a></th>'
            + status_cell(e.cert.status, "overall")
            + f'<td class="{perf_cls}" data-perf="{escape(v.perf)}">{perf}</td>'
            f'<td data-signature="{escape(v.signature)}">{escape(v.signature)}</td>{cells}</tr>')
    counts = {s: sum(1 for v in views if v.entry.cert.status == s) for s in ("pass", "fail")}
    regressed = sum(1 for v in views if v.regressions)
    legend = "".join(f'<span class="st-{s}">{SYMBOL[s]} {s}</span>' for s in SYMBOL)
    body = (f"<h1>envbuilder certification</h1>\n"
            f'<p id="summary">{len(views)} row(s): {counts["pass"]} passed, {counts["fail"]} failed, '
            f"{regressed} regressed (a drop of more than {threshold_pct:g}% in tokens/s, GEMM TFLOP/s or NCCL "
            f"bus bandwidth against the previous certificate of the row on the same GPU model and count).</p>\n"
            f'<p class="legend">{legend}</p>\n'
            f'<table id="grid"><thead><tr><th scope="col">row · level · GPUs</th><th class="check" scope="col">'
            f'overall</th><th scope="col">perf</th><th scope="col">signature</th>{head}</tr></thead>\n<tbody>\n'
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
    keys = sorted({k for x in v.history for k in x.get("metrics", {})})
    hist_rows = []
    for x in v.history:
        bad = {r.metric for r in v.regressions} if x.get("certificate_sha256") == e.sha256 else set()
        cells = "".join(f'<td class="regressed">{x["metrics"].get(k, "")} ▼ regressed</td>' if k in bad
                        else f'<td>{x["metrics"].get(k, "")}</td>' for k in keys)
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
            f"<h2>Files</h2>\n<p>{files or 'none'}</p>\n"
            + ("" if v.lock_files else "<p>lock: no lock directory with this lock's sha256 was given "
               "(envbuilder report --locks DIR)</p>\n")
            + f'<h2>Certificate</h2>\n<pre id="certificate">{escape(cert_json)}</pre>')
    return _page(e.label, body, "../../style.css")
