"""Which files a lock installs on its target: its install set (lock.installset), matched to uv.lock's files.

For each package the bundle carries the one wheel the target's installer would pick among those that
fit its tags, or the sdist when none does, and always the sdist of a stage-2 package (so the target
can compile it against its own torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from envbuilder.errors import LockDirError
from envbuilder.lock.installset import LOCK_FILES, installed_packages
from envbuilder.lock.platform import tag_ranks, target_tags
from envbuilder.lock.uvlock import LockedFile, read_uv_lock

__all__ = ["LOCK_FILES", "PlannedFile", "plan_files"]


@dataclass(frozen=True)
class PlannedFile:
    package: str
    version: str
    kind: str            # wheel | sdist
    file: LockedFile


def plan_files(lockdir: Path, python: str, glibc: str, stage2: list[str]) -> list[PlannedFile]:
    """Every index file the target installs (stage 1 + stage 2 and their dependencies)."""
    reqs = installed_packages(lockdir, python, stage2=bool(stage2))
    locked = {(p.name, p.version): p for p in read_uv_lock(lockdir / "uv.lock")}
    tags = target_tags(python, glibc)
    ranks = tag_ranks(python, glibc)
    stage2_names = {str(canonicalize_name(n)) for n in stage2}
    planned: list[PlannedFile] = []
    for req in reqs:
        if req.path is not None:
            continue  # a lock-dir wheel: it travels inside lock/
        files = locked.get((req.name, req.version))
        if files is None:
            raise LockDirError(f"{req.name}=={req.version} is exported but not in uv.lock", "re-run envbuilder lock")
        fitting = [w for w in files.wheel_files if _fits(w.filename, tags)]
        if fitting:  # the one wheel the target's installer would pick (pillow locks two that fit glibc 2.35)
            best = min(fitting, key=lambda w: (_rank(w.filename, ranks), w.filename))
            planned.append(PlannedFile(req.name, req.version, "wheel", best))
        if files.sdist is not None and (not fitting or req.name in stage2_names):
            planned.append(PlannedFile(req.name, req.version, "sdist", files.sdist))
        if not fitting and files.sdist is None:
            raise LockDirError(f"{req.name}=={req.version}: uv.lock has no wheel for Python {python} / glibc {glibc} "
                               "and no sdist", "re-lock for this target (--python, --glibc)")
    return sorted(planned, key=lambda p: (p.package, p.kind, p.file.filename))


def _rank(filename: str, ranks: dict[Tag, int]) -> int:
    return min((ranks[t] for t in parse_wheel_filename(filename)[3] if t in ranks), default=len(ranks))


def _fits(filename: str, tags: set[Tag]) -> bool:
    try:
        return bool(parse_wheel_filename(filename)[3] & tags)
    except InvalidWheelFilename:
        return False
