"""One check's outcome, as it appears in a certificate (`CheckResult`), and the helpers that judge one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

PASS = "pass"
FAIL = "fail"
SKIPPED = "skipped"
NOT_INSTALLED = "not-installed"
STATUSES = (PASS, FAIL, SKIPPED, NOT_INSTALLED)


@dataclass
class CheckResult:
    """One check of a certificate. `seconds` is the wall time the check took (absent in certificates written
    before it was recorded, and for checks built by hand)."""

    name: str
    level: int
    status: str
    measured: Any = None
    threshold: Any = None
    advice: str | None = None
    detail: str | None = None
    #: loss curve for pretrain variants (drawn in the report, kept in the certificate)
    losses: list[float] | None = field(default=None)
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "level": self.level, "status": self.status,
            "measured": self.measured, "threshold": self.threshold, "advice": self.advice,
        }
        if self.detail:
            out["detail"] = self.detail
        if self.losses is not None:
            out["losses"] = [round(x, 4) for x in self.losses]
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 2)
        return out


def overall_status(checks: list[CheckResult]) -> str:
    """Fail if any check failed; skipped and not-installed checks do not fail a certificate."""
    return FAIL if any(c.status == FAIL for c in checks) else PASS


class Stopwatch:
    """Stamps each check with the wall time since the previous one (or since the stopwatch started).

    Checks run one after another, so the time between two results is the second check's duration; a check
    that timed itself (a list of probes stamps each probe) keeps its own figure.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()

    def stamp(self, check: CheckResult) -> CheckResult:
        now = self._clock()
        if check.seconds is None:
            check.seconds = now - self._last
        self._last = now
        return check


class TimedChecks(list[CheckResult]):
    """A list of checks, each stamped with its duration as it is appended (see Stopwatch)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.watch = Stopwatch(clock)

    def append(self, check: CheckResult) -> None:
        super().append(self.watch.stamp(check))

    def extend(self, checks: Iterable[CheckResult]) -> None:
        for c in checks:
            self.append(c)


def advise(log: str) -> str | None:
    """Map a failure log to 'cause; fix' using envbuilder.troubleshoot when it is importable.

    Inside a target only envbuilder/ is mounted; troubleshoot.py is stdlib-only, so it imports.
    """
    try:
        from envbuilder.troubleshoot import troubleshoot
    except Exception:  # the certify package was copied without its parent
        return None
    adv = troubleshoot(log)
    return f"{adv.cause}; fix: {adv.fix}" if adv else None


def tail(text: str, n: int = 1200) -> str:
    """Last n characters of a log, for a check's detail (never the whole log)."""
    text = text.strip()
    return text if len(text) <= n else "…" + text[-n:]
