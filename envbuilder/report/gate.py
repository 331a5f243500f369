"""The regression gate: a metric that dropped more than `threshold` percent fails the night."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from envbuilder.errors import InvalidOptionError

DEFAULT_THRESHOLD_PCT = 10.0


@dataclass(frozen=True)
class Regression:
    metric: str
    previous: float
    current: float
    threshold_pct: float

    @property
    def drop_pct(self) -> float:
        return (self.previous - self.current) / self.previous * 100.0

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "previous": self.previous, "current": self.current,
                "drop_pct": round(self.drop_pct, 2), "threshold_pct": self.threshold_pct}


def find_regressions(current: dict[str, float], previous: dict[str, float],
                     threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> list[Regression]:
    """Metrics both nights measured whose value fell by more than threshold_pct (higher is better for all)."""
    if not math.isfinite(threshold_pct) or threshold_pct < 0:
        raise InvalidOptionError(f"regression threshold {threshold_pct!r} is not a finite percentage",
                                 "pass --threshold between 0 and 100")
    out = []
    for key in sorted(set(current) & set(previous)):
        prev, cur = previous[key], current[key]
        if prev > 0 and (prev - cur) / prev * 100.0 > threshold_pct:
            out.append(Regression(key, prev, cur, threshold_pct))
    return out
