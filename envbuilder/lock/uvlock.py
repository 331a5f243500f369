"""Read a uv.lock: packages with their versions and files."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

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
        ))
    return out


def locked_versions(path: Path) -> dict[str, str]:
    return {p.name: p.version for p in read_uv_lock(path) if p.version}
