"""The pass rule every tiny-pretrain variant is judged by."""

from __future__ import annotations

import math

#: the loss must fall by at least this fraction: mean(last WINDOW steps) <= (1 - MIN_DROP) * first step
MIN_DROP = 0.10
WINDOW = 3
RULE_TEXT = f"all losses finite and mean(last {WINDOW}) <= {1 - MIN_DROP:.2f} x loss(step 1)"


def judge_losses(losses: list[float], min_drop: float = MIN_DROP, window: int = WINDOW) -> tuple[bool, str]:
    """(passed, reason). Needs at least window + 1 steps."""
    if len(losses) < window + 1:
        return False, f"only {len(losses)} loss values (need > {window})"
    bad = [i + 1 for i, x in enumerate(losses) if not math.isfinite(x)]
    if bad:
        return False, f"non-finite loss at step(s) {bad[:5]}"
    first, last = losses[0], sum(losses[-window:]) / window
    if last <= (1 - min_drop) * first:
        return True, f"loss fell {first:.3f} -> {last:.3f} ({100 * (1 - last / first):.0f}%)"
    return False, f"loss did not fall enough: {first:.3f} -> {last:.3f} (need <= {(1 - min_drop) * first:.3f})"
