"""`envbuilder audit LOCKDIR`: every locked package version against an OSV database.

The lock is read through the lock layer (`open_lockdir`, the one door to a lock directory, binds the
report to the uv.lock it hashes; `read_uv_lock` lists the packages). Every package uv locked from an
index is audited, on every platform the lock covers: the project itself (a virtual or local source) is
not a PyPI release.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envbuilder.audit.database import AdvisorySource, Lookup
from envbuilder.audit.osv import Advisory
from envbuilder.audit.report import AuditReport, Finding, finding_sort_key
from envbuilder.audit.severity import Threshold
from envbuilder.lock.lockdir import open_lockdir
from envbuilder.lock.uvlock import read_uv_lock
from envbuilder.progress import Progress

#: sources that are the project being locked, not a release of a package index
LOCAL_SOURCES = ("virtual", "editable", "directory", "path")
#: which id a group of aliasing advisories is shown under: GitHub's (it carries a severity), then PyPA's
_ID_PREFERENCE = ("GHSA-", "PYSEC-")
OSV_PAGE = "https://osv.dev/vulnerability/"


@dataclass(frozen=True)
class AuditOptions:
    lockdir: Path
    source: AdvisorySource
    fail_on: Threshold
    ignore: tuple[str, ...] = ()


def locked_packages(lockdir: Path) -> list[tuple[str, str]]:
    """(name, version) of every package the lock takes from an index or a remote source, sorted."""
    pkgs = read_uv_lock(Path(lockdir) / "uv.lock")
    return sorted({(p.name, p.version) for p in pkgs
                   if p.version and not any(k in p.source for k in LOCAL_SOURCES)})


def run_audit(opts: AuditOptions, progress: Progress = lambda _m: None) -> AuditReport:
    record = open_lockdir(opts.lockdir, verify_only=("uv.lock",)).record
    packages = locked_packages(opts.lockdir)
    progress(f"auditing {len(packages)} locked package version(s) of {record.row} "
             f"(lock {record.lock_sha256[:12]})")
    found = opts.source.lookup(packages, progress)
    findings, problems = _findings(packages, found)
    wanted = set(opts.ignore)
    findings = [_ignored(f) if f.names() & wanted else f for f in findings]
    unused = sorted(wanted - {n for f in findings for n in f.names()})
    if unused:
        progress(f"warning: --ignore {', '.join(unused)} matched no finding")
    return AuditReport(lock_sha256=record.lock_sha256, row=record.row, packages=len(packages),
                       database=opts.source.describe(), fail_on=opts.fail_on.text,
                       findings=tuple(sorted(findings, key=finding_sort_key)), problems=tuple(sorted(set(problems))))


def _ignored(f: Finding) -> Finding:
    from dataclasses import replace

    return replace(f, ignored=True)


def _findings(packages: list[tuple[str, str]], found: Lookup) -> tuple[list[Finding], list[str]]:
    from packaging.utils import canonicalize_name

    findings: list[Finding] = []
    problems = list(found.problems)
    for name, version in packages:
        key = canonicalize_name(name)
        reported = found.reported.get((key, version), set()) if found.reported is not None else set()
        hits: list[tuple[Advisory, list[str]]] = []
        for adv in found.by_package.get(key, []):
            affected, fixes, trouble = adv.match(name, version)
            if not affected and adv.id in reported:
                problems.append(f"{adv.id}: the OSV service lists it for {name} {version}, whose version its "
                                "ranges (as read here) do not cover; reported as the service says")
                affected = True
            if affected:
                hits.append((adv, fixes))
            else:
                problems.extend(trouble)
        findings.extend(_merge(name, version, group) for group in _alias_groups(hits))
    return findings, problems


def _alias_groups(hits: list[tuple[Advisory, list[str]]]) -> list[list[tuple[Advisory, list[str]]]]:
    """Advisories of one package version that name each other (id or alias) are one vulnerability."""
    groups: list[tuple[set[str], list[tuple[Advisory, list[str]]]]] = []
    for adv, fixes in sorted(hits, key=lambda h: h[0].id):
        names = {adv.id, *adv.aliases}
        joined = [g for g in groups if g[0] & names]
        for g in joined:
            groups.remove(g)
            names |= g[0]
        members = [m for g in joined for m in g[1]] + [(adv, fixes)]
        groups.append((names, members))
    return [sorted(g[1], key=lambda m: m[0].id) for g in groups]


def _primary(advs: list[Advisory]) -> Advisory:
    def rank(a: Advisory) -> tuple[int, str]:
        pos = next((i for i, p in enumerate(_ID_PREFERENCE) if a.id.startswith(p)), len(_ID_PREFERENCE))
        return (pos, a.id)

    return min(advs, key=rank)


def _merge(name: str, version: str, group: list[tuple[Advisory, list[str]]]) -> Finding:
    advs = [a for a, _f in group]
    main = _primary(advs)
    names = {n for a in advs for n in (a.id, *a.aliases)}
    fixes = sorted({f for _a, fs in group for f in fs}, key=lambda v: _version_key(v))
    severity = max((a.severity for a in advs), key=lambda s: (s.rank, s.score if s.score is not None else -1.0))
    return Finding(id=main.id, aliases=tuple(sorted(names - {main.id})), package=name, version=version,
                   fixed=tuple(fixes), severity=severity,
                   summary=main.summary or next((a.summary for a in advs if a.summary), ""),
                   modified=max(a.modified for a in advs), url=OSV_PAGE + main.id)


def _version_key(v: str) -> tuple[int, object, str]:
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(v), v)
    except InvalidVersion:
        return (1, v, v)
