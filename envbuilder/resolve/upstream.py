"""Upstream's lock as constraints: a Megatron-Bridge row locks the versions upstream locked.

The row cites the extract of upstream's uv.lock (matrix/upstream_lock.py). Every package there
that PyPI serves at this lock's cutoff is pinned (`name==version` in uv's constraint-dependencies,
pre-releases included: an exact pin names them explicitly), except where the row decides
otherwise: the components it pins itself, what `--set` changes, what it drops, and overrides
that upstream's version does not satisfy. Pure: facts in, requirement strings out; the skipped
packages come back with the reason `lock/fidelity.py` records for any difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder.matrix.model import DroppedPackage, OverrideDependency, Release
from envbuilder.matrix.upstream_lock import PYPI, UpstreamPin


@dataclass(frozen=True)
class UpstreamPins:
    """What a lock takes from upstream's lock: the constraints, and why each other package is not pinned."""

    target: str  # repo:uv.lock@tag
    constraints: tuple[str, ...]
    skipped: tuple[tuple[str, str, str], ...]  # (package, reason class, why)


def _utc(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def upstream_pins(row: Release, pinned: set[str], cutoff_of: dict[str, str]) -> UpstreamPins | None:
    """The row's upstream pins for a lock whose own pins are `pinned` (package names) and whose
    cutoff per package is `cutoff_of` (default key "*": the row's exclude-newer)."""
    lock = row.upstream_lock
    if lock is None:
        return None
    drops = {str(canonicalize_name(d.package)): d for d in row.drop_packages}
    forced = {}
    for o in row.override_dependencies:
        req = Requirement(o.requirement)
        forced[str(canonicalize_name(req.name))] = (req, o)
    out: list[str] = []
    skipped: list[tuple[str, str, str]] = []
    for p in lock.pins:
        reason = _skip(p, pinned, drops, forced, cutoff_of)
        if reason is None:
            out.append(f"{p.name}=={p.version}")
        else:
            skipped.append((p.name, *reason))
    return UpstreamPins(lock.source, tuple(out), tuple(skipped))


def _skip(p: UpstreamPin, pinned: set[str], drops: dict[str, DroppedPackage],
          forced: dict[str, tuple[Requirement, OverrideDependency]], cutoff_of: dict[str, str]
          ) -> tuple[str, str] | None:
    if p.kind == "editable":
        return "override", "upstream's own workspace member; the row pins its PyPI release"
    if p.origin != PYPI and (Version(p.version).local is not None or not p.on_pypi):
        return ("git-only" if p.kind in ("git", "url", "path") else "not-on-pypi",
                f"upstream takes {p.version} from {p.origin}; PyPI does not serve it")
    if p.name in pinned:
        return "override", "the row pins this component itself"
    if p.name in drops:
        return "documented-drop", "the row leaves it out (drop_packages)"
    if p.name in forced:
        req, o = forced[p.name]
        try:
            ok = Version(p.version) in req.specifier
        except InvalidVersion:
            ok = False
        if not ok:
            kind = "security" if o.reason == "security" else "override"
            return kind, f"the row forces {req} (override_dependencies)"
    if p.origin != PYPI:
        cutoff = cutoff_of.get(p.name, cutoff_of["*"])
        if p.pypi_upload and _utc(p.pypi_upload) > _utc(cutoff):
            return "not-on-pypi", f"PyPI's {p.version} came {p.pypi_upload}, after this lock's cutoff {cutoff}"
    return None
