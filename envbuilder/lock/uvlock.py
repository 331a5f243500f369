"""Read a uv.lock: packages with their versions and files."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker

from envbuilder.atomic import write_atomic
from envbuilder.paths import cache_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


Edge = tuple[str, tuple[str, ...], str, str]  # (name, extras, version or "", marker or "")


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    source: dict[str, str]
    wheels: tuple[str, ...]  # file names
    has_sdist: bool
    dependencies: tuple[Edge, ...] = ()
    optional: dict[str, tuple[Edge, ...]] | None = None  # extra -> dependencies
    sdist_url: str | None = None
    sdist_sha256: str | None = None

    @property
    def from_registry(self) -> bool:
        return "registry" in self.source


def read_uv_lock(path: Path) -> list[LockedPackage]:
    # one lock run reads the same uv.lock several times (cache check, platform check, record):
    # parse each distinct text once
    return list(_parse_uv_lock(Path(path).read_text(encoding="utf-8")))


@functools.lru_cache(maxsize=8)
def _parse_uv_lock(text: str) -> tuple[LockedPackage, ...]:
    """Parse, or load the parse of the same text from the on-disk cache (keyed by its sha256).

    TOML parsing of a 400-package uv.lock costs ~0.14 s of pure Python, most of a `lock --check`;
    the cached form is JSON (no code runs on load) and any unreadable entry is just re-parsed.
    """
    key = hashlib.sha256(text.encode()).hexdigest()
    cached = cache_dir() / "uv-lock-parse" / f"v{_PARSE_CACHE_VERSION}-{key}.json"
    try:
        return tuple(_from_json(d) for d in json.loads(cached.read_bytes()))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    out = _parse_toml(text)
    with contextlib.suppress(OSError):
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cached, json.dumps([dataclasses.asdict(p) for p in out], separators=(",", ":")))
    return out


_PARSE_CACHE_VERSION = 2  # bump when LockedPackage or the parse changes


def _from_json(d: dict[str, Any]) -> LockedPackage:
    def edges(items: list[list[Any]]) -> tuple[Edge, ...]:
        return tuple((str(n), tuple(e), str(v), str(m)) for n, e, v, m in items)

    opt = d["optional"]
    return LockedPackage(name=d["name"], version=d["version"], source=dict(d["source"]), wheels=tuple(d["wheels"]),
                         has_sdist=bool(d["has_sdist"]), dependencies=edges(d["dependencies"]),
                         optional=None if opt is None else {k: edges(v) for k, v in opt.items()},
                         sdist_url=d["sdist_url"], sdist_sha256=d["sdist_sha256"])


def _parse_toml(text: str) -> tuple[LockedPackage, ...]:
    data = tomllib.loads(text)
    out = []
    for pkg in data.get("package", []):
        wheels = tuple(w.get("url", w.get("path", w.get("filename", ""))).rsplit("/", 1)[-1]
                       for w in pkg.get("wheels", []))
        src = pkg.get("source", {})
        sdist = pkg.get("sdist") or {}
        sdist_hash = str(sdist.get("hash", ""))
        out.append(LockedPackage(
            name=pkg["name"], version=str(pkg.get("version", "")),
            source={k: str(v) for k, v in src.items()}, wheels=wheels, has_sdist="sdist" in pkg,
            dependencies=_edges(pkg.get("dependencies", [])),
            optional={extra: _edges(deps) for extra, deps in pkg.get("optional-dependencies", {}).items()},
            sdist_url=str(sdist["url"]) if "url" in sdist else None,
            sdist_sha256=sdist_hash.removeprefix("sha256:") if sdist_hash.startswith("sha256:") else None,
        ))
    return tuple(out)


def _edges(deps: list[dict[str, Any]]) -> tuple[Edge, ...]:
    out = {(str(d["name"]), tuple(sorted(str(e) for e in d.get("extra") or [])), str(d.get("version", "")),
            str(d.get("marker", ""))) for d in deps}
    return tuple(sorted(out))


def marker_env(python: str) -> dict[str, str]:
    """The environment markers of the target: CPython `python` on Linux x86_64."""
    return {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
            "platform_machine": "x86_64", "platform_system": "Linux", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "extra": ""}


def _applies(marker: str, env: dict[str, str] | None) -> bool:
    if not marker or env is None:
        return True
    try:
        return bool(Marker(marker).evaluate(env))
    except InvalidMarker:
        return True


def stage1_packages(packages: list[LockedPackage], root: str, python: str | None = None) -> list[LockedPackage]:
    """What `uv sync` without extras installs: the root's plain dependencies and, transitively,
    theirs, following the extras each edge asks for (nemo-toolkit[all]). With `python`, edges
    whose marker excludes that interpreter are skipped (None: every edge, all interpreters)."""
    env = marker_env(python) if python else None
    by_key: dict[tuple[str, str], LockedPackage] = {(p.name, p.version): p for p in packages}
    by_name: dict[str, list[LockedPackage]] = {}
    for p in packages:
        by_name.setdefault(p.name, []).append(p)
    roots = by_name.get(root, [])
    stack: list[Edge] = list(roots[0].dependencies) if roots else []
    seen: set[tuple[str, str, str]] = set()
    found: dict[tuple[str, str], LockedPackage] = {}
    while stack:
        name, extras, version, marker = stack.pop()
        if not _applies(marker, env):
            continue
        candidates = [by_key[(name, version)]] if version and (name, version) in by_key else by_name.get(name, [])
        for pkg in candidates:
            found[(pkg.name, pkg.version)] = pkg
            for extra in ("", *extras):
                key = (pkg.name, pkg.version, extra)
                if key in seen:
                    continue
                seen.add(key)
                stack.extend(pkg.dependencies if not extra else (pkg.optional or {}).get(extra, ()))
    return sorted(found.values(), key=lambda p: (p.name, p.version))


def stage1_closure(packages: list[LockedPackage], root: str, python: str | None = None) -> set[str]:
    return {p.name for p in stage1_packages(packages, root, python)}


def locked_versions(path: Path) -> dict[str, str]:
    return {p.name: p.version for p in read_uv_lock(path) if p.version}
