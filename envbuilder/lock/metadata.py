"""Stage-2 dependency metadata from the sdist's own PKG-INFO, with the matrix table as a checked cache.

`uv lock` must not build a stage-2 sdist to learn its requirements, so the pyproject carries a
`[[tool.uv.dependency-metadata]]` record per stage-2 package. Its Requires-Dist comes from the
sdist's PKG-INFO (which the index serves inside the archive; nothing is built) when PKG-INFO
binds it: Metadata-Version 2.2+ (PEP 643) and Requires-Dist not marked Dynamic. Otherwise only the table
(matrices/build_packages.toml, read from setup.py by a person) can say. When both exist they
must agree; a disagreement is reported, and PKG-INFO wins (it is the package's own statement).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from envbuilder.atomic import write_atomic
from envbuilder.lock.sdist import SdistContents, cache_dir, fetch_sdist, read_sdist


@dataclass(frozen=True)
class PkgInfoRequires:
    package: str
    version: str
    requires_dist: tuple[str, ...] | None  # None: PKG-INFO missing, or Requires-Dist marked Dynamic
    note: str  # where it came from, or why there is none

    def to_dict(self) -> dict[str, object]:
        return {"package": self.package, "version": self.version,
                "requires_dist": list(self.requires_dist) if self.requires_dist is not None else None,
                "note": self.note}


def pkg_info_requires(package: str, version: str, contents: SdistContents) -> PkgInfoRequires:
    info = contents.pkg_info
    if info is None:
        return PkgInfoRequires(package, version, None, f"{contents.filename} has no PKG-INFO")
    mv = (info.get("metadata-version") or ["0"])[0]
    try:
        reliable = Version(mv) >= Version("2.2")
    except InvalidVersion:
        reliable = False
    if not reliable:
        # PEP 643: only from Metadata-Version 2.2 does an sdist's PKG-INFO promise its fields match the wheel's
        return PkgInfoRequires(package, version, None,
                               f"{contents.filename} PKG-INFO is Metadata-Version {mv} (before 2.2, PEP 643), "
                               "so its Requires-Dist is not binding")
    dynamic = {d.lower() for d in info.get("dynamic", [])}
    if "requires-dist" in dynamic:
        return PkgInfoRequires(package, version, None,
                               f"{contents.filename} PKG-INFO marks Requires-Dist as Dynamic (computed by setup.py)")
    reqs = tuple(sorted(info.get("requires-dist", [])))
    return PkgInfoRequires(package, version, reqs, f"{contents.filename} PKG-INFO (Metadata-Version "
                                                   f"{(info.get('metadata-version') or ['?'])[0]})")


def _key(req: str) -> tuple[str, str, str]:
    """Comparable form: name, specifier, marker; requirements for extras are the package's, not the install's."""
    try:
        r = Requirement(req)
    except InvalidRequirement:
        return (req, "", "")
    return (r.name.lower().replace("_", "-"), str(r.specifier), str(r.marker or ""))


def install_requires(requires: tuple[str, ...] | list[str]) -> list[str]:
    """The requirements a plain install pulls in (entries guarded by `extra == ...` dropped)."""
    return [r for r in requires if "extra ==" not in r]


def compare(table: list[str], pkg_info: tuple[str, ...]) -> list[str]:
    """Differences between the table's requires_dist and PKG-INFO's install requirements."""
    a = {_key(r) for r in table}
    b = {_key(r) for r in install_requires(pkg_info)}
    return ([f"table only: {' '.join(x for x in k if x)}" for k in sorted(a - b)]
            + [f"PKG-INFO only: {' '.join(x for x in k if x)}" for k in sorted(b - a)])


def sdist_of(package: str, version: str, ca_bundle: Path | None = None) -> tuple[str, str | None] | None:
    """(url, sha256) of the version's sdist on PyPI, from the project's JSON; None when it has none.

    Remembered on disk once found, so a later lock without network renders the same record."""
    memo = cache_dir() / "index" / f"{package}=={version}.json"
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
        return str(known["url"]), known.get("sha256")
    except (OSError, ValueError, KeyError):
        pass
    found = _sdist_from_index(package, version, ca_bundle)
    if found is not None and found[1]:
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(memo, json.dumps({"url": found[0], "sha256": found[1]}, sort_keys=True))
    return found


def _sdist_from_index(package: str, version: str, ca_bundle: Path | None) -> tuple[str, str | None] | None:
    from urllib.request import urlopen

    from envbuilder.tls import ssl_context

    url = f"https://pypi.org/pypi/{package}/json"
    with urlopen(url, timeout=60, context=ssl_context(ca_bundle)) as resp:
        files = (json.load(resp).get("releases") or {}).get(version, [])
    for f in files:
        if f.get("packagetype") == "sdist":
            return urllib.parse.urljoin(url, str(f["url"])), (f.get("digests") or {}).get("sha256")
    return None


def derive_requires(package: str, version: str, ca_bundle: Path | None = None,
                    locate: Callable[[str, str, Path | None], tuple[str, str | None] | None] = sdist_of,
                    ) -> PkgInfoRequires:
    """PKG-INFO's Requires-Dist of package==version, read from its sdist on the index."""
    where = locate(package, version, ca_bundle)
    if where is None:
        return PkgInfoRequires(package, version, None, f"{package} {version} has no sdist on the index")
    path = fetch_sdist(where[0], where[1], ca_bundle)
    return pkg_info_requires(package, version, read_sdist(path))
