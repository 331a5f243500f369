"""Check that every locked package installs on the target platform, and find the fix when not.

The target is one interpreter (cpXY), one glibc (from the base OS) and x86_64. A package
passes with a compatible wheel or an sdist. A package whose only wheels need a newer glibc
(nvidia-resiliency-ext 0.5+ is manylinux_2_39-only) gets a constraint below the first
release that broke it, found from the index's release list.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envbuilder.lock.uvlock import LockedPackage
from envbuilder.tls import ssl_context


@dataclass(frozen=True)
class PlatformProblem:
    package: str
    version: str
    kind: str  # "glibc" (wheels need a newer glibc) or "no-file" (nothing for this python/arch)
    detail: str


def target_tags(python: str, glibc: str, arch: str = "x86_64") -> set[Tag]:
    return set(_target_tags(python, glibc, arch))


def _platforms(glibc: str, arch: str) -> list[str]:
    """manylinux platform tags a glibc runs, newest first (the order installers prefer them in)."""
    gmaj, gmin = (int(x) for x in glibc.split("."))
    platforms = [f"manylinux_{gmaj}_{m}_{arch}" for m in range(gmin, 4, -1)]
    legacy = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}
    platforms += [f"{legacy[m]}_{arch}" for m in sorted(legacy, reverse=True) if m <= gmin]
    platforms.append(f"linux_{arch}")
    return platforms


@functools.lru_cache(maxsize=32)  # one lock asks for the same targets several times
def tag_ranks(python: str, glibc: str, arch: str = "x86_64") -> dict[Tag, int]:
    """Each target tag's preference, 0 = best: packaging's order (this CPython's ABI before abi3 before
    py3-none, the newest manylinux first), the order installers pick wheels in."""
    major, minor = (int(x) for x in python.split("."))
    platforms = _platforms(glibc, arch)
    ranks: dict[Tag, int] = {}
    for i, t in enumerate([*cpython_tags((major, minor), platforms=platforms),
                           *compatible_tags((major, minor), platforms=platforms)]):
        ranks.setdefault(t, i)
    return ranks


@functools.lru_cache(maxsize=32)
def _target_tags(python: str, glibc: str, arch: str) -> frozenset[Tag]:
    return frozenset(tag_ranks(python, glibc, arch))


@functools.lru_cache(maxsize=4096)  # a lock's wheels are checked for several interpreters
def _wheel_tags(filename: str) -> frozenset[Tag]:
    try:
        return parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return frozenset()


def _needs_newer_glibc(filename: str, python: str, arch: str) -> bool:
    """A wheel for this python/arch whose manylinux tag is simply too new."""
    major, minor = python.split(".")
    for tag in _wheel_tags(filename):
        py_ok = tag.interpreter in (f"cp{major}{minor}", f"py{major}", f"py{major}{minor}") or tag.abi == "abi3"
        if py_ok and tag.platform.startswith("manylinux_") and tag.platform.endswith(arch):
            return True
    return False


def check_platform(packages: list[LockedPackage], python: str, glibc: str,
                   arch: str = "x86_64") -> list[PlatformProblem]:
    tags = target_tags(python, glibc, arch)
    problems = []
    for pkg in packages:
        if not pkg.from_registry or pkg.has_sdist:
            continue
        if any(_wheel_tags(w) & tags for w in pkg.wheels):
            continue
        if any(_needs_newer_glibc(w, python, arch) for w in pkg.wheels):
            needed = sorted({t.platform for w in pkg.wheels for t in _wheel_tags(w) if t.platform.endswith(arch)})
            problems.append(PlatformProblem(pkg.name, pkg.version, "glibc",
                                            f"only {', '.join(needed)} wheels; target glibc is {glibc}"))
        else:
            problems.append(PlatformProblem(pkg.name, pkg.version, "no-file",
                                            f"no wheel for cp{python.replace('.', '')} {arch} and no sdist"))
    return problems


def source_builds(packages: list[LockedPackage], python: str, glibc: str, arch: str = "x86_64"
                  ) -> tuple[list[str], list[str]]:
    """(compiled, sdist_only) packages that install from source on this target.

    compiled: the project ships binary wheels, just none for this interpreter/platform, so the
    sdist is compiled here (pyzmq 23.2.1 on 3.12: fails); sdist_only: the project ships no wheel
    at all (mostly pure-Python setup.py packages, which build quickly).
    """
    tags = target_tags(python, glibc, arch)
    compiled, sdist_only = [], []
    for pkg in packages:
        if not pkg.from_registry or not pkg.has_sdist:
            continue
        if not pkg.wheels:
            sdist_only.append(f"{pkg.name}=={pkg.version}")
        elif not any(_wheel_tags(w) & tags for w in pkg.wheels):
            compiled.append(f"{pkg.name}=={pkg.version}")
    return sorted(compiled), sorted(sdist_only)


def fetch_release_files(package: str, ca_bundle: Path | None = None,
                        index_json: str = "https://pypi.org/pypi/{name}/json") -> dict[str, list[dict[str, str]]]:
    """version -> [{filename, upload_time}] from the index's JSON API."""
    url = index_json.format(name=package)
    import urllib.request

    with urllib.request.urlopen(url, timeout=60, context=ssl_context(ca_bundle)) as resp:
        data = json.load(resp)
    return {v: [{"filename": f["filename"], "upload_time": f.get("upload_time", "")} for f in files]
            for v, files in data.get("releases", {}).items()}


def find_constraint(problem: PlatformProblem, releases: dict[str, list[dict[str, str]]], python: str,
                    glibc: str, cutoff: str | None, arch: str = "x86_64") -> str | None:
    """`name<V`, V the first release after the newest one that installs on the target."""
    tags = target_tags(python, glibc, arch)
    limit = datetime.fromisoformat(cutoff.replace("Z", "+00:00")).replace(tzinfo=None) if cutoff else None

    def ok(files: list[dict[str, str]]) -> bool:
        for f in files:
            if limit and f["upload_time"] and datetime.fromisoformat(f["upload_time"][:19]) > limit:
                continue
            if f["filename"].endswith((".tar.gz", ".zip")) or _wheel_tags(f["filename"]) & tags:
                return True
        return False

    versions = []
    for v in releases:
        try:
            versions.append(Version(v))
        except InvalidVersion:
            continue
    versions.sort()
    good = [v for v in versions if not v.is_prerelease and ok(releases[str(v)])]
    if not good:
        return None
    best = good[-1]
    later = [v for v in versions if v > best and not v.is_prerelease]
    return f"{problem.package}<{later[0]}" if later else None
