"""Resolve a request against the matrix into one consistent set of pins.

Pure: no network, no filesystem beyond the already-loaded Matrix. Every rule either
passes, adds a warning, or raises ResolveConflictError naming both sides and a fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuilder.canonical import major_minor, version_tuple
from envbuilder.choices import ROW_OPTIONS, SOURCES, TORCH_INDEXES, LockMode
from envbuilder.errors import InvalidOptionError, ResolveConflictError, UnknownPackageError, UnknownTagError
from envbuilder.host.torchprobe import HostTorch, in_row_range
from envbuilder.matrix.model import Fact, Matrix, Note, Release
from envbuilder.matrix.prebuilt import PrebuiltVerdict
from envbuilder.matrix.stacks import Stack, row_stacks
from envbuilder.resolve.components import BY_NAME, COMPONENTS, Component, te_parts
from envbuilder.resolve.prebuilt import SOURCE_BUILD_POLICIES, prefer_prebuilt
from envbuilder.resolve.request import ResolveRequest
from envbuilder.resolve.upstream import UpstreamPins, upstream_pins

PYTHON_CANDIDATES = ("3.10", "3.11", "3.12", "3.13")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    stage: int
    provenance: str
    git_url: str | None = None
    git_tag: str | None = None


@dataclass(frozen=True)
class Resolution:
    row: str
    mode: LockMode
    source: str
    python: str  # the target interpreter (major.minor)
    requires_python: str
    cuda: str | None
    cudnn: str | None
    torch_variant: str  # cu126, cu128, pypi, ...
    torch_index: str | None  # explicit index URL for torch, None = PyPI
    min_driver: str | None
    glibc: str
    container: str | None
    exclude_newer: str
    pins: dict[str, Pin]
    omitted: dict[str, str]
    stage1_extra: tuple[str, ...]
    stage2_env: dict[str, str]
    provenance: dict[str, str]  # provenance of non-pin choices (python, cuda, driver, sm ...)
    warnings: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()
    sm: str | None = None
    driver: str | None = None
    host_origin: str = "none"
    nemo_extras: tuple[str, ...] = ("all",)
    dropped: tuple[str, ...] = ()  # packages the lock must never install (matrix drop_packages)
    prebuilt: tuple[PrebuiltVerdict, ...] = ()  # per stage-2 kernel package: is there a prebuilt wheel
    host_torch: HostTorch | None = None  # --mode host-torch
    # requirements forced over every package's own pin (uv override-dependencies), from the row
    override_dependencies: tuple[str, ...] = ()
    # per-package exclude-newer exceptions from the row: (package, RFC 3339 date)
    exclude_newer_package: tuple[tuple[str, str], ...] = ()
    # upstream's locked versions this lock pins (Megatron-Bridge rows), and why the others are not
    upstream: UpstreamPins | None = None

    def stage(self, n: int) -> list[Pin]:
        return [p for _, p in sorted(self.pins.items()) if p.stage == n]

    @property
    def latest_cutoff(self) -> str:
        """The newest upload date any package of this lock may have (the row's cutoff, or a later
        per-package one): index data fetched after it is complete for this lock."""
        if not self.exclude_newer_package:
            return self.exclude_newer
        return max((self.exclude_newer, *(d for _, d in self.exclude_newer_package)), key=_utc)


def _utc(date: str) -> datetime:
    return datetime.fromisoformat(date.replace("Z", "+00:00"))




def _prov(row: Release, fld: str) -> str:
    loc = row.location.file if row.location else "nemo.toml"
    return f"matrix:{loc}#{row.name}.{fld}"


def find_row(matrix: Matrix, key: str, option: str = "nemo") -> Release:
    """The row named by --nemo (a NeMo tag or test profile), --release or --mbridge."""
    if option not in ROW_OPTIONS:
        raise InvalidOptionError(f"unknown row option '{option}'", f"use one of {', '.join(ROW_OPTIONS)}")
    if option == "nemo":
        row = matrix.find_row(nemo=key)
        profile = matrix.find_row(name=key) if row is None else None
        row = row or (profile if profile is not None and profile.test_only else None)
        known = [r.nemo or r.name for r in matrix.releases if not r.test_only and r.nemo]
        what = "NeMo tag"
    elif option == "release":
        row = matrix.find_row(release=key)
        known = [str(r.release) for r in matrix.releases if r.release]
        what = "release"
    else:
        row = matrix.find_row(mbridge=key)
        known = sorted({str(r.megatron_bridge.value) for r in matrix.releases if r.megatron_bridge.known})
        what = "Megatron-Bridge version"
    if row is None:
        raise UnknownTagError(f"unknown {what} '{key}'; known: {', '.join(dict.fromkeys(known))}",
                              "pick a row from `envbuilder matrix list`")
    return row


def lock_glibc(matrix: Matrix, key: str, option: str, given: str | None) -> tuple[str, bool]:
    """The glibc a lock targets, and whether it is the row's: --glibc when given, else the row's
    `glibc` (its container's base OS, for rows that lock only there), else 2.35."""
    if given:
        return given, False
    row = find_row(matrix, key, option)
    return str(row.default_glibc.value), row.glibc.known


def _forced_requirements(row: Release, req: ResolveRequest, warnings: list[str], provenance: dict[str, str],
                         notes: list[Note]) -> tuple[str, ...]:
    """The row's override_dependencies, each recorded with its provenance and why.

    --mode host-torch keeps the interpreter's torch and the CUDA libraries it brings, so an
    override of one of those cannot take effect: the user is told what to fix in that interpreter.
    The others (urllib3, cryptography) install into the lock's venv as in every mode.
    """
    applied = list(row.override_dependencies)
    if req.mode.on_interpreter:
        ht = req.host_torch
        kept = set(ht.present if ht else ()) | {"torch"}
        applied = []
        for o in row.override_dependencies:
            if o.package in kept or o.package.startswith(("nvidia-", "cuda-")):
                warnings.append(
                    f"{row.label} needs {o.requirement}, which --mode host-torch cannot install: the interpreter's "
                    f"torch {ht.torch if ht else ''} brings its own {o.package}. {o.text} Fix: in that interpreter, "
                    f"pip install '{o.requirement}', or preload a newer build of the library (LD_PRELOAD).")
            else:
                applied.append(o)
    for o in applied:
        provenance[o.package] = f"{_prov(row, 'override_dependencies')} ({o.requirement})"
        notes.append(Note("info", f"The lock overrides every pin of {o.package} with {o.requirement}: {o.text}",
                          o.source))
    return tuple(o.requirement for o in applied)


def _check_overrides(req: ResolveRequest) -> dict[str, str]:
    out = {}
    for name, version in req.overrides:
        if name not in BY_NAME:
            raise UnknownPackageError(
                f"--set {name}: envbuilder does not manage '{name}'",
                f"use one of: {', '.join(sorted(BY_NAME))}")
        if version != "none":
            try:
                Version(version)
            except InvalidVersion as exc:
                raise InvalidOptionError(f"--set {name}=={version}: '{version}' is not a version",
                                         "use a PEP 440 version, or 'none' to leave it out") from exc
        out[name] = version
    return out


def _versions(row: Release, req: ResolveRequest, overrides: dict[str, str]
              ) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """Component -> (version, provenance); plus omitted components with the reason."""
    chosen: dict[str, tuple[str, str]] = {}
    omitted: dict[str, str] = {}
    for comp in COMPONENTS:
        if comp.field not in row.recorded and comp.name not in overrides:
            continue  # an optional field this row does not have (Megatron-Bridge in a NeMo row)
        if comp.name in overrides:
            value, prov = overrides[comp.name], f"override:--set {comp.name}=={overrides[comp.name]}"
        elif comp.name == "torch" and req.torch:
            value, prov = req.torch, "cli:--torch"
        else:
            fact = row.fact(comp.field)
            value, prov = str(fact.value), _prov(row, comp.field)
        if value == "none":
            omitted[comp.name] = f"not part of this profile ({prov})"
        elif value == "unknown":
            omitted[comp.name] = (f"version unknown in the matrix ({prov}); "
                                  f"add it with --set {comp.name}==VERSION")
        else:
            chosen[comp.name] = (value, prov)
    return chosen, omitted


class _Range(SpecifierSet):
    """A SpecifierSet that prints as it was written in the matrix (SpecifierSet sorts its parts)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def _python_range(matrix: Matrix, row: Release, chosen: dict[str, tuple[str, str]]
                  ) -> list[tuple[SpecifierSet, str]]:
    """Every Python constraint in force, each with who imposes it."""
    ranges: list[tuple[SpecifierSet, str]] = []
    if row.python.known:
        ranges.append((_Range(str(row.python.value)), row.label))
    if "torch" in chosen:
        info = matrix.torch.get(chosen["torch"][0])
        if info is not None and info.python.known:
            ranges.append((_Range(str(info.python.value)), f"torch {info.version}"))
    for req in matrix.python_requirements:
        if req.package in chosen and Version(chosen[req.package][0]) in SpecifierSet(req.versions):
            ranges.append((_Range(req.python), f"{req.package} {chosen[req.package][0]}"))
    return ranges


def _choose_python(req: ResolveRequest, ranges: list[tuple[SpecifierSet, str]], row: Release
                   ) -> tuple[str, str, str]:
    """(target python, requires-python, provenance)."""
    if req.python:
        if not req.python.count(".") == 1 or not all(p.isdigit() for p in req.python.split(".")):
            raise InvalidOptionError(f"--python {req.python}: expected MAJOR.MINOR like 3.12", "use --python 3.12")
        pv = Version(req.python)
        for spec, who in ranges:
            if not spec.contains(pv):
                ok = [p for p in PYTHON_CANDIDATES if all(s.contains(Version(p)) for s, _ in ranges)]
                fix = f"use --python {ok[-1]}" if ok else "choose another --nemo row"
                raise ResolveConflictError(
                    f"Python {req.python} is outside {who}'s range ({spec})", fix)
        return req.python, f"=={req.python}.*", "cli:--python"
    allowed = [p for p in PYTHON_CANDIDATES if all(s.contains(Version(p)) for s, _ in ranges)]
    if not allowed:
        sides = "; ".join(f"{who}: {spec}" for spec, who in ranges)
        raise ResolveConflictError(f"no Python version satisfies every component ({sides})",
                                   "drop the --set that narrows Python, or choose another --nemo row")
    lo, hi = allowed[0], allowed[-1]
    hi_next = f"3.{int(hi.split('.')[1]) + 1}"
    return hi, f">={lo},<{hi_next}", _prov(row, "python")


def _choose_cuda(matrix: Matrix, req: ResolveRequest, row: Release, torch_version: str | None
                 ) -> tuple[str | None, str, str | None, str, list[str]]:
    """(cuda, cuda provenance, torch index url, torch variant, warnings)."""
    warnings: list[str] = []
    row_cuda = str(row.cuda.value) if row.cuda.known else None
    cuda, cuda_prov = row_cuda, _prov(row, "cuda")
    if req.mode.on_container and row.container_cuda.known:
        # the container's own toolkit builds stage 2 and sets the driver floor
        row_cuda = major_minor(str(row.container_cuda.value))
        cuda, cuda_prov = row_cuda, _prov(row, "container_cuda")
    if req.cuda:
        if req.mode.on_container:
            raise ResolveConflictError(
                f"--cuda {req.cuda} conflicts with --mode ngc-base: the NGC container "
                f"{row.container.value} fixes CUDA {row_cuda}",
                "drop --cuda, or use --mode hermetic")
        cuda, cuda_prov = req.cuda, "cli:--cuda"
    info = matrix.torch.get(torch_version) if torch_version else None
    row_variant = str(row.torch_cuda_variant.value) if row.torch_cuda_variant.known else None
    if cuda is None or torch_version is None:
        return cuda, cuda_prov, None, row_variant or "pypi", warnings
    wanted = "cu" + cuda.replace(".", "")
    if req.cuda is None and row_variant:
        wanted = row_variant
    if info is None or not info.cuda_variants.known:
        why = "is not in matrices/torch.toml" if info is None else "has unknown CUDA variants in matrices/torch.toml"
        warnings.append(f"torch {torch_version} {why}: CUDA variant {wanted} unchecked")
        return cuda, cuda_prov, None, wanted, warnings
    variants = [str(v) for v in info.cuda_variants.value]
    if wanted not in variants:
        raise ResolveConflictError(
            f"torch {torch_version} ships no wheel for CUDA {cuda} ({wanted}); its variants: {', '.join(variants)}",
            f"use --cuda {_variant_to_cuda(variants[-1])} or a --torch that ships {wanted}")
    default = str(info.pypi_default_variant.value) if info.pypi_default_variant.known else None
    if wanted == default:
        return cuda, cuda_prov, None, wanted, warnings
    explicit = req.torch_index == "pytorch" or req.cuda is not None
    if default and not explicit and default[:4] == wanted[:4]:
        # Same CUDA major: PyPI's wheel runs under minor-version compatibility, and PyPI is
        # the one index every user can reach. --torch-index pytorch selects the exact variant.
        warnings.append(
            f"torch {torch_version} from PyPI is the {default} build, not {wanted}; same CUDA major, so it runs "
            f"with the CUDA {cuda} toolkit used for stage 2 (use --torch-index pytorch for the exact {wanted} wheel)")
        return cuda, cuda_prov, None, default, warnings
    return cuda, cuda_prov, f"https://download.pytorch.org/whl/{wanted}", wanted, warnings


def _container_major_mismatch(matrix: Matrix, req: ResolveRequest, row: Release, cuda: str | None,
                              torch_version: str | None, variant: str) -> list[str]:
    """A hermetic lock whose CUDA major differs from the row's container: packages that follow the
    container (nemo-toolkit 2.6 requires numba-cuda[cu13]) then mix CUDA majors in one environment.
    PyPI's torch is the only variant every user (and CI) can reach, so this warns instead of
    switching the default to the PyTorch index."""
    if (not req.mode.torch_from_lock or req.cuda or cuda is None or torch_version is None
            or not row.container_cuda.known):
        return []
    major = str(row.container_cuda.value).split(".")[0]
    if cuda.split(".")[0] == major:
        return []
    info = matrix.torch.get(torch_version)
    wanted = f"cu{major}0"
    has = info is not None and info.cuda_variants.known and wanted in [str(v) for v in info.cuda_variants.value]
    fix = (f"--cuda {major}.0 --torch-index pytorch locks torch {torch_version}+{wanted} from download.pytorch.org"
           if has else f"no {wanted} build of torch {torch_version} is recorded in matrices/torch.toml")
    return [f"the hermetic stack is CUDA {cuda} (torch {torch_version} {variant}) but {row.container.value} is "
            f"CUDA {row.container_cuda.value}: packages that follow the container's CUDA major may mix CUDA majors; "
            f"{fix}"]


def _variant_to_cuda(variant: str) -> str:
    digits = variant.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}" if digits.isdigit() and len(digits) >= 2 else variant


def _stack(matrix: Matrix, req: ResolveRequest, row: Release) -> Stack | None:
    """The stack a lock installs: the container's for --mode ngc-base (when the row records it),
    else the hermetic wheels'."""
    stacks = row_stacks(matrix, row)
    if req.mode.on_container and row.container_cuda.known:
        return stacks[LockMode.NGC_BASE]
    return stacks[LockMode.HERMETIC]


def _check_driver(matrix: Matrix, req: ResolveRequest, row: Release, cuda: str | None
                  ) -> tuple[str | None, list[str]]:
    """Minimum driver for the CUDA in use; raises when the (given or detected) driver is older."""
    warnings: list[str] = []
    if cuda is None:
        return None, warnings
    stack = _stack(matrix, req, row)
    if stack is not None and str(stack.cuda.value) == cuda:
        # the exact toolkit release of the stack in use (an update may need a newer driver than its GA)
        fact: Fact | None = stack.min_driver
    else:
        fact = matrix.cuda_min_driver(cuda)
    if fact is None or not fact.known:
        warnings.append(f"minimum driver for CUDA {cuda} unknown (not in matrices/cuda.toml)")
        return None, warnings
    need = str(fact.value)
    have = req.host.driver
    if have is None:
        return need, warnings
    if version_tuple(have) >= version_tuple(need):
        return need, warnings
    major = int(cuda.split(".")[0])
    floor = matrix.minor_compat.get(major)
    where = "detected" if req.host.origin == "detected" else "given"
    if req.allow_minor_compat and floor is not None and floor.known and \
            version_tuple(have) >= version_tuple(str(floor.value)):
        warnings.append(f"driver {have} < {need} for CUDA {cuda}: relying on CUDA minor-version compatibility "
                        f"(>= {floor.value}); PTX JIT and newer-driver features are unavailable")
        return need, warnings
    raise ResolveConflictError(
        f"driver {have} ({where}) < {need} needed by CUDA {cuda} ({row.label})",
        "upgrade the driver, use forward compatibility (data-center GPUs only), "
        "or pass --allow-minor-compat / choose an older --nemo row")


def _check_sm(matrix: Matrix, req: ResolveRequest, chosen: dict[str, tuple[str, str]]
              ) -> tuple[str | None, list[str]]:
    warnings: list[str] = []
    sm = req.host.sm
    label = req.host.gpu_name or (f"sm{sm.replace('.', '')}" if sm else None)
    if sm is None:
        return None, warnings
    for name, (version, _) in sorted(chosen.items()):
        pkg = matrix.build_packages.get(name)
        fact = pkg.get("min_sm") if pkg else None
        if fact is None or not fact.known:
            continue
        if Version(sm) < Version(str(fact.value)):
            need = str(fact.value).replace(".", "")
            raise ResolveConflictError(
                f"{name} {version} needs sm{need}+, but {label} is sm{sm.replace('.', '')}",
                f"leave it out with --set {name}==none, or target a newer GPU")
    if "transformer-engine" in chosen and Version(sm) < Version("8.9"):
        warnings.append(f"{label} (sm{sm.replace('.', '')}): TE FP8 needs sm89+; train in bf16")
    return sm, warnings


def _rows_accepting_flash(matrix: Matrix, flash: str) -> list[str]:
    out = []
    for r in matrix.releases:
        if r.test_only or not r.transformer_engine.known:
            continue
        te = matrix.transformer_engine.get(str(r.transformer_engine.value))
        if te is not None and te.flash_attn.known and Version(flash) in SpecifierSet(str(te.flash_attn.value)):
            out.append(row_option(r))
    return out


def row_option(row: Release) -> str:
    """The CLI option that selects this row."""
    return f"--nemo {row.nemo}" if row.nemo is not None else f"--release {row.name}"


def _check_flash_vs_te(matrix: Matrix, row: Release, chosen: dict[str, tuple[str, str]],
                       overrides: dict[str, str]) -> list[str]:
    if "flash-attn" not in chosen or "transformer-engine" not in chosen:
        return []
    flash, te_version = chosen["flash-attn"][0], chosen["transformer-engine"][0]
    te = matrix.transformer_engine.get(te_version)
    if te is None or not te.flash_attn.known:
        return [f"transformer-engine {te_version}: accepted flash-attn range unknown; flash-attn {flash} unchecked"]
    spec = SpecifierSet(str(te.flash_attn.value))
    if Version(flash) in spec:
        return []
    rows = _rows_accepting_flash(matrix, flash)
    blame = "--set flash-attn" if "flash-attn" in overrides else (
        "--set transformer-engine" if "transformer-engine" in overrides else f"matrix row {row.name}")
    fix = f"drop {blame}" + (f" or use {rows[-1]}" if rows else "")
    raise ResolveConflictError(
        f"flash-attn {flash} is outside transformer-engine {te_version}'s accepted range ({spec})", fix)


def _check_mode(req: ResolveRequest, row: Release) -> None:
    if req.mode.on_interpreter:
        _check_host_torch(req)
    if req.source not in SOURCES:
        raise InvalidOptionError(f"--source {req.source}: unknown source", "use --source pypi or --source git")
    if req.torch_index not in TORCH_INDEXES:
        raise InvalidOptionError(f"--torch-index {req.torch_index}: unknown", "use pypi or pytorch")
    if req.mode.on_container:
        if not row.container.known:
            raise ResolveConflictError(
                f"--mode ngc-base needs the NGC container of {row.label}, which the matrix does not know",
                "use --mode hermetic")
        if req.torch:
            raise ResolveConflictError(
                f"--torch {req.torch} conflicts with --mode ngc-base, which keeps {row.container.value}'s torch",
                "drop --torch, or use --mode hermetic")


def _check_host_torch(req: ResolveRequest) -> None:
    ht = req.host_torch
    if ht is None:
        raise InvalidOptionError("--mode host-torch needs the Python that has torch",
                                 "pass --interpreter /path/to/python, or --host-torch-facts FILE written on the "
                                 "target by `python -m envbuilder.host.torchprobe`")
    if req.torch:
        raise ResolveConflictError(f"--torch {req.torch} conflicts with --mode host-torch, which keeps the "
                                   f"interpreter's torch {ht.torch}", "drop --torch")
    if req.python and req.python != ht.python:
        raise ResolveConflictError(f"--python {req.python} but the interpreter {ht.interpreter} is Python {ht.python}",
                                   "drop --python, or pass another --interpreter")
    if req.cuda and ht.cuda and req.cuda != ht.cuda:
        raise ResolveConflictError(f"--cuda {req.cuda} but the interpreter's torch {ht.torch} is built for CUDA "
                                   f"{ht.cuda}", "drop --cuda")


def _host_torch_facts(req: ResolveRequest, row: Release, warnings: list[str], provenance: dict[str, str]
                      ) -> tuple[ResolveRequest, str | None]:
    """--mode host-torch: the request as the interpreter fixes it (Python, CUDA) and the row's torch."""
    ht = req.host_torch
    assert ht is not None
    row_torch = str(row.torch.value) if row.torch.known else None
    inside = in_row_range(ht.torch, row_torch)
    if inside is False:
        warnings.append(f"the interpreter's torch {ht.torch} is outside {row.label}'s torch {row_torch} "
                        f"(major.minor differ): kernels and NeMo may not support it")
    provenance["torch"] = "host-torch:interpreter"
    return replace(req, python=ht.python, cuda=ht.cuda), row_torch


def builds_only_in_stage2(matrix: Matrix, name: str) -> bool:
    """A package matrices/build_packages.toml records as sdist-only with a build that imports torch:
    stage 1 (no torch yet, build isolation) cannot build it."""
    pkg = matrix.build_packages.get(name)
    facts = [pkg.get("sdist_only"), pkg.get("imports_torch_at_build")] if pkg is not None else [None]
    return all(f is not None and f.value is True for f in facts)


def with_locked_stage2(matrix: Matrix, res: Resolution, locked: dict[str, str]) -> Resolution:
    """`res` plus a stage-2 pin for each package of the locked graph (name -> locked version) that only
    stage 2 can build and that no component pins.

    Such a package is no row field: a component's dependency or upstream's pins bring it
    (megatron-core 0.16 [dev] requires nv-grouped-gemm). Left in stage 1 it would be built there, before
    torch exists; as a stage-2 pin it gets the compile extra, no build isolation and a dependency-metadata
    record, and stage 1 skips it (stage1_deferred). The lock finds these after `uv lock` and locks again.
    """
    found = {name: Pin(name, version, 2, f"lock:uv.lock ({name}=={version} is in the locked graph; "
                                         "matrices/build_packages.toml: sdist-only, imports torch at build)")
             for name, version in sorted(locked.items())
             if name not in res.pins and builds_only_in_stage2(matrix, name)}
    if not found:
        return res
    return replace(res, pins=dict(sorted({**res.pins, **found}.items())))


def resolve(matrix: Matrix, req: ResolveRequest) -> Resolution:
    """Row + request + host -> one consistent set of pins. Read top-down: the row's versions with the
    overrides, the platform (Python, CUDA, torch's index), the host (driver, GPU), the pins, the row's notes."""
    row = find_row(matrix, req.row, req.row_option)
    _check_mode(req, row)
    d = _Draft.start(matrix, req, row)
    _choose_platform(matrix, d)
    _check_host(matrix, d)
    pins = _pins(d)
    _row_notes(d, pins)
    return d.resolution(pins)


@dataclass
class _Draft:
    """A resolution being worked out: what each step has decided so far."""

    req: ResolveRequest
    row: Release
    overrides: dict[str, str]
    chosen: dict[str, tuple[str, str]]    # component -> (version, provenance)
    omitted: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    provenance: dict[str, str] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    python: str = ""
    requires_python: str = ""
    cuda: str | None = None
    torch_index: str | None = None
    variant: str = ""
    min_driver: str | None = None
    prebuilt: tuple[PrebuiltVerdict, ...] = ()
    sm: str | None = None
    forced: tuple[str, ...] = ()
    upstream: UpstreamPins | None = None

    @classmethod
    def start(cls, matrix: Matrix, req: ResolveRequest, row: Release) -> _Draft:
        """The row's versions with --set and --torch applied (and, for host-torch, the interpreter's facts)."""
        overrides = _check_overrides(req)
        if req.torch and "torch" in overrides:
            raise InvalidOptionError("--torch and --set torch==... both given", "use one of them")
        chosen, omitted = _versions(row, req, overrides)
        d = cls(req, row, overrides, chosen, omitted)
        if req.mode.on_interpreter:
            d.req, _row_torch = _host_torch_facts(req, row, d.warnings, d.provenance)
        return d

    @property
    def torch_version(self) -> str | None:
        return self.chosen.get("torch", (None, ""))[0]

    def resolution(self, pins: dict[str, Pin]) -> Resolution:
        req, row = self.req, self.row
        return Resolution(
            row=row.name, mode=req.mode, source=req.source, python=self.python, requires_python=self.requires_python,
            cuda=self.cuda, cudnn=str(row.cudnn.value) if row.cudnn.known else None, torch_variant=self.variant,
            torch_index=self.torch_index, min_driver=self.min_driver, glibc=req.glibc,
            container=str(row.container.value) if row.container.known else None,
            exclude_newer=str(row.exclude_newer.value), pins=dict(sorted(pins.items())),
            omitted=dict(sorted(self.omitted.items())),
            stage1_extra=row.stage1_extra, stage2_env=dict(sorted(row.stage2_env.items())),
            provenance=dict(sorted(self.provenance.items())), warnings=tuple(self.warnings), notes=tuple(self.notes),
            sm=self.sm, driver=req.host.driver, host_origin=req.host.origin, nemo_extras=row.nemo_extras,
            dropped=tuple(sorted(d.package for d in row.drop_packages)), prebuilt=self.prebuilt,
            host_torch=req.host_torch, override_dependencies=self.forced,
            exclude_newer_package=tuple(sorted((c.package, c.value) for c in row.exclude_newer_package)),
            upstream=self.upstream,
        )


def _choose_platform(matrix: Matrix, d: _Draft) -> None:
    """The target Python, CUDA and torch's index/variant (an interpreter's own for host-torch)."""
    req, row = d.req, d.row
    ranges = _python_range(matrix, row, d.chosen)
    d.python, d.requires_python, d.provenance["python"] = _choose_python(req, ranges, row)
    torch_version = d.torch_version
    if req.mode.on_interpreter:
        d.cuda, d.provenance["cuda"], d.torch_index, d.variant = req.cuda, "host-torch:interpreter", None, "host"
        if req.python:
            d.provenance["python"] = "host-torch:interpreter"
            d.requires_python = f"=={req.python}.*"
        return
    d.cuda, d.provenance["cuda"], d.torch_index, d.variant, w = _choose_cuda(matrix, req, row, torch_version)
    d.warnings += w
    d.warnings += _container_major_mismatch(matrix, req, row, d.cuda, torch_version, d.variant)
    info = matrix.torch.get(torch_version) if torch_version else None
    if info is not None and info.python.known and Version(d.python) not in SpecifierSet(str(info.python.value)):
        raise ResolveConflictError(f"torch {torch_version} supports Python {info.python.value}, not {d.python}",
                                   "choose another --python or --torch")


def _check_host(matrix: Matrix, d: _Draft) -> None:
    """The host's driver and GPU against the stack; kernel packages moved to releases with a prebuilt wheel."""
    req = d.req
    d.min_driver, w = _check_driver(matrix, req, d.row, d.cuda)
    d.warnings += w
    if req.host.driver:
        d.provenance["driver"] = f"host:{req.host.origin}"
    if req.source_build not in SOURCE_BUILD_POLICIES:
        raise InvalidOptionError(f"unknown source-build policy '{req.source_build}'",
                                 "use --allow-source-build or --no-source-build")
    if req.source == "pypi":
        torch_version, variant = d.torch_version, d.variant
        # a hermetic lock installs a known torch build, whose torch.__version__ carries the variant ("+cu130")
        torch_local = (f"{torch_version}+{variant}" if req.mode.torch_from_lock and torch_version
                       and variant.startswith("cu") and variant[2:].isdigit() else None)
        d.chosen, d.prebuilt = prefer_prebuilt(matrix, d.chosen, d.overrides, d.python, torch_version, d.cuda,
                                               req.source_build, torch_local)
    d.sm, w = _check_sm(matrix, req, d.chosen)
    d.warnings += w
    if d.sm:
        d.provenance["sm"] = f"host:{req.host.origin}"
    d.warnings += _check_flash_vs_te(matrix, d.row, d.chosen, d.overrides)


def _pins(d: _Draft) -> dict[str, Pin]:
    """One pin per package name (transformer-engine's parts for the CUDA major); torch is no pin when the base
    keeps its own."""
    req, row = d.req, d.row
    cuda_major = int(d.cuda.split(".")[0]) if d.cuda else None
    pins: dict[str, Pin] = {}
    for name, (version, prov) in d.chosen.items():
        comp: Component = BY_NAME[name]
        if req.mode.on_container and name == "torch":
            d.omitted["torch"] = f"kept from {row.container.value} (override-dependencies)"
            continue
        if req.mode.on_interpreter and name == "torch":
            assert req.host_torch is not None
            d.omitted["torch"] = f"kept from the interpreter: torch {req.host_torch.torch} (override-dependencies)"
            continue
        names = te_parts(cuda_major) if name == "transformer-engine" else [row.package_names.get(comp.field, name)]
        for part in names:
            git_url = git_tag = None
            if req.source == "git" and comp.git_url and comp.git_tag:
                git_url, git_tag = comp.git_url, comp.git_tag.format(version=version)
            pins[part] = Pin(part, version, comp.stage, prov, git_url, git_tag)
    return pins


def _row_notes(d: _Draft, pins: dict[str, Pin]) -> None:
    """The row's warnings, drops, forced requirements, per-package cutoffs and upstream lock."""
    req, row = d.req, d.row
    d.warnings += [note.text for note in row.notes if note.severity == "warn"]
    d.warnings += [f"{drop.package} is left out: {drop.text}" for drop in row.drop_packages]
    if row.prefer:
        d.warnings.append(f"{row.label} is superseded: prefer --nemo {row.prefer}")
    d.notes = list(row.notes)
    d.forced = _forced_requirements(row, req, d.warnings, d.provenance, d.notes)
    if req.glibc_from_row:
        d.provenance["glibc"] = _prov(row, "glibc")
    for c in row.exclude_newer_package:
        d.provenance[c.package] = f"{_prov(row, 'exclude_newer_package')} ({c.value})"
        d.notes.append(Note("info", f"{c.package} may be newer than the row's cutoff (up to {c.value}): {c.text}",
                            c.source))
    cutoffs = {"*": str(row.exclude_newer.value), **{c.package: c.value for c in row.exclude_newer_package}}
    d.upstream = upstream_pins(row, set(pins) | set(d.omitted) | {n for n, _ in req.overrides}, cutoffs)
    if d.upstream is not None:
        d.provenance["upstream-lock"] = (f"{_prov(row, 'upstream_lock')} ({d.upstream.target}: "
                                         f"{len(d.upstream.constraints)} versions pinned as constraints)")
    if row.unconfirmed():
        d.warnings.append(f"{row.label} is derived from its release's own artifacts: {len(row.unconfirmed())} of its "
                          f"facts no published table confirms ({', '.join(row.unconfirmed())}); "
                          f"see `envbuilder matrix show {row_option(row)}`")
