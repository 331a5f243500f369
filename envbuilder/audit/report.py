"""The audit report (`audit --json`, `audit -o FILE`): a typed, versioned record, read back by sbom and report.

Same inputs, same bytes: findings are sorted, no timestamps are written, and the database is named by
what identifies its contents (an offline file's sha256 and its newest record's `modified` date; the
service's URL). Each finding speaks OSV: id, aliases, package, version, fixed versions, severity.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from envbuilder.audit.severity import LEVELS, UNKNOWN, Severity, Threshold
from envbuilder.canonical import dumps
from envbuilder.errors import AuditDatabaseError

SCHEMA = 1
REPORT_NAME = "audit.json"
_FIX = "re-create it with: envbuilder audit LOCKDIR -o audit.json"


@dataclass(frozen=True)
class Finding:
    """One advisory that affects one locked package version (advisories that alias each other are one finding)."""

    id: str
    aliases: tuple[str, ...]
    package: str
    version: str
    fixed: tuple[str, ...]  # versions that end the affected interval; empty: no fix known
    severity: Severity
    summary: str = ""
    modified: str = ""
    ignored: bool = False
    url: str = ""

    @property
    def fixed_text(self) -> str:
        return ", ".join(self.fixed) if self.fixed else "no fix known"

    def names(self) -> set[str]:
        return {self.id, *self.aliases}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "aliases": list(self.aliases), "package": self.package, "version": self.version,
                "fixed": list(self.fixed), "severity": self.severity.to_dict(), "summary": self.summary,
                "modified": self.modified, "ignored": self.ignored, "url": self.url}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Finding:
        try:
            return cls(id=_s(d["id"]), aliases=tuple(_s(a) for a in d["aliases"]), package=_s(d["package"]),
                       version=_s(d["version"]), fixed=tuple(_s(v) for v in d["fixed"]),
                       severity=Severity.from_dict(d["severity"]), summary=_s(d["summary"]),
                       modified=_s(d["modified"]), ignored=bool(d["ignored"]), url=_s(d["url"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise AuditDatabaseError(f"{where}: a finding is malformed ({exc!r})", _FIX) from exc


def _s(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


@dataclass(frozen=True)
class AuditReport:
    """What `envbuilder audit` found in one lock directory."""

    lock_sha256: str
    row: str
    packages: int  # locked package versions audited
    database: dict[str, Any]
    fail_on: str
    findings: tuple[Finding, ...]
    problems: tuple[str, ...] = ()  # advisories that could not be evaluated for a version (never silently passed)
    schema: int = SCHEMA
    FIELDS: ClassVar[tuple[str, ...]] = ("schema", "lock_sha256", "row", "packages", "database", "fail_on",
                                         "findings", "problems", "counts", "failing")

    @property
    def active(self) -> list[Finding]:
        return [f for f in self.findings if not f.ignored]

    @property
    def counts(self) -> dict[str, int]:
        """Findings (not ignored) per severity level, every level present."""
        out = {lvl: 0 for lvl in (*LEVELS, UNKNOWN)}
        for f in self.active:
            out[f.severity.level] += 1
        return out

    def failing(self, threshold: Threshold) -> list[Finding]:
        return [f for f in self.active if threshold.reached_by(f.severity)]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "lock_sha256": self.lock_sha256, "row": self.row, "packages": self.packages,
                "database": self.database, "fail_on": self.fail_on,
                "findings": [f.to_dict() for f in self.findings], "problems": list(self.problems),
                "counts": self.counts, "failing": len(self.failing(Threshold.parse(self.fail_on)))}

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any, where: str = REPORT_NAME) -> AuditReport:
        if not isinstance(data, dict):
            raise AuditDatabaseError(f"{where}: not a JSON object", _FIX)
        if data.get("schema") != SCHEMA:
            raise AuditDatabaseError(f"{where}: audit report schema {data.get('schema')!r} is not {SCHEMA}", _FIX)
        missing = sorted(set(cls.FIELDS) - set(data))
        unknown = sorted(set(data) - set(cls.FIELDS))
        if missing or unknown:
            raise AuditDatabaseError(f"{where}: audit report lacks {missing} / has unknown {unknown}", _FIX)
        if not isinstance(data["findings"], list) or not isinstance(data["database"], dict):
            raise AuditDatabaseError(f"{where}: 'findings' must be a list and 'database' an object", _FIX)
        try:
            return cls(lock_sha256=_s(data["lock_sha256"]), row=_s(data["row"]), packages=int(data["packages"]),
                       database=dict(data["database"]), fail_on=_s(data["fail_on"]),
                       findings=tuple(Finding.from_dict(f, where) for f in data["findings"]),
                       problems=tuple(_s(p) for p in data["problems"]))
        except (TypeError, ValueError) as exc:
            raise AuditDatabaseError(f"{where}: malformed audit report ({exc})", _FIX) from exc

    @classmethod
    def from_json(cls, text: str | bytes, where: str = REPORT_NAME) -> AuditReport:
        from envbuilder.audit.database import parse_json

        return cls.from_dict(parse_json(text, where, _FIX), where)

    @classmethod
    def read(cls, path: Path) -> AuditReport:
        """An audit report file (bounded read; AuditDatabaseError or InputTooLargeError when it is not one)."""
        from envbuilder.jsonread import read_bytes

        return cls.from_json(read_bytes(path, what="audit report"), str(path))

    def replace(self, **changes: Any) -> AuditReport:
        return dataclasses.replace(self, **changes)


def finding_sort_key(f: Finding) -> tuple[int, str, str, str]:
    """Most severe first (unknown last), then by package, version and id."""
    return (-f.severity.rank, f.package, f.version, f.id)
