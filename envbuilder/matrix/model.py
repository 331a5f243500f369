"""Typed view of the compatibility matrix. Every fact keeps its source."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envbuilder.matrix.prebuilt import PrebuiltWheels
    from envbuilder.matrix.upstream_lock import UpstreamLock

UNKNOWN = "unknown"
NONE = "none"

# How a fact came to be (`status` in the matrix files):
#   curated  - typed in by a person from the source it cites (every NeMo 2.x row)
#   derived  - read by `envbuilder matrix derive` from the release's own artifacts; no published table confirms it
#   verified - a published software-versions table states the same value
CURATED, DERIVED, VERIFIED = "curated", "derived", "verified"
STATUSES = (CURATED, DERIVED, VERIFIED)


@dataclass(frozen=True)
class Fact:
    value: Any
    source: str
    status: str = CURATED

    @property
    def known(self) -> bool:
        """A usable value: not "unknown" and not "none"."""
        return self.value not in (UNKNOWN, NONE)

    @property
    def absent(self) -> bool:
        return bool(self.value == NONE)

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Note:
    severity: str
    text: str
    source: str
    status: str = CURATED


# Why a row forces or leaves out a package (`reason` of override_dependencies / drop_packages):
#   row      - the row's own fix (the pins upstream publishes do not work together on PyPI)
#   upstream - upstream's own override, carried over from its pyproject ([tool.uv] override-dependencies)
#   security - upstream's override that closes a known vulnerability (its comment names the CVE)
ROW, UPSTREAM, SECURITY = "row", "upstream", "security"
REASONS = (ROW, UPSTREAM, SECURITY)


@dataclass(frozen=True)
class DroppedPackage:
    """A dependency a hermetic lock leaves out, because PyPI has no usable release of it (or upstream
    excludes it, e.g. a codec with a known vulnerability)."""

    package: str
    text: str
    source: str
    reason: str = ROW
    status: str = CURATED


@dataclass(frozen=True)
class OverrideDependency:
    """A requirement a lock forces over every other package's own pin (uv `override-dependencies`),
    because the pins upstream publishes do not work together (each entry says why)."""

    requirement: str  # a PEP 508 requirement, e.g. "nvidia-cublas>=13.2,<13.3"
    text: str
    source: str
    reason: str = ROW
    status: str = CURATED

    @property
    def package(self) -> str:
        m = re.match(r"[A-Za-z0-9_.\-]+", self.requirement)
        return (m.group(0) if m else self.requirement).lower().replace("_", "-")


@dataclass(frozen=True)
class PackageCutoff:
    """A later exclude-newer for one package (uv `exclude-newer-package`), where the row's cutoff
    leaves no usable release of it (e.g. every release before it was yanked)."""

    package: str
    value: str  # RFC 3339 UTC
    text: str
    source: str
    status: str = CURATED


@dataclass(frozen=True)
class Location:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


# Facts every row carries (matrices/README.md). The hermetic wheel stack is torch /
# torch_cuda_variant / cuda / cudnn (/ cuda_toolkit); the container's stack is container_*.
ROW_FACTS = (
    "release_date", "pypi_version", "container", "python", "torch", "torch_cuda_variant", "cuda",
    "cudnn", "transformer_engine", "flash_attn", "mamba_ssm", "causal_conv1d", "megatron_core",
    "nemo_run", "lightning", "exclude_newer",
)
# Facts a row may leave out: Megatron-Bridge (rows built around it), the container's own stack,
# the exact CUDA toolkit release the hermetic torch wheel bundles, and the glibc a lock targets
# by default (the container's base OS) where 2.35 cannot lock the row.
OPTIONAL_ROW_FACTS = ("megatron_bridge", "container_torch", "container_cuda", "container_cudnn", "cuda_toolkit",
                      "glibc", "nvidia_resiliency_ext")
NOT_RECORDED = Fact(UNKNOWN, "not recorded for this row")
NOT_IN_ROW = Fact(NONE, "not part of this row")
CONTAINER_PREFIX = "nvcr.io/nvidia/nemo:"
# The glibc a lock targets when neither --glibc nor the row says: Ubuntu 22.04's, so the lock's
# wheels also install on every newer base (Debian 12: 2.36, Ubuntu 24.04: 2.39).
DEFAULT_GLIBC = Fact("2.35", "envbuilder default (Ubuntu 22.04); a lock for an older glibc installs on newer ones")


@dataclass(frozen=True)
class Release:
    """One matrix row: a NeMo release tag (`nemo`), a NeMo Framework release built around
    Megatron-Bridge (`release`, no nemo-toolkit), or a test-only profile. `name` is its key."""

    name: str
    release_date: Fact
    pypi_version: Fact  # nemo-toolkit on PyPI
    container: Fact
    python: Fact
    torch: Fact
    torch_cuda_variant: Fact
    cuda: Fact
    cudnn: Fact
    transformer_engine: Fact
    flash_attn: Fact
    mamba_ssm: Fact
    causal_conv1d: Fact
    megatron_core: Fact
    nemo_run: Fact
    lightning: Fact
    exclude_newer: Fact
    megatron_bridge: Fact = NOT_IN_ROW
    container_torch: Fact = NOT_RECORDED
    container_cuda: Fact = NOT_RECORDED  # full toolkit version, e.g. 13.1.1
    container_cudnn: Fact = NOT_RECORDED
    cuda_toolkit: Fact = NOT_RECORDED  # the hermetic wheel's toolkit release, e.g. 13.0.2
    glibc: Fact = NOT_RECORDED  # default `lock --glibc` for this row; unrecorded rows use DEFAULT_GLIBC
    nvidia_resiliency_ext: Fact = NOT_IN_ROW  # pinned by Megatron-Bridge rows (upstream's uv.lock)
    nemo: str | None = None  # the NeMo tag of a NeMo row
    notes: tuple[Note, ...] = ()
    prefer: str | None = None
    test_only: bool = False
    stage1_extra: tuple[str, ...] = ()
    stage2_env: dict[str, str] = field(default_factory=dict)
    location: Location | None = None
    # PyPI name per component field where it differs from the default (v2.0.0: pytorch-lightning)
    package_names: dict[str, str] = field(default_factory=dict)
    nemo_extras: tuple[str, ...] = ("all",)
    # packages left out of a hermetic lock (rendered as never-installed overrides), each with why
    drop_packages: tuple[DroppedPackage, ...] = ()
    # requirements forced over upstream pins (rendered as uv override-dependencies), each with why
    override_dependencies: tuple[OverrideDependency, ...] = ()
    # per-package exceptions to exclude_newer (rendered as uv exclude-newer-package), each with why
    exclude_newer_package: tuple[PackageCutoff, ...] = ()
    # fields the matrix file wrote (an optional fact left out is not part of the lock's inputs)
    recorded: frozenset[str] = frozenset(ROW_FACTS)
    # upstream's own lock of this release (Megatron-Bridge's uv.lock at the tag): the lock's fidelity target
    upstream_lock: UpstreamLock | None = None

    @classmethod
    def from_facts(cls, name: str, facts: dict[str, Fact], **kw: Any) -> Release:
        missing = [k for k in ROW_FACTS if k not in facts]
        if missing:
            raise KeyError(f"row {name} lacks {', '.join(missing)}")
        known: dict[str, Any] = {k: v for k, v in facts.items() if k in ROW_FACTS or k in OPTIONAL_ROW_FACTS}
        return cls(name=name, recorded=frozenset(known), **known, **kw)

    @property
    def facts(self) -> dict[str, Fact]:
        """Every fact of the row by field name (optional ones only when the file wrote them)."""
        return {k: self.fact(k) for k in (*ROW_FACTS, *OPTIONAL_ROW_FACTS) if k in self.recorded}

    def fact(self, name: str) -> Fact:
        if name not in ROW_FACTS and name not in OPTIONAL_ROW_FACTS:
            raise KeyError(name)
        value: Fact = getattr(self, name)
        return value

    @property
    def status(self) -> str:
        """The row's weakest fact status: derived when any fact is unconfirmed by a published table,
        verified when every fact is, else curated (typed in by hand)."""
        statuses = {f.status for f in self.facts.values()}
        if DERIVED in statuses:
            return DERIVED
        return VERIFIED if statuses == {VERIFIED} else CURATED

    def unconfirmed(self) -> list[str]:
        """Fields derived from the release's artifacts that no published table confirms."""
        return [k for k, f in self.facts.items() if f.status == DERIVED and f.value not in (UNKNOWN, NONE)]

    @property
    def default_glibc(self) -> Fact:
        """The glibc `lock` targets for this row unless --glibc says otherwise."""
        return self.glibc if self.glibc.known else DEFAULT_GLIBC

    @property
    def label(self) -> str:
        """How messages name the row: "nemo v2.3.0", "release 26.04"."""
        if self.nemo is not None:
            return f"nemo {self.nemo}"
        return f"release {self.name}"

    @property
    def release(self) -> str | None:
        """The NeMo Framework release (container tag) this row ships in: "25.11", "26.04"."""
        value = str(self.container.value)
        return value.removeprefix(CONTAINER_PREFIX) if self.container.known and \
            value.startswith(CONTAINER_PREFIX) else None


@dataclass(frozen=True)
class CudaRelease:
    cuda: str  # major.minor
    version: str  # full toolkit version, e.g. 12.8.1
    label: str
    min_driver_linux: Fact


@dataclass(frozen=True)
class ToolkitFile:
    """One file a CUDA toolkit is assembled from (matrices/cuda_toolkits.toml)."""

    kind: str      # deb | wheel
    url: str
    sha256: str
    source: str    # where the sha256 was read


@dataclass(frozen=True)
class CudaToolkit:
    """A CUDA compiler for hosts without one: nvcc `nvcc` of CUDA `release`, from `files`."""

    cuda: str      # major.minor
    release: str   # the CUDA release, e.g. 12.4.1
    nvcc: str      # what `nvcc --version` reports, e.g. 12.4.131
    source: str
    files: tuple[ToolkitFile, ...]

    @property
    def major(self) -> int:
        return int(self.cuda.split(".", 1)[0])


@dataclass(frozen=True)
class TorchInfo:
    version: str
    cuda_variants: Fact
    pypi_default_variant: Fact
    python: Fact
    cxx11_abi: Fact


@dataclass(frozen=True)
class TransformerEngineInfo:
    version: str
    flash_attn: Fact
    pypi_parts: Fact | None = None
    sdist_only_parts: Fact | None = None


@dataclass(frozen=True)
class GitTag:
    """A release tag of a kernel package's repository, as the repository itself names it."""

    version: str   # the PyPI version the tag releases
    tag: str
    commit: str    # the tag's commit (40 hex), `git rev-parse TAG^{commit}`
    tree: str      # that commit's tree (40 hex): what a build from the tag's files recomputes
    url: str       # the repository (git_repo)
    source: str    # the citation of the tag facts


@dataclass(frozen=True)
class BuildPackage:
    name: str
    facts: dict[str, Fact]

    def get(self, key: str) -> Fact | None:
        return self.facts.get(key)

    def git_tag(self, version: str) -> GitTag | None:
        """The repository tag of this exact version (git_tags), when the matrix records one."""
        repo, tags = self.facts.get("git_repo"), self.facts.get("git_tags")
        if repo is None or tags is None or not repo.known or not tags.known:
            return None
        for entry in tags.value:
            if str(entry["version"]) == version:
                return GitTag(version, str(entry["tag"]), str(entry["commit"]), str(entry["tree"]),
                              str(repo.value), f"{tags.source}; repository: {repo.source}")
        return None

    def requires_dist(self, version: str) -> list[str]:
        """Runtime Requires-Dist of this version: the matching requires_dist_by_version entry,
        else the generic requires_dist list."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        by_version = self.facts.get("requires_dist_by_version")
        if by_version is not None and by_version.known:
            for entry in by_version.value:
                if Version(version) in SpecifierSet(str(entry["versions"])):
                    return [str(r) for r in entry["requires_dist"]]
        return self.list_value("requires_dist")

    def covers(self, version: str) -> bool:
        """Whether requires_dist_by_version has an entry for this exact version's range."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        by_version = self.facts.get("requires_dist_by_version")
        return by_version is not None and by_version.known and any(
            Version(version) in SpecifierSet(str(e["versions"])) for e in by_version.value)

    def provides_extras(self, version: str) -> list[str]:
        """Extras the matching requires_dist_by_version entry declares ([] when none)."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        by_version = self.facts.get("requires_dist_by_version")
        if by_version is not None and by_version.known:
            for entry in by_version.value:
                if Version(version) in SpecifierSet(str(entry["versions"])):
                    return [str(x) for x in entry.get("provides_extras", [])]
        return []

    def list_value(self, key: str) -> list[str]:
        fact = self.facts.get(key)
        if fact is None or not fact.known or not isinstance(fact.value, list):
            return []
        return [str(v) for v in fact.value]


@dataclass(frozen=True)
class PythonRequirement:
    package: str
    versions: str  # PEP 440 specifier on the package version
    python: str  # PEP 440 specifier on the interpreter
    source: str


@dataclass(frozen=True)
class Unimportable:
    """A module a distribution ships that cannot import on Python `python` (matrices/unimportable.toml)."""

    module: str
    package: str
    versions: str  # PEP 440 specifier on the package version
    python: str  # PEP 440 specifier on the interpreter
    reason: str
    source: str

    def applies(self, version: str, python: str) -> bool:
        from packaging.specifiers import SpecifierSet

        return version in SpecifierSet(self.versions) and python in SpecifierSet(self.python)


@dataclass(frozen=True)
class Gpu:
    name: str
    aliases: tuple[str, ...]
    facts: dict[str, Fact]

    @property
    def sm(self) -> str | None:
        fact = self.facts.get("sm")
        return str(fact.value) if fact is not None and fact.known else None

    def fact(self, key: str) -> Fact | None:
        return self.facts.get(key)


@dataclass(frozen=True)
class PypiStub:
    """A PyPI release that is a wheel-stub sdist: its build downloads the real wheel from `index_url`
    (matrices/pypi_stubs.toml). A hermetic lock pins `instead`, the next release with a wheel."""

    package: str
    version: str
    index_url: str
    instead: str
    instead_uploaded: str
    source: str


@dataclass(frozen=True)
class Matrix:
    releases: tuple[Release, ...]
    cuda_releases: tuple[CudaRelease, ...] = ()
    minor_compat: dict[int, Fact] = field(default_factory=dict)
    forward_compat: Note | None = None
    torch: dict[str, TorchInfo] = field(default_factory=dict)
    transformer_engine: dict[str, TransformerEngineInfo] = field(default_factory=dict)
    build_packages: dict[str, BuildPackage] = field(default_factory=dict)
    python_requirements: tuple[PythonRequirement, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    # (package, version) -> the wheels its GitHub release publishes (matrix/prebuilt.py)
    prebuilt_wheels: dict[tuple[str, str], PrebuiltWheels] = field(default_factory=dict)
    # compilers envbuilder can assemble, newest CUDA first (matrices/cuda_toolkits.toml)
    cuda_toolkits: tuple[CudaToolkit, ...] = ()
    # the first TE that loads the pip wheels' cuDNN and NVRTC libraries itself (transformer_engine.toml [[loader]])
    te_loads_pip_libraries_since: Fact | None = None
    unimportable: tuple[Unimportable, ...] = ()
    pypi_stubs: tuple[PypiStub, ...] = ()

    def names(self, include_test: bool = False) -> list[str]:
        return [r.name for r in self.releases if include_test or not r.test_only]

    def find_release(self, key: str) -> Release | None:
        """A row by its name, NeMo tag (with or without the v), release ("25.11") or
        Megatron-Bridge version ("0.4.0")."""
        return (self.find_row(name=key) or self.find_row(nemo=key) or self.find_row(release=key)
                or self.find_row(mbridge=key))

    def find_row(self, name: str | None = None, nemo: str | None = None, release: str | None = None,
                 mbridge: str | None = None) -> Release | None:
        """The row matching the one key given. A release shipped by several rows resolves to the row
        keyed by it (26.02: the Megatron-Bridge 0.3.0 row, not NeMo v2.7.0 of the same container), else
        the first; a Megatron-Bridge version to the first row pinning it."""
        if release is not None:
            for r in self.releases:
                if r.nemo is None and r.name == release:
                    return r
        for r in self.releases:
            if name is not None and r.name == name:
                return r
            if nemo is not None and r.nemo is not None and r.nemo in (nemo, f"v{nemo}"):
                return r
            if release is not None and r.release == release:
                return r
            if mbridge is not None and r.megatron_bridge.known and \
                    _same_version(str(r.megatron_bridge.value), mbridge):
                return r
        return None

    def cuda_release(self, version: str) -> CudaRelease | None:
        """The CUDA toolkit release with this full version (13.0.2), if recorded."""
        want = _vkey(version) + (0,) * (3 - len(_vkey(version)))
        for c in self.cuda_releases:
            if _vkey(c.version) == want:
                return c
        return None

    def cuda_min_driver(self, cuda: str) -> Fact | None:
        """Minimum Linux driver for a CUDA major.minor (its GA release) or a full version."""
        exact = [c for c in self.cuda_releases if c.version == cuda]
        if exact:
            return exact[0].min_driver_linux
        same = [c for c in self.cuda_releases if c.cuda == cuda]
        if not same:
            return None
        return min(same, key=lambda c: _vkey(c.version)).min_driver_linux

    def gpu(self, name: str) -> Gpu | None:
        """Exact name or alias; else a table name inside an NVML name ("NVIDIA H100 80GB HBM3" ->
        "H100"); else the first entry the name starts ("A100" -> "A100 40GB"). Whole words only,
        so "A100" never resolves to "A10"."""
        key = name.strip().lower()
        if not key:
            return None
        for g in self.gpus:
            if key == g.name.lower() or key in (a.lower() for a in g.aliases):
                return g
        for g in sorted(self.gpus, key=lambda g: -len(g.name)):
            if _words(g.name.lower(), key):
                return g
        for g in self.gpus:
            if g.name.lower().startswith(key) and _words(key, g.name.lower()):
                return g
        return None


def _words(needle: str, haystack: str) -> bool:
    """`needle` occurs in `haystack` as whole words: "a10" is not in "a100"."""
    return re.search(rf"(?<![a-z0-9]){re.escape(needle)}(?![a-z0-9])", haystack) is not None


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))
