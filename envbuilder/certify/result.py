"""One check's outcome, as it appears in a certificate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS = "pass"
FAIL = "fail"
SKIPPED = "skipped"
NOT_INSTALLED = "not-installed"
STATUSES = (PASS, FAIL, SKIPPED, NOT_INSTALLED)


@dataclass
class Check:
    name: str
    level: int
    status: str
    measured: Any = None
    threshold: Any = None
    advice: str | None = None
    detail: str | None = None
    #: loss curve for pretrain variants (drawn in the report, kept in the certificate)
    losses: list[float] | None = field(default=None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "level": self.level, "status": self.status,
            "measured": self.measured, "threshold": self.threshold, "advice": self.advice,
        }
        if self.detail:
            out["detail"] = self.detail
        if self.losses is not None:
            out["losses"] = [round(x, 4) for x in self.losses]
        return out


def overall_status(checks: list[Check]) -> str:
    """Fail if any check failed; skipped and not-installed checks do not fail a certificate."""
    return FAIL if any(c.status == FAIL for c in checks) else PASS


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
