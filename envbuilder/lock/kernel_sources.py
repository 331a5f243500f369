"""Refuse a stage-2 pin whose sdist ships no CUDA sources.

Stage 2 builds the kernel packages from their sdists. An sdist without csrc/*.cu builds a
package that imports fine and has no kernels, so the lock stops there, naming the sdist and
the ways out. Pins installed from git (--source git) build from the tag's full tree and are
not checked; packages that uv locked with a wheel are not built at all.

NeMo v2.0-v2.5 pin mamba-ssm / causal-conv1d releases whose PyPI sdists lack their kernels (NeMo's
own container recipes build them from their git tags for that reason). Such a pin is decided in
this order, and never installed silently:
  1. the matrix records the version's repository tag (build_packages.toml git_repo / git_tags: the
     tag, its commit and its tree): the record's `git_sources` says so, and stage 2 (`wheels`,
     `bundle`, `build`) builds the tag's files, recomputing their tree, instead of the sdist;
  2. else a pin from the row still locks, recorded in `kernel_less` with a warning, and `build` /
     `wheels` refuse it with the ways out;
  3. else (a --set pin) the lock is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envbuilder.errors import NoCudaSourcesError, SdistFetchError
from envbuilder.lock.metadata import compare, derive_requires, install_requires, pkg_info_requires
from envbuilder.lock.record import GitSource
from envbuilder.lock.sdist import SdistContents, fetch_sdist, read_sdist
from envbuilder.lock.uvlock import LockedPackage
from envbuilder.matrix.model import Matrix
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
        f"lock with --source git (builds from the v{version} tag), pick a release whose sdist ships its kernels "
        f"and predates the row's exclude_newer with --set {package}==VERSION, or leave it out with "
        f"--set {package}==none")


def check_kernel_sources(res: Resolution, locked: list[LockedPackage], ca_bundle: Path | None = None,
                         progress: Callable[[str], None] = lambda _: None,
                         fetch: Callable[[str, str | None, Path | None], Path] = fetch_sdist,
                         matrix: Matrix | None = None,
                         kernel_less: list[str] | None = None,
                         git_sources: dict[str, GitSource] | None = None) -> list[KernelSourceCheck]:
    """Check each stage-2 pin that uv locked as an sdist from the index (no usable wheel).

    With `git_sources` (a dict to fill) and a matrix, a kernel-less pin whose tag the matrix records
    is entered there. With `kernel_less` (a list to fill), any other kernel-less pin that came from
    the row is appended there with a warning instead of raising; a --set pin always raises."""
    by_name = {p.name: p for p in locked}
    checked: list[KernelSourceCheck] = []
    for pin in res.stage(2):
        pkg = by_name.get(pin.name)
        if pkg is None or pin.git_url or not pkg.from_registry or pkg.wheels or pkg.sdist is None:
            continue
        progress(f"checking {pin.name} {pkg.version} sdist for CUDA sources")
        try:
            path = fetch(pkg.sdist.url, pkg.sdist.sha256, ca_bundle)
        except ValueError as exc:  # the bytes are not the ones uv locked
            raise SdistFetchError(f"cannot read {pin.name} {pkg.version}'s sdist ({pkg.sdist.url}): {exc}",
                                  "clear ~/.cache/envbuilder/sdists and lock again; if it persists, the index "
                                  "serves other bytes than it did") from exc
        except OSError as exc:
            # offline (lock resolved from uv's cache): say the check did not run, never pass silently
            progress(f"warning: {pin.name} {pkg.version}: sdist not checked for CUDA sources "
                     f"(cannot download {pkg.sdist.url}: {exc}); lock again online to check it")
            continue
        contents = read_sdist(path)
        if not contents.cuda_sources and git_sources is not None and matrix is not None:
            src = git_source_for(matrix, pin.name, pkg.version, contents)
            if src is not None:
                progress(f"{pin.name} {pkg.version}: {src.reason}; stage 2 builds it from {src.url} {src.tag} "
                         f"(commit {src.commit[:12]})")
                git_sources[pin.name] = src
                continue
        if not contents.cuda_sources and kernel_less is not None and not pin.provenance.startswith("override:"):
            try:
                require_cuda_sources(pin.name, pkg.version, contents)
            except NoCudaSourcesError as err:
                progress(f"warning: {err.cause}; the row pins it, so the lock records it as kernel-less and "
                         f"build/wheels refuse it. Fix: {err.fix}")
                kernel_less.append(pin.name)
                continue
        require_cuda_sources(pin.name, pkg.version, contents)
        checked.append(KernelSourceCheck(pin.name, pkg.version, contents))
        if matrix is not None:
            _check_table(matrix, res, pin.name, pkg.version, contents, progress)
    return checked


def git_source_for(matrix: Matrix, name: str, version: str, contents: SdistContents) -> GitSource | None:
    """The repository tag to build a kernel-less pin from, when the matrix records it."""
    bp = matrix.build_packages.get(name)
    tag = bp.git_tag(version) if bp is not None else None
    if bp is None or tag is None:
        return None
    force = bp.get("force_build_env")
    return GitSource(url=tag.url, tag=tag.tag, commit=tag.commit, tree=tag.tree, source=tag.source,
                     reason=f"its PyPI sdist {contents.filename} holds no CUDA sources ({len(contents.files)} files)",
                     force_build_env=str(force.value) if force is not None and force.known else None)


def _check_table(matrix: Matrix, res: Resolution, name: str, version: str, contents: SdistContents,
                 progress: Callable[[str], None]) -> None:
    """The table is a cache of PKG-INFO: say when they disagree (or when PKG-INFO cannot tell)."""
    bp = matrix.build_packages.get(name)
    if bp is None or not bp.covers(version):
        return
    cuda_major = res.cuda.split(".")[0] if res.cuda else ""
    table = [r.replace("{version}", version).replace("{cuda_major}", cuda_major) for r in bp.requires_dist(version)]
    info = pkg_info_requires(name, version, contents)
    if info.requires_dist is None:
        progress(f"{name} {version}: metadata from matrices/build_packages.toml only ({info.note})")
        return
    diff = compare(table, info.requires_dist)
    if diff:
        progress(f"warning: {name} {version}: matrices/build_packages.toml differs from {info.note}: "
                 + "; ".join(diff))


def derive_uncovered(matrix: Matrix, res: Resolution, ca_bundle: Path | None = None,
                     progress: Callable[[str], None] = lambda _: None) -> dict[str, list[str]]:
    """Requires-Dist from PKG-INFO for stage-2 sdists whose version the table does not cover."""
    out: dict[str, list[str]] = {}
    for pin in res.stage(2):
        bp = matrix.build_packages.get(pin.name)
        sdist_only = bp.get("sdist_only") if bp is not None else None
        if bp is None or pin.git_url or sdist_only is None or sdist_only.value is not True or bp.covers(pin.version):
            continue
        try:
            info = derive_requires(pin.name, pin.version, ca_bundle)
        except ValueError as exc:
            raise SdistFetchError(f"cannot read {pin.name} {pin.version}'s sdist metadata: {exc}",
                                  "clear ~/.cache/envbuilder/sdists and lock again") from exc
        except OSError as exc:
            progress(f"warning: {pin.name} {pin.version}: PKG-INFO not read ({exc}); "
                     "using the table's generic requires_dist")
            continue
        if info.requires_dist is None:
            progress(f"{pin.name} {pin.version}: {info.note}; using the table's generic requires_dist")
            continue
        out[pin.name] = install_requires(info.requires_dist)
        progress(f"{pin.name} {pin.version}: dependency metadata from {info.note}")
    return out
