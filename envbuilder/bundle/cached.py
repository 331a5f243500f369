"""`install --cache URL`: a bundle's stage-2 wheels from a shared wheel cache instead of a carried wheelhouse.

Once stage 1 is in the staging venv, the lock's stage-2 packages are looked up with the key they get
against that venv's torch (the same key `envbuilder wheels` filed them under on the machine that built
them): a hit is downloaded and verified (signature, sha256, archs), a miss is built here from the
bundle's own sdists. Nothing is installed until every wheel is in hand, and the venv is promoted only
after that, so a refused entry leaves no venv behind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.archlist import ArchList
from envbuilder.kernels.pipeline import WheelsOptions, WheelsResult, run_wheels
from envbuilder.kernels.wheelcache.shared import CacheSource


@dataclass(frozen=True)
class CacheInstall:
    """Where stage 2 comes from when a shared cache is given (and what to build a miss with)."""

    source: CacheSource
    arch_list: ArchList | None = None
    cache_dir: Path | None = None     # the local cache root (ENVBUILDER_CACHE_DIR, else ~/.cache/envbuilder)
    ca_bundle: Path | None = None


def stage2_from_cache(how: CacheInstall, lockdir: Path, sdists: Path, python: Path, out: Path,
                      packages: list[str], progress: Callable[[str], None]) -> WheelsResult:
    """The stage-2 wheels of `packages` for the interpreter `python` (whose torch stage 1 installed), into `out`."""
    from envbuilder.matrix import load_matrix

    opts = WheelsOptions(lockdir=lockdir, output=out, arch_list=how.arch_list, torch_from="host",
                         interpreter=python, cache_dir=how.cache_dir, ca_bundle=how.ca_bundle, sdist_dir=sdists,
                         packages=packages, cache=how.source)
    return run_wheels(opts, load_matrix(), progress)


def requirement_lines(result: WheelsResult) -> list[str]:
    """Hash-pinned requirement lines for the wheels of a `wheels` run."""
    return [f"{(result.output / p.record.wheel).resolve()} --hash=sha256:{p.record.sha256}" for p in result.packages]


def summary(result: WheelsResult) -> list[dict[str, Any]]:
    """Per package: its wheel and where it came from (hit | shared | miss), for install --json."""
    return [{"name": p.name, "wheel": p.record.wheel, "cache": p.cache} for p in result.packages]
