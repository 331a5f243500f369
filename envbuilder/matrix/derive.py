"""`matrix derive`: a matrix row read from a Megatron-Bridge release's own artifacts.

NVIDIA's software-versions tables come late or never (none for 26.08, none for the patch
containers), but every release tag carries machine-readable truth (matrix/release_files.py reads
it) and PyPI's upload times give the dates. Each fact of the row cites the file it came from
(`repo:path@tag`) and has a status: `derived`, or `verified` where a published software-versions
table (docs/releases/software-versions.md at any tag of the repository) states the value. Where
the table names a component and the release's lock disagrees, the table wins (it describes what
the container ships) and the lock records the difference as the row's own choice.

Pure: trees, PyPI facts and the TransformerEngine tag come in as values; the edge that reads git,
archives and PyPI is matrix/release_source.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder.canonical import major_minor
from envbuilder.errors import ReleaseArtifactError
from envbuilder.matrix.model import (
    CONTAINER_PREFIX,
    DERIVED,
    NONE,
    ROW,
    SECURITY,
    UNKNOWN,
    UPSTREAM,
    VERIFIED,
    DroppedPackage,
    Fact,
    Note,
    OverrideDependency,
    PackageCutoff,
    PypiStub,
)
from envbuilder.matrix.release_files import (
    MEGATRON_LM_REPO,
    SUBMODULE,
    TABLE,
    VERSIONS_JSON,
    ReleaseFiles,
    ReleaseTree,
    _bad,
    _need,
    _same,
    closure,
    container_of,
    package_info_version,
    software_table,
    upstream_overrides,
    where,
)
from envbuilder.matrix.upstream_lock import PYPI, UpstreamLock, UpstreamPin, environment_label, sha256_text

# The OS a base image's CUDA apt repository names, and that OS's glibc.
UBUNTU_GLIBC = {
    "20.04": ("2.31", "https://packages.ubuntu.com/focal/libc6"),
    "22.04": ("2.35", "https://packages.ubuntu.com/jammy/libc6"),
    "24.04": ("2.39", "https://packages.ubuntu.com/noble/libc6"),
}
# Components a Megatron-Bridge row pins itself (row field -> PyPI name); upstream's lock is pinned
# for everything else.
COMPONENT_PACKAGES = {
    "torch": "torch", "megatron_core": "megatron-core", "megatron_bridge": "megatron-bridge", "nemo_run": "nemo-run",
    "transformer_engine": "transformer-engine", "mamba_ssm": "mamba-ssm", "causal_conv1d": "causal-conv1d",
    "flash_attn": "flash-attn", "nvidia_resiliency_ext": "nvidia-resiliency-ext",
}
# Rows in the software-versions table, by the row field they confirm.
TABLE_NAMES = {
    "megatron_bridge": "Megatron-Bridge", "megatron_core": "Megatron Core", "transformer_engine": "Transformer Engine",
    "nemo_run": "NeMo Run", "nvidia_resiliency_ext": "NVRX", "container_torch": "PyTorch", "container_cuda": "CUDA",
    "container_cudnn": "cuDNN",
}
# Packages the NGC PyTorch base image provides, which upstream marks never-installed: a hermetic
# lock installs them from PyPI instead.
CONTAINER_PROVIDED = ("torch", "torchvision", "triton")


@dataclass(frozen=True)
class PypiFacts:
    """What PyPI says: first upload per version (yanked files ignored), and the METADATA of the
    torch wheel the row installs (cp3XX manylinux x86_64), keyed "torch==VERSION"."""

    uploads: dict[str, dict[str, str]]
    metadata: dict[str, str] = field(default_factory=dict)

    def first_upload(self, package: str, version: str) -> str | None:
        versions = self.uploads.get(str(canonicalize_name(package)), {})
        for v, t in versions.items():
            if _same(v, version):
                return t
        return None


@dataclass(frozen=True)
class TeRelease:
    """Transformer Engine's release tag that contains upstream's git pin (resolved at the edge)."""

    commit: str
    tag: str
    version: str  # build_tools/VERSION.txt at the commit


@dataclass
class DerivedRow:
    """A draft row: every fact with its source and status, plus the upstream lock extract."""

    release: str  # container tag, the row's key
    facts: dict[str, Fact]
    override_dependencies: list[OverrideDependency]
    drop_packages: list[DroppedPackage]
    exclude_newer_package: list[PackageCutoff]
    notes: list[Note]
    upstream_lock: UpstreamLock
    extract_file: str  # relative to matrices/

    def to_dict(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "facts": {k: {"value": f.value, "source": f.source, "status": f.status} for k, f in self.facts.items()},
            "override_dependencies": [vars(o) for o in self.override_dependencies],
            "drop_packages": [vars(d) for d in self.drop_packages],
            "exclude_newer_package": [vars(c) for c in self.exclude_newer_package],
            "notes": [vars(n) for n in self.notes],
            "upstream_lock": {"file": self.extract_file, "source": self.upstream_lock.source,
                              "sha256": self.upstream_lock.sha256, "packages": len(self.upstream_lock.pins)},
        }


# --- derivation ----------------------------------------------------------------------------------


def _seconds(stamp: str) -> str:
    """RFC 3339 UTC to the second, as the matrix writes dates (PyPI gives microseconds)."""
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _ceil_minute(stamp: str) -> str:
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)
    if t.second or t.microsecond:
        t = t.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _after(a: str, b: str) -> bool:
    def utc(s: str) -> datetime:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))

    return utc(a) > utc(b)


def pypi_url(package: str, version: str | None = None) -> str:
    return f"https://pypi.org/project/{package}/" + (f"{version}/" if version else "")


def _public(version: str) -> str:
    return Version(version).public


@dataclass
class _Ctx:
    files: ReleaseFiles
    version: str
    pypi: PypiFacts
    table: dict[str, str]
    table_where: str
    pins: dict[str, UpstreamPin]

    @property
    def tree(self) -> ReleaseTree:
        return self.files.tree

    def at(self, path: str) -> str:
        return where(self.tree, path)


def _table_value(ctx: _Ctx, fld: str) -> str | None:
    name = TABLE_NAMES.get(fld)
    return ctx.table.get(name) if name else None


def _confirm(ctx: _Ctx, fld: str, fact: Fact, same: bool | None = None) -> Fact:
    """The fact, verified when the published table states the same value; the table's value
    (verified, the artifact's value in the source) when it names the component and disagrees."""
    published = _table_value(ctx, fld)
    if published is None or fact.value in (UNKNOWN, NONE):
        return fact
    wanted = _table_version(fld, published)
    if wanted is None:
        return fact
    if same is None:
        same = _table_matches(fld, str(fact.value), wanted)
    cite = f"{ctx.table_where} ('{TABLE_NAMES[fld]} {published}')"
    if same:
        return Fact(fact.value, f"{fact.source}; {cite}", VERIFIED)
    if ctx.pypi.first_upload(COMPONENT_PACKAGES.get(fld, ""), wanted) is None:
        # the table names a version PyPI does not serve: keep the artifact's, say so
        return Fact(fact.value, f"{fact.source}; the table says {published} ({cite}), which PyPI does not serve",
                    DERIVED)
    return Fact(wanted, f"{cite}: the container ships it (the release's own artifacts say {fact.value}: "
                        f"{fact.source}); {pypi_url(COMPONENT_PACKAGES[fld], wanted)}", VERIFIED)


def _table_version(fld: str, published: str) -> str | None:
    text = published.split(":")[-1].strip()  # "main:0.16.0", "dev:0.15.0"
    if fld == "transformer_engine":
        m = re.match(r"(\d+\.\d+(?:\.\d+)?)", text)  # "2.14+71bbefb", "2.16"
        if not m:
            return None
        parts = m.group(1).split(".")
        return ".".join(parts + ["0"] * (3 - len(parts)))
    if fld == "container_cuda":
        m = re.match(r"(\d+\.\d+\.\d+)", text)  # "13.2.1.009"
        return m.group(1) if m else None
    if fld == "container_cudnn":
        return text.split("-")[0]  # "9.21.1.3-1": a Debian package revision
    if fld == "container_torch":
        return text
    try:
        return str(Version(text))
    except InvalidVersion:
        return None


def _table_matches(fld: str, value: str, wanted: str) -> bool:
    if fld == "transformer_engine":  # the table names the line (2.14, 2.16): the PyPI release of that line
        return Version(value).release[:2] == Version(wanted).release[:2]
    return _same(value, wanted)


def _pinned(ctx: _Ctx, package: str, fld: str) -> Fact:
    """A component's version from upstream's lock (its PyPI release when upstream took it elsewhere)."""
    pin = ctx.pins.get(package)
    if pin is None:
        return Fact(NONE, f"{ctx.at('uv.lock')} locks no {package}", DERIVED)
    src = f"{ctx.at('uv.lock')} ({package} {pin.version}" + ("" if pin.origin == PYPI else f" from {pin.origin}") + ")"
    if pin.origin == PYPI or ctx.pypi.first_upload(package, pin.version):
        return Fact(pin.version, f"{src}; {pypi_url(package, pin.version)}", DERIVED)
    public = _public(pin.version)
    if public != pin.version and ctx.pypi.first_upload(package, public):
        return Fact(public, f"{src}; the PyPI release of that version: {pypi_url(package, public)}", DERIVED)
    return Fact(UNKNOWN, f"{src}: PyPI serves no {package} {public}", DERIVED)


def derive_row(files: ReleaseFiles, version: str, pypi: PypiFacts, docs: Sequence[ReleaseTree],
               megatron_lm: ReleaseTree | None, te: TeRelease | None = None,
               stubs: Sequence[PypiStub] = ()) -> DerivedRow:
    """The draft row of Megatron-Bridge `version` from its release tag's files.

    docs: trees to read docs/versions1.json and the software-versions table from, the release's own
    first, then newer tags, closest first (newer tags list older releases' containers).
    megatron_lm: Megatron-LM at the submodule commit (None when the source has no submodule
    commit: megatron-core is then unknown).
    """
    tree = files.tree
    first = pypi.first_upload("megatron-bridge", version)
    if first is None:
        raise ReleaseArtifactError(f"megatron-bridge {version} is not on PyPI (no file that is not yanked)",
                                   f"check the version ({pypi_url('megatron-bridge')}); derive a released version",
                                   field="megatron_bridge", ref=tree.ref)
    released = _seconds(first)
    found = container_of(version, [tree, *docs])
    if found is None:
        refs = ", ".join(t.ref for t in [tree, *docs])
        raise ReleaseArtifactError(f"{VERSIONS_JSON} names no container for Megatron-Bridge {version} "
                                   f"(read at {refs})", "derive from a clone or mirror that has a later tag "
                                   "(docs/versions1.json lists a release's container from the next release on)",
                                   file=VERSIONS_JSON, field="version", ref=tree.ref)
    release, vtree = found
    table_found = software_table(release, [tree, *docs])
    table, table_where = table_found[0] if table_found else {}, (
        f"{where(table_found[1], TABLE)} (NeMo Framework {release} table)" if table_found else "")
    cutoff = _ceil_minute(released)

    lm_version: str | None = None
    lm_source = ""
    commit = tree.submodule_commit(SUBMODULE)
    if megatron_lm is not None and commit:
        path = "megatron/core/package_info.py"
        text = megatron_lm.read(path)
        if text is None:
            raise ReleaseArtifactError(f"{MEGATRON_LM_REPO}:{path}@{commit} is missing",
                                       "point --megatron-lm at a Megatron-LM clone that has the submodule commit",
                                       file=path, field="megatron_core", ref=commit)
        lm_version = package_info_version(text, f"{MEGATRON_LM_REPO}:{path}@{commit}")
        lm_source = (f"{where(tree, SUBMODULE)} (submodule commit {commit}) -> "
                     f"{MEGATRON_LM_REPO}:{path}@{commit} ({lm_version})")
    mb_in_tree = files.version_in_tree
    editable = {"megatron-bridge": mb_in_tree or version, **({"megatron-core": lm_version} if lm_version else {})}
    pin_list = files.pins(editable)
    pins = {p.name: p for p in pin_list}
    ctx = _Ctx(files, version, pypi, table, table_where, pins)
    facts: dict[str, Fact] = {}
    notes: list[Note] = []

    facts["megatron_bridge"] = _confirm(ctx, "megatron_bridge", Fact(
        version, f"{where(vtree, VERSIONS_JSON)} ('{version} · {release}'); {pypi_url('megatron-bridge', version)}; "
                 f"the release tag {tree.ref}", DERIVED))
    if mb_in_tree is not None and not _same(mb_in_tree, version):
        notes.append(Note("warn", f"The {tree.ref} tag's src/megatron/bridge/package_info.py says {mb_in_tree}, not "
                                  f"{version}; the row pins the PyPI release {version} that {VERSIONS_JSON} names.",
                          where(tree, "src/megatron/bridge/package_info.py"), DERIVED))
    facts["release_date"] = Fact(released, f"{pypi_url('megatron-bridge', version)} (first file upload time)", DERIVED)
    facts["pypi_version"] = Fact(NONE, f"{ctx.at('pyproject.toml')} (Megatron-Bridge does not depend on nemo-toolkit)",
                                 DERIVED)
    facts["container"] = Fact(f"{CONTAINER_PREFIX}{release}", f"{where(vtree, VERSIONS_JSON)} ('{version} · "
                                                               f"{release}')", DERIVED)
    _container_stack(ctx, facts)
    requires = files.pyproject["project"].get("requires-python")
    if not isinstance(requires, str) or not requires:
        raise _bad(tree, "pyproject.toml", "project.requires-python", "missing")
    facts["python"] = _python(ctx, requires)
    facts["glibc"] = _glibc(tree)
    _torch(ctx, facts)
    facts["transformer_engine"] = _confirm(ctx, "transformer_engine", _transformer_engine(ctx, te))
    facts["flash_attn"] = _pinned(ctx, "flash-attn", "flash_attn")
    facts["mamba_ssm"] = _pinned(ctx, "mamba-ssm", "mamba_ssm")
    facts["causal_conv1d"] = _pinned(ctx, "causal-conv1d", "causal_conv1d")
    if lm_version is not None:
        mcore = Fact(lm_version, f"{lm_source}; {pypi_url('megatron-core', lm_version)}", DERIVED)
        if pypi.first_upload("megatron-core", lm_version) is None:
            mcore = Fact(UNKNOWN, f"{lm_source}: PyPI serves no megatron-core {lm_version}", DERIVED)
    else:
        mcore = Fact(UNKNOWN, f"{where(tree, SUBMODULE)}: " + (
            "no submodule commit in this source (a source archive drops it)" if not commit else
            "Megatron-LM at the submodule commit was not given"), DERIVED)
    facts["megatron_core"] = _confirm(ctx, "megatron_core", mcore)
    facts["nemo_run"] = _confirm(ctx, "nemo_run", _pinned(ctx, "nemo-run", "nemo_run"))
    facts["nvidia_resiliency_ext"] = _confirm(ctx, "nvidia_resiliency_ext",
                                              _pinned(ctx, "nvidia-resiliency-ext", "nvidia_resiliency_ext"))
    facts["lightning"] = Fact(NONE, f"{ctx.at('pyproject.toml')} (Megatron-Bridge does not depend on lightning)",
                              DERIVED)
    facts["exclude_newer"] = Fact(cutoff, f"{pypi_url('megatron-bridge', version)} (cutoff = the release's first "
                                          f"upload {released}, rounded up to the minute)", DERIVED)

    overrides, drops, carried_notes = _carry_overrides(ctx, facts)
    overrides, stub_cutoffs = _replace_stubs(ctx, overrides, stubs, cutoff)
    drops += _git_only(ctx, facts, {d.package for d in drops})
    notes += carried_notes
    notes += _standard_notes(ctx, facts, release)
    cutoffs = _late_components(ctx, facts, cutoff) + stub_cutoffs
    lock_source = ctx.at("uv.lock")
    extract = UpstreamLock(lock_source, sha256_text(files.uv_lock_bytes), environment_label(files.python),
                           tuple(_with_pypi(p, pypi) for p in pin_list),
                           file=f"upstream/megatron-bridge-{version}.toml")
    facts["upstream_lock"] = Fact(extract.file, f"{lock_source} (sha256 {extract.sha256[:12]}, {len(pin_list)} "
                                                f"packages for {extract.environment})", DERIVED)
    return DerivedRow(release, facts, overrides, drops, cutoffs, notes, extract, extract.file)


def _with_pypi(pin: UpstreamPin, pypi: PypiFacts) -> UpstreamPin:
    if pin.origin == PYPI:
        return pin
    uploaded = pypi.first_upload(pin.name, pin.version)
    return UpstreamPin(pin.name, pin.version, pin.origin, on_pypi=uploaded is not None, pypi_upload=uploaded)


def _container_stack(ctx: _Ctx, facts: dict[str, Fact]) -> None:
    for fld in ("container_torch", "container_cuda", "container_cudnn"):
        published = _table_value(ctx, fld)
        value = _table_version(fld, published) if published else None
        if value:
            facts[fld] = Fact(value, f"{ctx.table_where} ('{TABLE_NAMES[fld]} {published}')", VERIFIED)
        else:
            facts[fld] = Fact(UNKNOWN, f"{where(ctx.tree, TABLE)} and every later tag: no published "
                                       "software-versions table names this release", DERIVED)


def _python(ctx: _Ctx, requires: str) -> Fact:
    """requires-python, narrowed to the interpreter upstream locks, tests and ships with (.python-version):
    the lock is universal over its range, and MB 0.3's '>=3.10' takes megatron-core [dev] pins that only
    exist for 3.11+."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    src = f"{ctx.at('pyproject.toml')} (requires-python = '{requires}')"
    py = ctx.files.python
    nxt = f"{py.split('.')[0]}.{int(py.split('.')[1]) + 1}"
    try:
        spec = SpecifierSet(requires)
    except InvalidSpecifier as exc:
        raise _bad(ctx.tree, "pyproject.toml", "project.requires-python", f"{requires!r}: {exc}") from exc
    if Version(f"{py}.0") not in spec:
        raise _bad(ctx.tree, ".python-version", "(file)", f"Python {py} is outside requires-python {requires!r}")
    narrowed = f">={py},<{nxt}"
    if SpecifierSet(narrowed) == spec:
        return Fact(requires, src, DERIVED)
    return Fact(narrowed, f"{src}, narrowed to {ctx.at('.python-version')} ({py}): the interpreter upstream locks "
                          "and tests with", DERIVED)


def _glibc(tree: ReleaseTree) -> Fact:
    dockerfile = "docker/Dockerfile.ci"
    text = _need(tree, dockerfile)
    m = re.search(r"^ARG\s+BASE_IMAGE=(\S+)", text, re.M)
    if not m:
        raise _bad(tree, dockerfile, "ARG BASE_IMAGE", "no default base image")
    base = m.group(1)
    repos: dict[str, str] = {}
    for path in sorted(tree.paths("docker")):
        content = tree.read(path) or ""
        for rm in re.finditer(r"/repos/ubuntu(\d\d)(\d\d)/", content):
            repos.setdefault(f"{rm.group(1)}.{rm.group(2)}", path)
    if len(repos) != 1:
        found = ", ".join(f"Ubuntu {k} ({v})" for k, v in sorted(repos.items())) or "none"
        raise _bad(tree, "docker/", "CUDA apt repository", f"cannot tell the base image's OS (found: {found})")
    ubuntu, path = next(iter(repos.items()))
    if ubuntu not in UBUNTU_GLIBC:
        raise _bad(tree, path, "CUDA apt repository", f"Ubuntu {ubuntu} has no known glibc")
    glibc, cite = UBUNTU_GLIBC[ubuntu]
    return Fact(glibc, f"{where(tree, dockerfile)} (BASE_IMAGE={base}) and {where(tree, path)} (installs into it from "
                       f"the CUDA apt repository repos/ubuntu{ubuntu.replace('.', '')}): Ubuntu {ubuntu}, whose glibc "
                       f"is {glibc} ({cite})", DERIVED)


def _torch(ctx: _Ctx, facts: dict[str, Fact]) -> None:
    pin = ctx.pins.get("torch")
    if pin is None or pin.origin != PYPI:
        raise _bad(ctx.tree, "uv.lock", "package.torch", "no torch from PyPI in upstream's lock")
    facts["torch"] = Fact(pin.version, f"{ctx.at('uv.lock')} (torch {pin.version} from {PYPI}); "
                                       f"{pypi_url('torch', pin.version)}", DERIVED)
    meta = ctx.pypi.metadata.get(f"torch=={pin.version}")
    wheel = f"{pypi_url('torch', pin.version)}#files (the cp{ctx.files.python.replace('.', '')} manylinux x86_64 " \
            "wheel's METADATA"
    if meta is None:
        for fld in ("torch_cuda_variant", "cuda", "cuda_toolkit", "cudnn"):
            facts[fld] = Fact(UNKNOWN, f"{wheel} was not read)", DERIVED)
        return
    reqs = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    toolkit = next((m for r in reqs if (m := re.match(r"cuda-toolkit\[[^\]]*\]\s*==\s*(\d+\.\d+\.\d+)", r))), None)
    runtime = next((m for r in reqs if (m := re.match(r"nvidia-cuda-runtime-cu(\d+)\s*==\s*(\d+)\.(\d+)", r))), None)
    cudnn = next((m for r in reqs if (m := re.match(r"nvidia-cudnn-cu\d+\s*==\s*([\d.]+)", r))), None)
    if toolkit:
        full = toolkit.group(1)
        mm = major_minor(full)
        src = f"{wheel}: Requires-Dist {toolkit.group(0)})"
        facts["cuda"] = Fact(mm, src, DERIVED)
        facts["cuda_toolkit"] = Fact(full, src, DERIVED)
        facts["torch_cuda_variant"] = Fact(f"cu{mm.replace('.', '')}", f"{src}: PyPI's default build", DERIVED)
    elif runtime:
        mm = f"{runtime.group(2)}.{runtime.group(3)}"
        src = f"{wheel}: Requires-Dist {runtime.group(0)})"
        facts["cuda"] = Fact(mm, src, DERIVED)
        facts["cuda_toolkit"] = Fact(UNKNOWN, f"{src}: the runtime version does not name the toolkit update", DERIVED)
        facts["torch_cuda_variant"] = Fact(f"cu{mm.replace('.', '')}", f"{src}: PyPI's default build", DERIVED)
    else:
        for fld in ("torch_cuda_variant", "cuda", "cuda_toolkit"):
            facts[fld] = Fact(UNKNOWN, f"{wheel} names no CUDA toolkit or runtime)", DERIVED)
    facts["cudnn"] = (Fact(cudnn.group(1), f"{wheel}: Requires-Dist {cudnn.group(0)})", DERIVED) if cudnn
                      else Fact(UNKNOWN, f"{wheel} names no nvidia-cudnn)", DERIVED))


def _transformer_engine(ctx: _Ctx, te: TeRelease | None) -> Fact:
    pin = ctx.pins.get("transformer-engine")
    if pin is None:
        return Fact(NONE, f"{ctx.at('uv.lock')} locks no transformer-engine", DERIVED)
    if pin.origin == PYPI:
        return Fact(pin.version, f"{ctx.at('uv.lock')} (transformer-engine {pin.version}); "
                                 f"{pypi_url('transformer-engine', pin.version)}", DERIVED)
    public = _public(pin.version)
    src = f"{ctx.at('pyproject.toml')} ([tool.uv] override-dependencies: transformer-engine from {pin.origin}); " \
          f"{ctx.at('uv.lock')} ({pin.version})"
    if te is not None:
        src += (f"; NVIDIA/TransformerEngine:build_tools/VERSION.txt@{te.commit[:12]} ({te.version}), "
                f"first in tag {te.tag}")
        public = _public(te.version)
    if ctx.pypi.first_upload("transformer-engine", public) is None:
        return Fact(UNKNOWN, f"{src}: PyPI serves no transformer-engine {public}", DERIVED)
    return Fact(public, f"{src}; the PyPI release of that version: {pypi_url('transformer-engine', public)}", DERIVED)


def _component_names(facts: dict[str, Fact]) -> set[str]:
    names = {pkg for fld, pkg in COMPONENT_PACKAGES.items() if fld in facts}
    cuda = str(facts.get("cuda", Fact(UNKNOWN, "")).value)
    names |= {"transformer-engine-torch", f"transformer-engine-cu{cuda.split('.')[0]}"} if cuda[:1].isdigit() else set()
    return names


def _carry_overrides(ctx: _Ctx, facts: dict[str, Fact]
                     ) -> tuple[list[OverrideDependency], list[DroppedPackage], list[Note]]:
    """Upstream's [tool.uv] override-dependencies, carried where PyPI can honour them:
    version overrides as the row's overrides (security when upstream's comment names a CVE),
    never-installs with a CVE as drops, the rest stated in a note."""
    src = f"{ctx.at('pyproject.toml')} ([tool.uv] override-dependencies"
    overrides: list[OverrideDependency] = []
    drops: list[DroppedPackage] = []
    notes: list[Note] = []
    components = _component_names(facts)
    closure = _closure(ctx)
    from_container: list[str] = []
    for o in upstream_overrides(ctx.files):
        why = f": '{o.comment}'" if o.comment else ""
        cite = f"{src}: '{o.text}'{why})"
        if o.url is not None:
            if o.name in components:
                # upstream's override also sets aside every other package's pin of it (megatron-core 0.16.0 [dev]
                # caps transformer-engine below the 2.12 that upstream builds): so does the row, with the PyPI release
                fld = next((f for f, pkg in COMPONENT_PACKAGES.items() if pkg == o.name), "")
                fact = facts.get(fld)
                if fact is not None and fact.known:
                    overrides.append(OverrideDependency(
                        f"{o.name}=={fact.value}", f"upstream overrides every pin of {o.name} with {o.url}; the row "
                        f"overrides it with the PyPI release of that version ({fld})", cite, UPSTREAM, DERIVED))
                continue
            if o.name in closure:  # upstream will not take it from PyPI: neither does the lock
                drops.append(DroppedPackage(o.name, f"upstream installs {o.name} from {o.url}" + (
                    f": '{o.comment}'" if o.comment else ""), cite, UPSTREAM, DERIVED))
            continue
        assert o.requirement is not None
        if o.never:
            if o.security:
                drops.append(DroppedPackage(o.name, f"upstream never installs {o.name}: '{o.comment}'", cite,
                                            SECURITY, DERIVED))
            elif o.name in CONTAINER_PROVIDED or o.name in components:
                from_container.append(o.text.split(";")[0].strip())
            elif (pin := ctx.pins.get(o.name)) is not None and (pin.origin == PYPI or ctx.pypi.first_upload(
                    o.name, pin.version)):
                # upstream takes it from its base image and sets aside every pin of it; a hermetic lock installs
                # the version upstream locked, setting the other pins aside the same way
                overrides.append(OverrideDependency(
                    f"{o.name}=={pin.version}", f"upstream never installs {o.name} (" + (
                        f"'{o.comment}'" if o.comment else "its base image has it") + ") and sets aside every pin of "
                    f"it; a hermetic lock installs the version upstream locked ({pin.version}, {ctx.at('uv.lock')})",
                    cite, UPSTREAM, DERIVED))
            else:
                drops.append(DroppedPackage(o.name, f"upstream never installs {o.name}" + (
                    f": '{o.comment}'" if o.comment else ""), cite, UPSTREAM, DERIVED))
            continue
        if o.name in components:
            continue  # the component's own fact pins it
        spec = o.requirement.specifier
        exact = [s.version for s in spec if s.operator == "=="]
        if exact and ctx.pypi.first_upload(o.name, exact[0]) is None:
            notes.append(Note("warn", f"Upstream forces {o.text}, which PyPI does not serve; the lock leaves "
                                      f"{o.name} to the resolver.", cite, DERIVED))
            continue
        text = f"upstream's own override{why}" if o.comment else "upstream's own override"
        overrides.append(OverrideDependency(o.text, text, cite, SECURITY if o.security else UPSTREAM, DERIVED))
    if from_container:
        notes.append(Note("info", f"Upstream takes {', '.join(from_container)} from the NGC base image (marked never "
                                  "installed); a hermetic lock installs them from PyPI.",
                          f"{src}: " + ", ".join(f"'{n}; sys_platform == \"never\"'" for n in from_container) + ")",
                          DERIVED))
    return overrides, drops, notes


def _replace_stubs(ctx: _Ctx, overrides: list[OverrideDependency], stubs: Sequence[PypiStub], cutoff: str
                   ) -> tuple[list[OverrideDependency], list[PackageCutoff]]:
    """Where upstream pins (in its uv.lock or its own override) a release that PyPI serves only as a
    wheel-stub sdist, the row pins the stub table's next release with a wheel: the stub would download
    the real wheel at build time, online and unhashed (matrices/pypi_stubs.toml)."""
    by_pin = {(canonicalize_name(s.package), s.version): s for s in stubs}
    wanted: dict[str, PypiStub] = {}
    installed = _closure(ctx)
    for pin in ctx.pins.values():
        stub = by_pin.get((canonicalize_name(pin.name), pin.version))
        if stub is not None and canonicalize_name(pin.name) in installed:
            wanted[canonicalize_name(pin.name)] = stub
    for o in overrides:
        m = re.fullmatch(r"\s*([A-Za-z0-9._-]+)\s*==\s*([^\s;,]+)\s*", o.requirement.split(";")[0])
        if m and (stub := by_pin.get((canonicalize_name(m.group(1)), m.group(2)))) is not None:
            wanted[canonicalize_name(stub.package)] = stub
    if not wanted:
        return overrides, []
    kept = [o for o in overrides if _requirement_name(o.requirement) not in wanted]
    cutoffs = []
    for name, stub in sorted(wanted.items()):
        pinned = ctx.pins.get(name)
        origin = ("from PyPI" if pinned is None or pinned.origin == PYPI
                  else f"from {pinned.origin.removeprefix('index:')}")
        kept.append(OverrideDependency(
            f"{stub.package}=={stub.instead}",
            f"upstream pins {stub.package} {stub.version} ({origin}); PyPI serves {stub.version} only as a wheel-stub "
            f"sdist whose build downloads the real wheel from {stub.index_url}, online and unhashed: the row pins "
            f"{stub.instead}, the next PyPI release with a wheel",
            f"{ctx.at('uv.lock')} ({stub.package} {stub.version}); {stub.source}", ROW, DERIVED))
        if _after(stub.instead_uploaded, cutoff):
            cutoffs.append(PackageCutoff(stub.package, _ceil_minute(stub.instead_uploaded),
                                         f"{stub.package} {stub.instead} (instead of the wheel-stub {stub.version}) "
                                         f"reached PyPI on {_seconds(stub.instead_uploaded)}, after the release",
                                         stub.source, DERIVED))
    return kept, cutoffs


def _requirement_name(requirement: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9._-]+)", requirement)
    return canonicalize_name(m.group(1)) if m else ""


def _closure(ctx: _Ctx) -> set[str]:
    return closure(ctx.files.uv_lock)


def _git_only(ctx: _Ctx, facts: dict[str, Fact], dropped: set[str]) -> list[DroppedPackage]:
    """Dependencies upstream installs from git that PyPI does not serve before the cutoff: left out."""
    components = _component_names(facts)
    cutoff = str(facts["exclude_newer"].value)
    out = []
    for name in sorted(_closure(ctx)):
        pin = ctx.pins.get(name)
        if pin is None or pin.kind != "git" or name in components or name in dropped:
            continue
        versions = ctx.pypi.uploads.get(name, {})
        before = sorted((v for v, t in versions.items() if not _after(t, cutoff)), key=Version)
        if ctx.pypi.first_upload(name, pin.version) and not _after(ctx.pypi.first_upload(name, pin.version) or "",
                                                                     cutoff):
            continue  # PyPI serves upstream's version: the lock pins it
        if before:
            continue  # PyPI has releases: the resolver picks one (recorded as a git-only difference)
        out.append(DroppedPackage(name, f"upstream installs {name} {pin.version} from {pin.origin}; PyPI serves no "
                                        f"release of it before this row's cutoff ({cutoff})",
                                  f"{ctx.at('uv.lock')} ({name} from {pin.origin}); {pypi_url(name)}#history",
                                  UPSTREAM, DERIVED))
    return out


def _late_components(ctx: _Ctx, facts: dict[str, Fact], cutoff: str) -> list[PackageCutoff]:
    """A pinned component whose PyPI release came after the cutoff (TE 2.14.0, a week after
    Megatron-Bridge 0.4.0) may be newer than the row's cutoff, up to its own first upload."""
    out = []
    packages: list[tuple[str, str]] = []
    for fld, pkg in COMPONENT_PACKAGES.items():
        fact = facts.get(fld)
        if fact is None or not Fact(fact.value, "").known:
            continue
        if fld == "transformer_engine":
            cuda = str(facts["cuda"].value).split(".")[0]
            packages += [(p, str(fact.value)) for p in ("transformer-engine", f"transformer-engine-cu{cuda}",
                                                        "transformer-engine-torch")]
        else:
            packages.append((pkg, str(fact.value)))
    for pkg, version in packages:
        uploaded = ctx.pypi.first_upload(pkg, version)
        if uploaded and _after(uploaded, cutoff):
            out.append(PackageCutoff(pkg, _ceil_minute(uploaded),
                                     f"{pkg} {version} reached PyPI on {_seconds(uploaded)}, after the release",
                                     f"{pypi_url(pkg, version)} (first file upload time)", DERIVED))
    # what upstream locked from PyPI, where the index dates that version after the release
    done = {c.package for c in out}
    components = _component_names(facts)
    for name in sorted(_closure(ctx)):
        pin = ctx.pins.get(name)
        if pin is None or pin.origin != PYPI or name in done or name in components or name not in ctx.pypi.uploads:
            continue
        uploaded = ctx.pypi.first_upload(name, pin.version)
        if uploaded and _after(uploaded, cutoff):
            out.append(PackageCutoff(name, _ceil_minute(uploaded),
                                     f"upstream locked {name} {pin.version} for this release; PyPI's index dates its "
                                     f"first file {_seconds(uploaded)}, after the release",
                                     f"{ctx.at('uv.lock')}; {pypi_url(name, pin.version)} (first file upload time)",
                                     DERIVED))
    return out


def _standard_notes(ctx: _Ctx, facts: dict[str, Fact], release: str) -> list[Note]:
    notes = []
    requires = str(ctx.files.pyproject["project"].get("requires-python"))
    notes.append(Note("info", f"Megatron-Bridge {ctx.version} requires Python {requires}; upstream locks, tests and "
                              f"ships it with Python {ctx.files.python}.", ctx.at("pyproject.toml"), DERIVED))
    te = ctx.pins.get("transformer-engine")
    if te is not None and te.origin != PYPI and facts["transformer_engine"].known:
        notes.append(Note("warn", f"Upstream builds Transformer Engine from git ({te.version}); hermetic mode uses the "
                                  f"PyPI release {facts['transformer_engine'].value}.", ctx.at("uv.lock"), DERIVED))
    if facts["container_cuda"].known:
        cuda = facts["cuda_toolkit"] if facts["cuda_toolkit"].known else facts["cuda"]
        notes.append(Note("info", f"The {release} container is CUDA {facts['container_cuda'].value} with PyTorch "
                                  f"{facts['container_torch'].value}; hermetic mode uses PyPI torch "
                                  f"{facts['torch'].value} (CUDA {cuda.value}).",
                          ctx.table_where, DERIVED))
    if not ctx.table:
        notes.append(Note("warn", f"No published software-versions table names NeMo Framework {release}: every fact "
                                  "of this row is derived from the release's own artifacts.",
                          f"{where(ctx.tree, TABLE)} and every later tag", DERIVED))
    return notes
