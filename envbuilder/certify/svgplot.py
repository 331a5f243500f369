"""A dependency-free SVG line plot for loss curves."""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 480, 260, 56, 16, 30, 40


def loss_svg(title: str, losses: list[float]) -> str:
    pts = [(i + 1, y) for i, y in enumerate(losses) if math.isfinite(y)]
    lo = min((y for _, y in pts), default=0.0)
    hi = max((y for _, y in pts), default=1.0)
    if hi - lo < 1e-9:
        hi = lo + 1.0
    n = max(len(losses), 2)

    def sx(step: float) -> float:
        return PAD_L + (step - 1) / (n - 1) * (W - PAD_L - PAD_R)

    def sy(v: float) -> float:
        return PAD_T + (hi - v) / (hi - lo) * (H - PAD_T - PAD_B)

    poly = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
    ticks = []
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        ticks.append(f'<line x1="{PAD_L - 4}" y1="{sy(v):.1f}" x2="{W - PAD_R}" y2="{sy(v):.1f}" '
                     f'stroke="#ddd"/><text x="{PAD_L - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>',
        *ticks,
        f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" stroke="black"/>',
        f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="black"/>',
        f'<text x="{PAD_L}" y="{H - PAD_B + 16}" text-anchor="middle">1</text>',
        f'<text x="{W - PAD_R}" y="{H - PAD_B + 16}" text-anchor="middle">{len(losses)}</text>',
        f'<text x="{(W + PAD_L) / 2}" y="{H - 6}" text-anchor="middle">step</text>',
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{poly}"/>',
        "</svg>",
        "",
    ])
