"""OSV records (https://ossf.github.io/osv-schema/) and whether one affects a PyPI package version.

An `Advisory` is parsed once from a record's JSON, keeping what the audit needs: id, aliases, summary,
severity, and for every `affected` entry of the PyPI ecosystem its package, explicit `versions` list and
`ranges`. Matching follows the schema's evaluation rules:

- `versions`: the version is affected when it is listed (compared as PEP 440 versions, so "1.0" = "1.0.0").
- ECOSYSTEM and SEMVER ranges: events sorted by version ("0" lowest); walking them, `introduced` at or
  below the version makes it vulnerable, `fixed` at or below it (or `last_affected` below it) ends that.
  `limit` events cap the range: the version must be below one of them. ECOSYSTEM versions of PyPI order
  by PEP 440 (`packaging`), SEMVER ones by SemVer 2.0.0 precedence. GIT ranges name commits, not
  versions; records that have them also list the versions they cover.
- The fixed version reported is the `fixed` event that ends the interval the version is in (None when the
  interval is closed by `last_affected` or left open: no fix is known).

A range that cannot be evaluated (a bound that does not parse in its ordering, an event that is not one
key with a version such as the `{}` some published PYSEC records carry, a range type OSV does not define)
is skipped, never read as "not affected": the record still answers through its other ranges and its
`versions` list, and when nothing says the version is affected the audit lists the skip under `problems`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import total_ordering
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder.audit.severity import Severity, severity_of

ECOSYSTEM = "PyPI"
_EVENT_KINDS = ("introduced", "fixed", "last_affected", "limit")


class RecordError(ValueError):
    """An OSV record lacks a field the schema requires, or has one of the wrong type."""


@total_ordering
@dataclass(frozen=True)
class SemVer:
    """SemVer 2.0.0 precedence (build metadata ignored)."""

    core: tuple[int, int, int]
    pre: tuple[int | str, ...] = ()

    _RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")

    @classmethod
    def parse(cls, text: str) -> SemVer:
        m = cls._RE.fullmatch(text.strip())
        if not m:
            raise ValueError(f"not a SemVer version: {text!r}")
        pre = tuple(int(p) if p.isdigit() else p for p in m.group(4).split(".")) if m.group(4) else ()
        return cls((int(m.group(1)), int(m.group(2)), int(m.group(3))), pre)

    def _key(self) -> tuple[Any, ...]:
        # a release sorts after its pre-releases; numeric identifiers sort before alphanumeric ones
        return (self.core, not self.pre, tuple((isinstance(p, str), p) for p in self.pre))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, SemVer):
            return NotImplemented
        return self._key() < other._key()


def parse_version(text: str, kind: str) -> Version | SemVer:
    """A version in a range's ordering; ValueError when it is not one."""
    if kind == "SEMVER":
        return SemVer.parse(text)
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise ValueError(str(exc)) from exc


@dataclass(frozen=True)
class Range:
    kind: str  # ECOSYSTEM | SEMVER (GIT ranges are not kept)
    events: tuple[tuple[str, str], ...]  # (introduced|fixed|last_affected|limit, version), as in the record
    #: why the range cannot be evaluated (an event that is not one key with a string, as `{}` in some
    #: published PYSEC records); the record's versions list still answers
    broken: str = ""

    def match(self, version: str) -> tuple[bool, str | None]:
        """(affected, the fixed version that ends the interval holding `version`).

        ValueError when the range is broken, or `version` or a bound cannot be read in its ordering."""
        if self.broken:
            raise ValueError(self.broken)
        v = parse_version(version, self.kind)
        zero = "0"
        ordered = [((None if val == zero else parse_version(val, self.kind)), _EVENT_KINDS.index(kind), kind, val)
                   for kind, val in self.events if kind != "limit"]
        limits = [parse_version(val, self.kind) for kind, val in self.events if kind == "limit" and val != "*"]
        affected = False
        later: list[tuple[str, str]] = []  # events above the version, in order
        for bound, _order, kind, raw in sorted(ordered, key=_sort_key):
            if kind == "introduced" and (bound is None or v >= bound):
                affected = True
            elif bound is not None and ((kind == "fixed" and v >= bound) or (kind == "last_affected" and v > bound)):
                affected = False
            else:
                later.append((kind, raw))
        # the interval holding the version ends at the first fixed / last_affected above it
        closer = next(((k, raw) for k, raw in later if k in ("fixed", "last_affected")), None)
        fixed = closer[1] if affected and closer is not None and closer[0] == "fixed" else None
        if affected and limits and not any(v < lim for lim in limits):
            affected = False
        return affected, (fixed if affected else None)


def _sort_key(item: tuple[Any, int, str, str]) -> tuple[int, Any, int]:
    bound, order, _kind, _raw = item
    return (0, 0, order) if bound is None else (1, bound, order)


@dataclass(frozen=True)
class Affected:
    """One `affected` entry of the PyPI ecosystem."""

    package: str  # canonical (PEP 503) name
    versions: tuple[str, ...]
    ranges: tuple[Range, ...]


@dataclass(frozen=True)
class Advisory:
    """The parts of an OSV record an audit needs."""

    id: str
    aliases: tuple[str, ...]
    summary: str
    modified: str
    severity: Severity
    affected: tuple[Affected, ...]
    withdrawn: str | None = None
    references: tuple[str, ...] = field(default=())

    @property
    def packages(self) -> set[str]:
        return {a.package for a in self.affected}

    def match(self, package: str, version: str) -> tuple[bool, list[str], list[str]]:
        """(affected, fixed versions that end the affected intervals, problems met while matching).

        Matching never passes a version silently on a bound it cannot read: the problem is returned."""
        name = canonicalize_name(package)
        hit = False
        fixes: set[str] = set()
        problems: list[str] = []
        for aff in self.affected:
            if aff.package != name:
                continue
            if _listed(version, aff.versions):
                hit = True
            for rng in aff.ranges:
                try:
                    ok, fix = rng.match(version)
                except ValueError as exc:
                    problems.append(f"{self.id}: {rng.kind} range of {name} cannot be evaluated for {version} "
                                    f"({exc})")
                    continue
                if ok:
                    hit = True
                    if fix:
                        fixes.add(fix)
        return hit, sorted(fixes, key=_fix_key), problems


def _fix_key(v: str) -> tuple[int, Any, str]:
    try:
        return (0, Version(v), v)
    except InvalidVersion:
        return (1, v, v)


def _listed(version: str, versions: tuple[str, ...]) -> bool:
    if version in versions:
        return True
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    for listed in versions:
        try:
            if Version(listed) == v:
                return True
        except InvalidVersion:
            continue
    return False


def _str(d: dict[str, Any], key: str, where: str, required: bool = False) -> str:
    value = d.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise RecordError(f"{where}: '{key}' must be a string")
    return value


def _list(d: dict[str, Any], key: str, where: str) -> list[Any]:
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise RecordError(f"{where}: '{key}' must be a list")
    return value


def _range(r: Any, where: str) -> Range | None:
    if not isinstance(r, dict):
        raise RecordError(f"{where}: a range is not an object")
    kind = _str(r, "type", where, required=True)
    events: list[tuple[str, str]] = []
    broken = ""
    for e in _list(r, "events", where):
        if (isinstance(e, dict) and len(e) == 1 and next(iter(e)) in _EVENT_KINDS
                and isinstance(next(iter(e.values())), str)):
            ((k, v),) = e.items()
            events.append((k, v))
        else:
            broken = broken or f"event {json.dumps(e)[:60]} is not one of {', '.join(_EVENT_KINDS)} with a version"
    if kind == "GIT":
        return None  # commits, not versions; the record's versions list covers them
    if kind not in ("ECOSYSTEM", "SEMVER"):
        broken = broken or f"range type {kind!r} is not one OSV defines"
    return Range(kind, tuple(events), broken)


def parse_advisory(record: Any, where: str = "OSV record") -> Advisory:
    """The typed advisory of one OSV record; RecordError when the record's shape is wrong."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: not a JSON object")
    vid = _str(record, "id", where, required=True)
    where = f"{where} {vid}"
    aliases = _list(record, "aliases", where)
    if not all(isinstance(a, str) for a in aliases):
        raise RecordError(f"{where}: 'aliases' must be a list of strings")
    affected: list[Affected] = []
    for aff in _list(record, "affected", where):
        if not isinstance(aff, dict):
            raise RecordError(f"{where}: an 'affected' entry is not an object")
        pkg = aff.get("package")
        if not isinstance(pkg, dict):
            continue  # an entry without a package (e.g. a GIT-only range of a repository) names no PyPI project
        if _str(pkg, "ecosystem", where) != ECOSYSTEM:
            continue
        versions = _list(aff, "versions", where)
        if not all(isinstance(v, str) for v in versions):
            raise RecordError(f"{where}: 'versions' must be a list of strings")
        ranges = [r for r in (_range(r, where) for r in _list(aff, "ranges", where)) if r is not None]
        affected.append(Affected(canonicalize_name(_str(pkg, "name", where, required=True)), tuple(versions),
                                 tuple(ranges)))
    refs = tuple(str(r["url"]) for r in _list(record, "references", where) if isinstance(r, dict)
                 and isinstance(r.get("url"), str))
    withdrawn = record.get("withdrawn")
    summary = _str(record, "summary", where) or _first_line(_str(record, "details", where))
    return Advisory(id=vid, aliases=tuple(sorted(set(aliases) - {vid})), summary=summary,
                    modified=_str(record, "modified", where), severity=severity_of(record), affected=tuple(affected),
                    withdrawn=withdrawn if isinstance(withdrawn, str) else None, references=refs)


def _first_line(details: str, width: int = 160) -> str:
    """A summary for records that have only `details` (many PYSEC records): its first line of text."""
    line = next((ln.strip().lstrip("#").strip() for ln in details.splitlines() if ln.strip().lstrip("#").strip()), "")
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"
