"""Read a uv.lock: packages with their versions and files."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    source: dict[str, str]
    wheels: tuple[str, ...]  # file names
    has_sdist: bool
    dependencies: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (name, extras requested)
    optional: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] | None = None  # extra -> dependencies

    @property
    def from_registry(self) -> bool:
        return "registry" in self.source


def read_uv_lock(path: Path) -> list[LockedPackage]:
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    out = []
    for pkg in data.get("package", []):
        wheels = tuple(w.get("url", w.get("path", w.get("filename", ""))).rsplit("/", 1)[-1]
                       for w in pkg.get("wheels", []))
        src = pkg.get("source", {})
        out.append(LockedPackage(
            name=pkg["name"], version=str(pkg.get("version", "")),
            source={k: str(v) for k, v in src.items()}, wheels=wheels, has_sdist="sdist" in pkg,
            dependencies=_edges(pkg.get("dependencies", [])),
            optional={extra: _edges(deps) for extra, deps in pkg.get("optional-dependencies", {}).items()},
        ))
    return out


def _edges(deps: list[dict[str, Any]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out = {(str(d["name"]), tuple(sorted(str(e) for e in d.get("extra") or []))) for d in deps}
    return tuple(sorted(out))


def stage1_closure(packages: list[LockedPackage], root: str) -> set[str]:
    """Every package `uv sync` without extras installs: the root's plain dependencies and,
    transitively, theirs, following the extras each edge asks for (nemo-toolkit[all])."""
    by_name = {p.name: p for p in packages}
    seen: set[tuple[str, str]] = set()
    names: set[str] = set()
    stack: list[tuple[str, tuple[str, ...]]] = list(by_name[root].dependencies) if root in by_name else []
    while stack:
        name, extras = stack.pop()
        pkg = by_name.get(name)
        if pkg is None:
            continue
        names.add(name)
        for extra in ("", *extras):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            stack.extend(pkg.dependencies if not extra else (pkg.optional or {}).get(extra, ()))
    return names


def locked_versions(path: Path) -> dict[str, str]:
    return {p.name: p.version for p in read_uv_lock(path) if p.version}
