"""uv.lock, read once into one package model: each package's version, source, dependency edges and files.

`read_uv_lock` is the only parser of uv.lock (lock, kernels, bundle, certify and audit read it here);
`check_uv_lock` is the integrity check every lock-directory binding runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker

from envbuilder.atomic import write_atomic
from envbuilder.errors import MalformedFileError
from envbuilder.paths import cache_dir
from envbuilder.toml_cache import tomllib

Edge = tuple[str, tuple[str, ...], str, str]  # (name, extras, version or "", marker or "")


@dataclass(frozen=True)
class LockedFile:
    """A file uv.lock names by URL and sha256 (an sdist or a wheel on an index)."""

    url: str
    sha256: str
    size: int | None

    @property
    def filename(self) -> str:
        return urllib.parse.unquote(self.url.rsplit("/", 1)[-1].split("#", 1)[0])


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    source: dict[str, str]
    wheels: tuple[str, ...]  # file names of every wheel (index, path or URL)
    has_sdist: bool
    dependencies: tuple[Edge, ...] = ()
    optional: dict[str, tuple[Edge, ...]] | None = None  # extra -> dependencies
    sdist: LockedFile | None = None  # the sdist, when uv.lock gives its URL and sha256
    wheel_files: tuple[LockedFile, ...] = ()  # the wheels uv.lock gives a URL and sha256 for

    @property
    def from_registry(self) -> bool:
        return "registry" in self.source


def read_uv_lock(path: Path) -> list[LockedPackage]:
    """Every package of a uv.lock; MalformedFileError when it is not UTF-8 TOML listing named packages."""
    # one lock run reads the same uv.lock several times (cache check, platform check, record):
    # parse each distinct text once
    fix = f"re-create it with: envbuilder lock --nemo TAG -o {Path(path).parent}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFileError(f"{path}: not UTF-8 text", fix) from exc
    try:
        return list(_parse_uv_lock(text))
    except tomllib.TOMLDecodeError as exc:
        raise MalformedFileError(f"{path}: not valid TOML ({exc})", fix) from exc
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise MalformedFileError(f"{path}: [[package]] entries without a name, or of another shape ({exc})",
                                 fix) from exc


def by_name(packages: list[LockedPackage]) -> dict[str, LockedPackage]:
    """{name: package}; for a name locked twice (per-platform forks) the highest key wins, deterministically."""
    return {p.name: p for p in sorted(packages, key=lambda p: (p.name, p.version))}


def check_uv_lock(path: Path) -> list[LockedPackage]:
    """uv.lock must be TOML that lists named packages, and every dependency must name a package that is there:
    a file cut at a line boundary still parses, and hashes alone cannot tell it from a good one."""
    packages = read_uv_lock(path)
    names = {p.name for p in packages}
    for p in packages:
        for dep in (*p.dependencies, *(e for deps in (p.optional or {}).values() for e in deps)):
            if dep[0] not in names:
                raise MalformedFileError(f"{path}: {p.name} depends on {dep[0]}, which the file does not list "
                                         "(truncated or edited?)",
                                         f"re-create it with: envbuilder lock --nemo TAG -o {Path(path).parent}")
    return packages


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


_PARSE_CACHE_VERSION = 3  # bump when LockedPackage or the parse changes


def _from_json(d: dict[str, Any]) -> LockedPackage:
    def edges(items: list[list[Any]]) -> tuple[Edge, ...]:
        return tuple((str(n), tuple(e), str(v), str(m)) for n, e, v, m in items)

    def file(f: dict[str, Any]) -> LockedFile:
        return LockedFile(str(f["url"]), str(f["sha256"]), f["size"] if isinstance(f["size"], int) else None)

    opt = d["optional"]
    return LockedPackage(name=d["name"], version=d["version"], source=dict(d["source"]), wheels=tuple(d["wheels"]),
                         has_sdist=bool(d["has_sdist"]), dependencies=edges(d["dependencies"]),
                         optional=None if opt is None else {k: edges(v) for k, v in opt.items()},
                         sdist=file(d["sdist"]) if d["sdist"] else None,
                         wheel_files=tuple(file(w) for w in d["wheel_files"]))


def _file(entry: object) -> LockedFile | None:
    """An index file (url + sha256); path and directory sources carry no URL: the lock dir holds them."""
    if not isinstance(entry, dict):
        return None
    url, digest = entry.get("url"), str(entry.get("hash", ""))
    if not url or not digest.startswith("sha256:"):
        return None
    size = entry.get("size")
    return LockedFile(str(url), digest.removeprefix("sha256:"), size if isinstance(size, int) else None)


def _parse_toml(text: str) -> tuple[LockedPackage, ...]:
    data = tomllib.loads(text)
    out = []
    for pkg in data.get("package", []):
        if not isinstance(pkg, dict) or not isinstance(pkg.get("name"), str):
            raise ValueError("a [[package]] entry without a name")
        wheels = tuple(w.get("url", w.get("path", w.get("filename", ""))).rsplit("/", 1)[-1]
                       for w in pkg.get("wheels", []))
        src = pkg.get("source", {})
        out.append(LockedPackage(
            name=pkg["name"], version=str(pkg.get("version", "")),
            source={k: str(v) for k, v in src.items()}, wheels=wheels, has_sdist="sdist" in pkg,
            dependencies=_edges(pkg.get("dependencies", [])),
            optional={extra: _edges(deps) for extra, deps in pkg.get("optional-dependencies", {}).items()},
            sdist=_file(pkg.get("sdist")),
            wheel_files=tuple(f for w in pkg.get("wheels", []) if (f := _file(w)) is not None),
        ))
    return tuple(out)


def _edges(deps: list[dict[str, Any]]) -> tuple[Edge, ...]:
    out = {(str(d["name"]), tuple(sorted(str(e) for e in d.get("extra") or [])), str(d.get("version", "")),
            str(d.get("marker", ""))) for d in deps}
    return tuple(sorted(out))


def marker_env(python: str, full_version: str | None = None) -> dict[str, str]:
    """The environment markers of the target: CPython `python` (MAJOR.MINOR) on Linux x86_64; its
    python_full_version is `full_version` when the interpreter is known (3.11.7), else MAJOR.MINOR.0."""
    return {"python_version": python, "python_full_version": full_version or f"{python}.0", "sys_platform": "linux",
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
