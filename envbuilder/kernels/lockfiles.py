"""The files a uv.lock names for each package: URL, sha256, size, for the sdist and every wheel."""

from __future__ import annotations

import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class LockedFile:
    url: str
    sha256: str
    size: int | None

    @property
    def filename(self) -> str:
        return urllib.parse.unquote(self.url.rsplit("/", 1)[-1].split("#", 1)[0])


@dataclass(frozen=True)
class LockedFiles:
    name: str
    version: str
    source: dict[str, str]
    sdist: LockedFile | None
    wheels: tuple[LockedFile, ...]

    @property
    def from_registry(self) -> bool:
        return "registry" in self.source


def _file(entry: dict[str, object]) -> LockedFile | None:
    url = entry.get("url")
    digest = str(entry.get("hash", ""))
    if not url or not digest.startswith("sha256:"):
        return None  # path / directory sources carry no URL: the lock dir holds them
    size = entry.get("size")
    return LockedFile(str(url), digest.removeprefix("sha256:"), int(size) if isinstance(size, int) else None)


def read_locked_files(uv_lock: Path) -> dict[tuple[str, str], LockedFiles]:
    """(name, version) -> its files as uv.lock lists them."""
    data = tomllib.loads(Path(uv_lock).read_text(encoding="utf-8"))
    out: dict[tuple[str, str], LockedFiles] = {}
    for pkg in data.get("package", []):
        sdist = _file(pkg["sdist"]) if isinstance(pkg.get("sdist"), dict) else None
        wheels = tuple(f for w in pkg.get("wheels", []) if (f := _file(w)) is not None)
        src = {k: str(v) for k, v in pkg.get("source", {}).items()}
        out[(pkg["name"], str(pkg.get("version", "")))] = LockedFiles(pkg["name"], str(pkg.get("version", "")),
                                                                      src, sdist, wheels)
    return out


def by_name(files: dict[tuple[str, str], LockedFiles]) -> dict[str, LockedFiles]:
    return {name: f for (name, _v), f in sorted(files.items())}
