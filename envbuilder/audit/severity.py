"""Severity of an advisory, and the threshold `audit --fail-on` compares it with.

OSV records carry severity as CVSS vectors (`severity: [{type: CVSS_V3, score: "CVSS:3.1/AV:N/..."}]`)
and, in GitHub's records, as a word (`database_specific.severity: HIGH`). The base score of a CVSS v3.x
or v2 vector is computed here with the formulas of the FIRST specifications (v3.1 section 7.1 and
appendix A, v2 section 3.2.1); CVSS v4 scores need FIRST's macro-vector lookup table, which we do not
carry, so a v4-only record's severity is the database's word if it has one and otherwise unknown.
A record with several severities takes the highest: a threshold never passes on the milder reading.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from envbuilder.errors import InvalidOptionError

#: qualitative levels, mildest first; "unknown" is kept apart (it is not below or above anything)
LEVELS = ("none", "low", "medium", "high", "critical")
UNKNOWN = "unknown"
#: GitHub's words (database_specific.severity) in CVSS terms
_WORDS = {"LOW": "low", "MODERATE": "medium", "MEDIUM": "medium", "HIGH": "high", "CRITICAL": "critical"}


@dataclass(frozen=True)
class Severity:
    """The severity a finding is judged by: a level, its CVSS base score when one was computed, and where from."""

    level: str  # one of LEVELS or UNKNOWN
    score: float | None = None
    source: str = ""  # "CVSS_V3 CVSS:3.1/AV:N/...", "database_specific HIGH", ""

    @property
    def rank(self) -> int:
        """Position in LEVELS (-1 for unknown)."""
        return LEVELS.index(self.level) if self.level in LEVELS else -1

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "score": self.score, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Severity:
        level = d.get("level")
        score = d.get("score")
        if level not in (*LEVELS, UNKNOWN) or not (score is None or isinstance(score, (int, float))):
            raise ValueError(f"severity {d!r}")
        return cls(str(level), None if score is None else float(score), str(d.get("source") or ""))


UNKNOWN_SEVERITY = Severity(UNKNOWN)


def level_of_score(score: float, version: int = 3) -> str:
    """CVSS qualitative rating: v3 (and v4) none/low/medium/high/critical; v2 (NVD) low/medium/high."""
    if version == 2:
        return "low" if score < 4.0 else "medium" if score < 7.0 else "high"
    if score == 0.0:
        return "none"
    return "low" if score < 4.0 else "medium" if score < 7.0 else "high" if score < 9.0 else "critical"


def _metrics(vector: str, prefix_len: int) -> dict[str, str]:
    parts = vector.split("/")[prefix_len:]
    out: dict[str, str] = {}
    for p in parts:
        key, sep, value = p.partition(":")
        if not sep or key in out:
            raise ValueError(f"bad CVSS metric {p!r}")
        out[key] = value
    return out


def _roundup_31(x: float) -> float:
    """CVSS v3.1 Roundup (appendix A): the smallest one-decimal number >= x, free of float noise."""
    i = round(x * 100000)
    return i / 100000.0 if i % 10000 == 0 else (math.floor(i / 10000) + 1) / 10.0


_V3 = {
    "AV": {"N": 0.85, "A": 0.62, "L": 0.55, "P": 0.2},
    "AC": {"L": 0.77, "H": 0.44},
    "UI": {"N": 0.85, "R": 0.62},
    "C": {"H": 0.56, "L": 0.22, "N": 0.0},
}
_PR_UNCHANGED = {"N": 0.85, "L": 0.62, "H": 0.27}
_PR_CHANGED = {"N": 0.85, "L": 0.68, "H": 0.5}


def cvss3_base_score(vector: str) -> float:
    """Base score of a CVSS:3.0 or CVSS:3.1 vector; ValueError when the vector is malformed."""
    head = vector.split("/", 1)[0]
    if head not in ("CVSS:3.0", "CVSS:3.1"):
        raise ValueError(f"not a CVSS v3 vector: {vector!r}")
    m = _metrics(vector, 1)
    try:
        scope_changed = {"U": False, "C": True}[m["S"]]
        av, ac, ui = _V3["AV"][m["AV"]], _V3["AC"][m["AC"]], _V3["UI"][m["UI"]]
        pr = (_PR_CHANGED if scope_changed else _PR_UNCHANGED)[m["PR"]]
        c, i, a = (_V3["C"][m[k]] for k in ("C", "I", "A"))
    except KeyError as exc:
        raise ValueError(f"CVSS v3 vector {vector!r} lacks or misspells {exc}") from exc
    iss = 1 - (1 - c) * (1 - i) * (1 - a)
    impact = 7.52 * (iss - 0.029) - 3.25 * (iss - 0.02) ** 15 if scope_changed else 6.42 * iss
    exploitability = 8.22 * av * ac * pr * ui
    if impact <= 0:
        return 0.0
    raw = min((1.08 if scope_changed else 1.0) * (impact + exploitability), 10.0)
    return _roundup_31(raw) if head == "CVSS:3.1" else math.ceil(raw * 10 - 1e-9) / 10.0


_V2 = {
    "AV": {"L": 0.395, "A": 0.646, "N": 1.0},
    "AC": {"H": 0.35, "M": 0.61, "L": 0.71},
    "Au": {"M": 0.45, "S": 0.56, "N": 0.704},
    "C": {"N": 0.0, "P": 0.275, "C": 0.660},
}


def cvss2_base_score(vector: str) -> float:
    """Base score of a CVSS v2 vector ("AV:N/AC:L/Au:N/C:P/I:P/A:P", optionally prefixed "CVSS:2.0/")."""
    m = _metrics(vector, 1 if vector.startswith("CVSS:2") else 0)
    try:
        av, ac, au = _V2["AV"][m["AV"]], _V2["AC"][m["AC"]], _V2["Au"][m["Au"]]
        c, i, a = (_V2["C"][m[k]] for k in ("C", "I", "A"))
    except KeyError as exc:
        raise ValueError(f"CVSS v2 vector {vector!r} lacks or misspells {exc}") from exc
    impact = 10.41 * (1 - (1 - c) * (1 - i) * (1 - a))
    exploitability = 20 * av * ac * au
    f = 0.0 if impact == 0 else 1.176
    return round((0.6 * impact + 0.4 * exploitability - 1.5) * f + 1e-9, 1)


def severity_of(record: dict[str, Any]) -> Severity:
    """The highest severity an OSV record states (top-level `severity`, the affected entries' severities,
    and `database_specific.severity`); unknown when it states none we can read."""
    found: list[Severity] = []
    entries = list(record.get("severity") or [])
    for aff in record.get("affected") or []:
        if isinstance(aff, dict):
            entries.extend(aff.get("severity") or [])
    for s in entries:
        if not isinstance(s, dict):
            continue
        kind, vector = str(s.get("type", "")), str(s.get("score", ""))
        try:
            if kind == "CVSS_V3":
                score = cvss3_base_score(vector)
                found.append(Severity(level_of_score(score), score, f"{kind} {vector}"))
            elif kind == "CVSS_V2":
                score = cvss2_base_score(vector)
                found.append(Severity(level_of_score(score, version=2), score, f"{kind} {vector}"))
        except ValueError:
            continue  # a vector we cannot read says nothing; another entry may
    db = record.get("database_specific")
    word = db.get("severity") if isinstance(db, dict) else None
    if isinstance(word, str) and word.upper() in _WORDS:
        found.append(Severity(_WORDS[word.upper()], None, f"database_specific {word.upper()}"))
    if not found:
        return UNKNOWN_SEVERITY
    return max(found, key=lambda s: (s.rank, s.score if s.score is not None else -1.0))


@dataclass(frozen=True)
class Threshold:
    """`--fail-on`: a level name or a CVSS base score (0-10); "none" never fails.

    A finding reaches it when its level is at least the named level (or its score at least the number).
    A finding of unknown severity reaches every threshold but "none": not knowing is not "below".
    """

    text: str
    rank: int | None = None  # a level's index in LEVELS
    score: float | None = None

    @classmethod
    def parse(cls, text: str) -> Threshold:
        value = str(text).strip().lower()
        if value == "none":
            return cls("none")
        if value in LEVELS[1:]:
            return cls(value, rank=LEVELS.index(value))
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score) or not 0.0 <= score <= 10.0:
            raise InvalidOptionError(
                f"--fail-on {text!r} is neither a severity (low, medium, high, critical, none) nor a CVSS score "
                "from 0 to 10", "e.g. --fail-on high, or --fail-on 7.0")
        return cls(f"{score:g}", score=score)

    @property
    def never(self) -> bool:
        return self.rank is None and self.score is None

    def reached_by(self, sev: Severity) -> bool:
        if self.never:
            return False
        if sev.level == UNKNOWN:
            return True
        if self.rank is not None:
            return sev.rank >= self.rank
        assert self.score is not None
        if sev.score is not None:
            return sev.score >= self.score
        # a level without a score (a database's word): compare with the level the number falls in
        return sev.rank >= LEVELS.index(level_of_score(self.score))
