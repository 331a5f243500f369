"""Refuse a stage-2 pin whose sdist ships no CUDA sources.

Stage 2 builds the kernel packages from their sdists. An sdist without csrc/*.cu builds a
package that imports fine and has no kernels, so the lock stops there, naming the sdist and
the ways out. Pins installed from git (--source git) build from the tag's full tree and are
not checked; packages that uv locked with a wheel are not built at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envbuilder.errors import NoCudaSourcesError, SdistFetchError
from envbuilder.lock.sdist import SdistContents, fetch_sdist, read_sdist
from envbuilder.lock.uvlock import LockedPackage
from envbuilder.resolve.resolver import Resolution


@dataclass(frozen=True)
class KernelSourceCheck:
    package: str
    version: str
    sdist: SdistContents

    def to_dict(self) -> dict[str, object]:
        return {"package": self.package, "version": self.version, **self.sdist.to_dict()}


def require_cuda_sources(package: str, version: str, contents: SdistContents) -> None:
    """Raise NoCudaSourcesError when the sdist holds no .cu/.cuh file."""
    if contents.cuda_sources:
        return
    raise NoCudaSourcesError(
        f"{package} {version}: its sdist {contents.filename} holds no CUDA sources (.cu/.cuh in "
        f"{len(contents.files)} files); built from it, {package} would install without kernels",
        f"lock with --source git (builds from the v{version} tag), or pick a release whose sdist ships "
        f"its kernels with --set {package}==VERSION")


def check_kernel_sources(res: Resolution, locked: list[LockedPackage], ca_bundle: Path | None = None,
                         progress: Callable[[str], None] = lambda _: None,
                         fetch: Callable[[str, str | None, Path | None], Path] = fetch_sdist,
                         ) -> list[KernelSourceCheck]:
    """Check each stage-2 pin that uv locked as an sdist from the index (no usable wheel)."""
    by_name = {p.name: p for p in locked}
    checked: list[KernelSourceCheck] = []
    for pin in res.stage(2):
        pkg = by_name.get(pin.name)
        if pkg is None or pin.git_url or not pkg.from_registry or pkg.wheels or not pkg.sdist_url:
            continue
        progress(f"checking {pin.name} {pkg.version} sdist for CUDA sources")
        try:
            path = fetch(pkg.sdist_url, pkg.sdist_sha256, ca_bundle)
        except (OSError, ValueError) as exc:
            raise SdistFetchError(f"cannot read {pin.name} {pkg.version}'s sdist ({pkg.sdist_url}): {exc}",
                                  "check network access to the index (or --ca-bundle), then lock again") from exc
        contents = read_sdist(path)
        require_cuda_sources(pin.name, pkg.version, contents)
        checked.append(KernelSourceCheck(pin.name, pkg.version, contents))
    return checked
