"""Which files a lock installs on its target: what `uv export` lists, matched to uv.lock's files.

uv itself decides the install set (`uv export --frozen --extra compile`, markers included); the
target's markers (Python, Linux x86_64) are evaluated here. For each package the bundle carries the
one wheel the target's installer would pick among those that fit its tags, or the sdist when none
does, and always the sdist of a stage-2
package (so the target can compile it against its own torch).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import InvalidMarker, Marker
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from envbuilder.errors import LockDirError, UvError
from envbuilder.kernels.lockfiles import LockedFile, read_locked_files
from envbuilder.lock.platform import tag_ranks, target_tags
from envbuilder.lock.record import RECORD_NAME
from envbuilder.lock.uvlock import marker_env
from envbuilder.lock.uvrun import uv_binary, uv_env

LOCK_FILES = ("pyproject.toml", "uv.lock", RECORD_NAME)


@dataclass(frozen=True)
class Requirement:
    name: str            # canonical
    version: str         # "" for a path requirement
    path: str | None     # "./wheels/x.whl" for a lock-dir wheel
    marker: str


@dataclass(frozen=True)
class PlannedFile:
    package: str
    version: str
    kind: str            # wheel | sdist
    file: LockedFile


def export_requirements(lockdir: Path, extras: list[str], no_emit: list[str] | None = None) -> str:
    """`uv export --frozen` of a lock directory (offline: reads uv.lock only)."""
    with tempfile.TemporaryDirectory(prefix="envbuilder-export-") as tmp:
        for name in LOCK_FILES:
            if (lockdir / name).exists():
                shutil.copy2(lockdir / name, Path(tmp) / name)
        cmd = [uv_binary(), "export", "--frozen", "--offline", "--no-emit-project", "--format", "requirements-txt",
               "--no-header", "--no-annotate"]
        for extra in extras:
            cmd += ["--extra", extra]
        for name in no_emit or []:
            cmd += ["--no-emit-package", name]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=uv_env(None))
    if proc.returncode != 0:
        raise UvError(f"uv export failed: {proc.stderr.strip()[-300:]}", "re-run envbuilder lock for this directory")
    return proc.stdout


def parse_requirements(text: str) -> list[Requirement]:
    out = []
    for logical in re.sub(r"\\\n\s*", " ", text).splitlines():
        line = logical.split(" --hash", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        spec, _, marker = line.partition(";")
        spec = spec.strip()
        if spec.startswith(("./", "/", "file:")):
            path = spec
            try:
                name = str(parse_wheel_filename(Path(spec).name)[0])
            except InvalidWheelFilename:
                name = Path(spec).name
            out.append(Requirement(name, "", path, marker.strip()))
            continue
        m = re.match(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;]+)", spec)
        if not m:
            raise LockDirError(f"uv export printed a requirement envbuilder cannot read: {spec!r}",
                               "lock with --source pypi (bundles carry index files and lock-dir wheels only)")
        out.append(Requirement(str(canonicalize_name(m.group(1))), m.group(2), None, marker.strip()))
    return out


def applies(marker: str, python: str) -> bool:
    if not marker:
        return True
    try:
        return bool(Marker(marker).evaluate(marker_env(python)))
    except InvalidMarker:
        return True


def plan_files(lockdir: Path, python: str, glibc: str, stage2: list[str]) -> list[PlannedFile]:
    """Every index file the target installs (stage 1 + stage 2 and their dependencies)."""
    reqs = [r for r in parse_requirements(export_requirements(lockdir, ["compile"] if stage2 else []))
            if applies(r.marker, python)]
    locked = read_locked_files(lockdir / "uv.lock")
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
        fitting = [w for w in files.wheels if _fits(w.filename, tags)]
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
