"""Fidelity to upstream's lock: how many packages a lock and upstream's uv.lock agree on, and why
each other one differs.

Of the packages both lock, a package agrees when the versions are equal. Every difference gets a
reason class (one spelling, here):

    documented-drop  the row leaves the package out (drop_packages) or upstream does
    override         the row pins or forces the package itself (a component fact, an override,
                     a platform fix for the target glibc)
    security         the row forces it to close a known vulnerability
    not-on-pypi      upstream took a version from another index that PyPI does not serve (at the cutoff)
    git-only         upstream built it from git (or a URL/path); PyPI does not serve that version
    unexplained      none of the above: a defect of the row, to be looked at

The comparison reads our uv.lock and the row's facts (the extract of upstream's lock and the
pins `resolve/upstream.py` derived from it); it never reads matrices/ itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from envbuilder.lock.uvlock import read_uv_lock
from envbuilder.matrix.upstream_lock import UpstreamLock
from envbuilder.resolve.upstream import UpstreamPins

REASONS = ("documented-drop", "override", "security", "not-on-pypi", "git-only", "unexplained")
UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class Difference:
    package: str
    ours: str
    upstream: str
    reason: str
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"package": self.package, "ours": self.ours, "upstream": self.upstream, "reason": self.reason,
                "why": self.why}


@dataclass(frozen=True)
class Fidelity:
    """A lock against upstream's lock: the figures and every difference with its reason."""

    target: str  # repo:uv.lock@tag
    target_sha256: str
    both: int  # packages both lock
    agree: int  # of those, the same version
    pinned: int  # upstream versions the lock pinned as constraints
    upstream_only: int  # packages only upstream locks (its other platforms, groups, extras)
    ours_only: int  # packages only this lock has (torch's CUDA wheels: upstream takes torch from the container)
    differences: tuple[Difference, ...]

    @property
    def percent(self) -> float:
        return round(100.0 * self.agree / self.both, 1) if self.both else 100.0

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.differences if d.reason == UNEXPLAINED]

    def by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.differences:
            out[d.reason] = out.get(d.reason, 0) + 1
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "target_sha256": self.target_sha256, "both": self.both, "agree": self.agree,
                "percent": self.percent, "pinned": self.pinned, "upstream_only": self.upstream_only,
                "ours_only": self.ours_only, "by_reason": self.by_reason(),
                "differences": [d.to_dict() for d in self.differences]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fidelity:
        return cls(str(data["target"]), str(data["target_sha256"]), int(data["both"]), int(data["agree"]),
                   int(data["pinned"]), int(data["upstream_only"]), int(data["ours_only"]),
                   tuple(Difference(**d) for d in data["differences"]))


def _same(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def our_versions(uv_lock: Path) -> dict[str, str]:
    """name -> version of a lock's packages (the lock's own project left out)."""
    return {p.name: p.version for p in read_uv_lock(uv_lock)
            if p.version and not ({"virtual", "editable"} & set(p.source))}


def compare(ours: dict[str, str], upstream: UpstreamLock, pins: UpstreamPins | None,
            platform_fixed: dict[str, str] | None = None) -> Fidelity:
    """Our versions against upstream's extract. `pins`: what the lock pinned and why it skipped
    the rest (None for a lock made without them: every difference is then unexplained);
    `platform_fixed`: package -> the platform constraint the lock added (glibc)."""
    skipped = {name: (reason, why) for name, reason, why in (pins.skipped if pins else ())}
    theirs = upstream.by_name
    both = sorted(set(ours) & set(theirs))
    diffs = []
    agree = 0
    for name in both:
        up = theirs[name]
        if _same(ours[name], up.version):
            agree += 1
            continue
        if name in (platform_fixed or {}):
            reason, why = "override", f"a platform fix for the target: {(platform_fixed or {})[name]}"
        elif name in skipped:
            reason, why = skipped[name]
        else:
            reason, why = UNEXPLAINED, "upstream's version was pinned, yet the lock differs" if pins else \
                "this lock was made without upstream's pins"
        diffs.append(Difference(name, ours[name], up.version, reason, why))
    return Fidelity(upstream.source, upstream.sha256, len(both), agree, len(pins.constraints) if pins else 0,
                    len(set(theirs) - set(ours)), len(set(ours) - set(theirs)), tuple(diffs))
