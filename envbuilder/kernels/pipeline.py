"""`envbuilder wheels LOCKDIR -o WHEELHOUSE`: every stage-2 sdist of a lock, built into a wheel.

Per package: fetch the locked sdist (hash-checked) -> unpack -> check it has CUDA sources -> set
its arch variables, or patch literal gencodes -> the local cache, then the shared one (--cache: a
signed entry, downloaded, its sha256 and archs re-checked) -> else build against the chosen torch ->
list the archs in every .so and compare with the request -> local version naming the ABI -> cache.
The wheelhouse is written in a staging directory and swapped in at the end, like a lock directory;
with --publish, every wheel of the run is then signed and stored in the shared cache.
The compiler and the build modules are looked for only when a package is compiled: a run whose
wheels all come from a cache needs neither.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envbuilder import procs
from envbuilder.atomic import guard_output_dir, link_or_copy, promote_dir, staging_dir, write_atomic
from envbuilder.errors import ArchMismatchError, InvalidOptionError, KernelBuildError, LockDirError
from envbuilder.kernels import cache as wcache
from envbuilder.kernels import gitsource
from envbuilder.kernels.archs import (
    ArchList,
    ObjectArchs,
    check_archs,
    elf_has_fatbin,
    find_cuobjdump,
    object_archs,
)
from envbuilder.kernels.build import run_build
from envbuilder.kernels.cache import BuildKey
from envbuilder.kernels.files import cache_root, fetch
from envbuilder.kernels.packages import ArchKnobs, arch_knobs, default_jobs
from envbuilder.kernels.patch import GencodePatch, patch_sdist_tree
from envbuilder.kernels.toolkit import Toolkit, toolkit_for
from envbuilder.kernels.torchenv import (
    TorchFacts,
    check_host_torch,
    probe_interpreter,
    require_build_modules,
    sync_stage1_venv,
)
from envbuilder.kernels.wheelcache.shared import (
    CacheSource,
    Published,
    PublishTarget,
    SharedCache,
    load_signing_key,
    publish,
)
from envbuilder.kernels.wheelfile import add_local_version, local_tag
from envbuilder.kernels.wheelhouse import WHEELHOUSE_RECORD, Wheelhouse, WheelRecord, read_wheelhouse
from envbuilder.lock.kernel_sources import require_cuda_sources
from envbuilder.lock.lockdir import open_lockdir
from envbuilder.lock.record import LockRecord
from envbuilder.lock.sdist import read_sdist
from envbuilder.lock.uvlock import LockedPackage, by_name, read_uv_lock
from envbuilder.matrix.archs import check_arch_list
from envbuilder.matrix.model import Matrix
from envbuilder.progress import Progress

#: wheels that keep their upstream version (no +cu130torch2.11... tag): a sibling package checks it exactly
#: (NVIDIA/TransformerEngine:transformer_engine/common/__init__.py@v2.14, load_framework_extension)
EXACT_VERSION_PACKAGES = frozenset({"transformer-engine-torch"})


@dataclass
class WheelsOptions:
    lockdir: Path
    output: Path
    arch_list: ArchList | None = None   # None: the lock's (LockRecord.arch_list)
    jobs: int | None = None
    torch_from: str = "venv"            # venv | host
    interpreter: Path | None = None     # --torch-from host
    cache_dir: Path | None = None
    cuda_home: Path | None = None
    ca_bundle: Path | None = None
    packages: list[str] = field(default_factory=list)  # a subset of the stage-2 packages
    sdist_dir: Path | None = None       # offline: sdists found here by file name (a bundle's files/)
    parallel: int = 1                   # packages compiled at once; the cores are shared among them
    git_mirrors: list[str] = field(default_factory=list)  # --git-mirror: clones for the lock's git_sources
    cache: CacheSource | None = None    # --cache: a shared wheel cache read after the local one
    build_misses: bool = True           # False: a package no cache holds is left out (`build` compiles it)
    publish: PublishTarget | None = None  # --publish: store every wheel of the run there at the end


@dataclass
class PackageReport:
    """One package of a `wheels` run: its wheelhouse record and how this run got it (cache, jobs, timings)."""

    record: WheelRecord
    cache: str                  # hit (the local cache) | shared (downloaded from --cache) | miss (compiled)
    jobs: int
    seconds: float
    compile_seconds: float | None = None
    peak_rss_mb: float | None = None

    @property
    def name(self) -> str:
        return self.record.name

    def to_dict(self) -> dict[str, Any]:
        # measurements vary run to run: under "timings", which --json shows only with --timings
        measured = {"seconds": round(self.seconds, 3),
                    "compile_seconds": None if self.compile_seconds is None else round(self.compile_seconds, 3),
                    "peak_rss_mb": None if self.peak_rss_mb is None else round(self.peak_rss_mb, 1)}
        return {**self.record.to_dict(), "cache": self.cache, "jobs": self.jobs, "timings": measured}


@dataclass
class WheelsResult:
    output: Path
    wheelhouse: Wheelhouse
    torch: TorchFacts
    arch_list: ArchList
    packages: list[PackageReport]
    seconds: float
    toolkit: Toolkit | None = None      # the compiler used (host or assembled); not in wheelhouse.json
    shared: dict[str, Any] | None = None  # --cache: its URL, and why it was given up (unreachable) if it was
    published: list[Published] = field(default_factory=list)

    @property
    def lock_sha256(self) -> str:
        return self.wheelhouse.lock_sha256

    def to_dict(self) -> dict[str, Any]:
        return {"output": str(self.output), "lock_sha256": self.lock_sha256, "arch_list": self.arch_list.torch,
                "torch": {**self.torch.to_dict(), "interpreter": self.torch.interpreter},
                "packages": [p.to_dict() for p in self.packages],
                "toolkit": self.toolkit.to_dict() if self.toolkit else None,
                "cache": self.shared, "published": [p.to_dict() for p in self.published],
                "seconds": round(self.seconds, 3)}


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    if sdist.name.endswith(".zip"):
        with zipfile.ZipFile(sdist) as zf:
            zf.extractall(dest)
    else:
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # pragma: no cover (Python < 3.10.12)
                tar.extractall(dest)
    tops = [p for p in dest.iterdir() if p.is_dir()]
    return tops[0] if len(tops) == 1 else dest


def device_sources(name: str, version: str, sdist: Path) -> tuple[int, int]:
    """(CUDA sources, of which .cu files). Only .cu files become device code: transformer-engine-torch ships
    .cuh headers but compiles C++ only (its kernels live in transformer-engine-cuXX's library)."""
    contents = read_sdist(sdist)
    require_cuda_sources(name, version, contents)
    return len(contents.cuda_sources), sum(1 for f in contents.cuda_sources if f.endswith(".cu"))


def _bool_env(env: dict[str, str], name: str | None) -> bool:
    return bool(name) and env.get(str(name), "").upper() in ("TRUE", "1", "YES", "ON")


def _fact_str(matrix: Matrix | None, package: str, key: str) -> str | None:
    if matrix is None or package not in matrix.build_packages:
        return None
    fact = matrix.build_packages[package].get(key)
    return str(fact.value) if fact is not None and fact.known else None


def wheelhouse_for_lock(path: Path, lock_sha256: str, torch: str | None) -> tuple[list[Path], list[str]]:
    """The wheels of a wheelhouse made for this lock (hash-checked) and the packages they cover.

    A wheelhouse of another lock, or one compiled against another torch, is refused: its wheels
    would import with `undefined symbol` errors.
    """
    wh = read_wheelhouse(path)
    wh.require_lock(lock_sha256, path)
    wh.require_torch(torch, path)
    return wh.verified_wheels(path), wh.names


def _sdist_for(name: str, files: LockedPackage, opts: WheelsOptions, cache: Path, progress: Progress,
               record: LockRecord) -> tuple[Path, str]:
    """The source to build and its sha256 (the cache key's): the locked sdist, or for a pin the record builds
    from its git tag, the tag's files packed deterministically (gittree.pack), their tree recomputed."""
    git = record.git_sources.get(name)
    if git is not None:
        got = gitsource.obtain(name, files.version, git, cache, gitsource.parse_mirrors(opts.git_mirrors),
                               [opts.sdist_dir] if opts.sdist_dir is not None else [], opts.ca_bundle, progress)
        return got.path, got.sha256
    if files.sdist is None:
        raise LockDirError(f"{name} {files.version}: the lock names no sdist for it (source {files.source})",
                           "stage-2 packages are built from the sdists uv.lock records; re-lock with --source pypi")
    if opts.sdist_dir is not None:
        local = opts.sdist_dir / files.sdist.filename
        if local.is_file():
            from envbuilder.kernels.files import verify

            verify(local, files.sdist.sha256, local.name)
            return local, files.sdist.sha256
    path, downloaded = fetch(files.sdist, cache, opts.ca_bundle)
    if downloaded:
        progress(f"  {name}: downloaded {files.sdist.filename}")
    return path, files.sdist.sha256


def _choose_torch(opts: WheelsOptions, lockdir: Path, record: LockRecord, cache: Path,
                  progress: Progress, to_build: list[str]) -> TorchFacts:
    host_locked = record.host.torch is not None
    if opts.torch_from == "host":
        if opts.interpreter is None:
            raise InvalidOptionError("--torch-from host needs --interpreter PY", "pass the Python that has torch")
        facts = probe_interpreter(opts.interpreter)
        check_host_torch(record.host.torch, facts)
        return facts
    if host_locked:
        raise InvalidOptionError("this lock keeps the interpreter's torch (--mode host-torch): a venv synced from "
                                 "it has no torch to build against",
                                 "pass --torch-from host --interpreter PY (the venv `envbuilder install` made)")
    if opts.torch_from != "venv":
        raise InvalidOptionError(f"--torch-from {opts.torch_from}: unknown", "use venv or host")
    venv = cache / "venvs" / f"{record.lock_sha256[:16]}-py{record.target.python}"
    return sync_stage1_venv(lockdir, record, venv, progress, opts.ca_bundle, skip=to_build)


# the headers of the interpreter's NVIDIA wheels (cudnn, cublas, cusparse, cusolver, curand, cufft, nvrtc, nccl,
# nvtx ...), after the toolkit's own -I, so a header both have comes from the toolkit; the compiler's own parts
# (nvcc's crt, CCCL) only ever come from the toolkit
_WHEEL_HEADERS = r"""
import json, os, sys
skip = {"cuda_nvcc", "cuda_cccl"}
found = []
for entry in sys.path:
    top = os.path.join(entry, "nvidia")
    if not os.path.isdir(top):
        continue
    for name in sorted(os.listdir(top)):
        d = os.path.join(top, name, "include")
        if name not in skip and os.path.isdir(d) and any(f.endswith(".h") for f in os.listdir(d)) and d not in found:
            found.append(d)
print(json.dumps(found))
"""


def wheel_include_dirs(interpreter: str) -> list[str]:
    """Headers of the build interpreter's NVIDIA wheels, the very versions torch links.

    transformer-engine-torch includes cudnn.h and nvrtc.h, and every extension that includes
    ATen/cuda/CUDAContext.h needs cublas_v2.h, cusparse.h and cusolverDn.h. A full CUDA toolkit has them
    (NGC images, /usr/local/cuda); the compiler-only toolkit envbuilder assembles (kernels/toolkit.py) and a
    toolkit beside pip's torch do not."""
    try:
        out = procs.run([interpreter, "-c", _WHEEL_HEADERS], capture_output=True, text=True, timeout=60)
        return [str(d) for d in json.loads(out.stdout.strip() or "[]")]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []


def _build_env(record: LockRecord, opts: WheelsOptions, facts: TorchFacts, knob_env: dict[str, str],
               force_var: str | None, jobs: int) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    env.update({str(k): str(v) for k, v in record.stage2_env.items()})
    env.update(knob_env)
    env["MAX_JOBS"] = str(jobs)
    if force_var:
        env[force_var] = "TRUE"  # never download a prebuilt wheel from GitHub instead of compiling
    if opts.cuda_home is not None:
        env["CUDA_HOME"] = str(opts.cuda_home)
        env["PATH"] = f"{opts.cuda_home}/bin{os.pathsep}{env.get('PATH', '')}"
    bindir = str(Path(facts.interpreter).parent)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"  # the venv's ninja, cmake
    for var in ("CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH"):  # after every -I: the toolkit's headers still win
        dirs = [d for d in env.get(var, "").split(os.pathsep) if d] + wheel_include_dirs(facts.interpreter)
        if dirs:
            env[var] = os.pathsep.join(dict.fromkeys(dirs))
    env.setdefault("SOURCE_DATE_EPOCH", str(record.source_date_epoch or 315532800))
    return env


_NO_GIT = """#!/bin/sh
echo "envbuilder: git is not installed on this host; a stage-2 build ran: git $*" >&2
exit 127
"""


def git_env(work: Path, cache: Path, env: dict[str, str]) -> dict[str, str]:
    """What a package's build sees of git. GIT_CEILING_DIRECTORIES stops git at the build's own directory, so
    a setup.py that asks git (flash-attn runs `git submodule update` unconditionally; version helpers ask for
    the commit) never finds a repository the cache happens to sit in. Where the host has no git at all, a
    `git` that fails like one outside a repository: flash-attn ignores that result, but a missing executable
    ends its setup.py with FileNotFoundError."""
    out = {"GIT_CEILING_DIRECTORIES": str(work)}
    if shutil.which("git", path=env.get("PATH", "")) is None:
        shim = cache / "tools" / "no-git"
        if not (shim / "git").is_file():
            shim.mkdir(parents=True, exist_ok=True)
            write_atomic(shim / "git", _NO_GIT, mode=0o755)
        out["PATH"] = f"{env.get('PATH', '')}{os.pathsep}{shim}"
    return out


def wheel_archs(wheel: Path, work: Path, cuda_home: Path | None) -> list[ObjectArchs]:
    d = work / "inspect"
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".so") or ".so." in n]
        for n in names:
            zf.extract(n, d)
    if not names:
        return []
    tool = find_cuobjdump([cuda_home / "bin"] if cuda_home else None)
    return [object_archs(d / n, tool, d) for n in sorted(names)]


class BuildTools:
    """The CUDA toolkit and the build modules, found (or assembled) the first time a package needs them, once
    for the whole run: a compile needs both, a shared-cache hit with device code needs cuobjdump, and a run
    whose wheels all come from a cache needs nothing."""

    def __init__(self, opts: WheelsOptions, facts: TorchFacts, matrix: Matrix | None, cache: Path,
                 progress: Progress, names: list[str]) -> None:
        self.opts, self.facts, self.matrix, self.cache, self.progress = opts, facts, matrix, cache, progress
        self.names = names
        self.toolkit: Toolkit | None = None
        self._resolved = False
        self._checked = False
        self._lock = threading.Lock()

    def cuda_home(self) -> Path | None:
        with self._lock:
            if not self._resolved:
                if self.matrix is not None:
                    self.toolkit = toolkit_for(self.facts.cuda, self.opts.cuda_home, self.matrix, self.cache,
                                               self.progress, self.opts.ca_bundle)
                    if self.toolkit is not None:
                        self.progress(f"compiling with nvcc {self.toolkit.nvcc} ({self.toolkit.origin}: "
                                      f"{self.toolkit.root})")
                self._resolved = True
            return self.toolkit.root if self.toolkit is not None else self.opts.cuda_home

    def for_compile(self) -> WheelsOptions:
        """The options a compile runs with (--cuda-home set to the toolkit found), the build modules checked."""
        home = self.cuda_home()
        with self._lock:
            if not self._checked:
                require_build_modules(self.facts, self.names)
                self._checked = True
        return replace(self.opts, cuda_home=home)


@dataclass(frozen=True)
class BuildContext:
    """What every package of one run is built with."""

    record: LockRecord
    facts: TorchFacts
    archs: ArchList
    opts: WheelsOptions
    cache: Path
    matrix: Matrix | None
    out: Path                   # the staging wheelhouse
    progress: Progress
    tools: BuildTools
    shared: SharedCache | None = None


@dataclass(frozen=True)
class BuildPlan:
    """One package unpacked and ready: the inputs that decide its wheel (`key`) and how to compile it."""

    name: str
    version: str
    work: Path
    src: Path
    cuda_sources: int
    device_code: bool           # .cu files that will be compiled for the arch list
    skip_var: str | None        # the package's "build without CUDA" variable, when the lock sets it
    knobs: ArchKnobs
    patch: GencodePatch | None
    jobs: int
    key: BuildKey

    def arch_check_skipped(self) -> str:
        """Why a wheel without device code has no arch check."""
        if self.skip_var:
            return f"skipped: {self.skip_var}=TRUE (built without its CUDA extension)"
        if self.cuda_sources:
            return "skipped: no .cu sources, only CUDA headers (host code; no GPU code to check)"
        return "skipped: the sdist has no CUDA sources (C++ extension only)"


def build_one(name: str, files: LockedPackage, ctx: BuildContext) -> PackageReport | None:
    """Plan the package, then take its wheel from the cache or compile it. The build directory is kept
    for inspection when anything fails."""
    t0 = time.monotonic()
    work_root = ctx.cache / "build"
    work_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work_root))
    ok = False
    try:
        plan = plan_build(name, files, ctx, work)
        report = reuse_cached(plan, ctx)
        if report is None and not ctx.opts.build_misses:
            ctx.progress(f"{name} {files.version}: in no cache; left to the image build to compile")
            ok = True
            return None
        report = report or compile_package(plan, ctx)
        report.seconds = time.monotonic() - t0
        ok = True
        return report
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            ctx.progress(f"  {name}: build directory kept for inspection: {work}")


def plan_build(name: str, files: LockedPackage, ctx: BuildContext, work: Path) -> BuildPlan:
    """Fetch and unpack the sdist, count its CUDA sources, set its arch knobs (or patch literal gencodes),
    and work out the cache key."""
    sdist, sdist_sha = _sdist_for(name, files, ctx.opts, ctx.cache, ctx.progress, ctx.record)
    src = unpack_sdist(sdist, work / "src")
    n_cuda, n_cu = device_sources(name, files.version, sdist)
    skip_var = _fact_str(ctx.matrix, name, "skip_cuda_build_env")
    stage2_env = {str(k): str(v) for k, v in ctx.record.stage2_env.items()}
    skip_cuda = _bool_env({**os.environ, **stage2_env}, skip_var)
    device_code = n_cu > 0 and not skip_cuda
    knobs = arch_knobs(src, ctx.archs)
    try:
        patch = patch_sdist_tree(src, ctx.archs) if (knobs.hardcoded and device_code) else None
    except ValueError as exc:  # refused before an hour of compiling that the arch check would then reject
        raise ArchMismatchError(f"{name} {files.version}: setup.py hard-codes its gencodes and {exc}",
                                "pass the arch list the package builds by itself (--arch-list), or add this "
                                "setup.py shape to envbuilder/kernels/patch.py") from exc
    if patch:
        ctx.progress(f"  {name}: setup.py hard-codes {len(patch.removed)} gencodes; patched to {ctx.archs.torch} "
                     f"(sha256 {patch.sha256[:12]})")
    facts = ctx.facts
    key = BuildKey(
        package=name, version=files.version, sdist_sha256=sdist_sha, torch=facts.torch, cuda=facts.cuda,
        cxx11abi=facts.cxx11abi, arch_list=ctx.archs.torch if device_code else "none", python=facts.py_tag,
        patch=patch.sha256 if patch else None, stage2_env=stage2_env,
        # transformer_engine/common/__init__.py (load_framework_extension) asserts that transformer-engine-torch's
        # version equals transformer-engine's and the core's, local part included: a local tag breaks the import
        keep_version=name in EXACT_VERSION_PACKAGES)
    return BuildPlan(name, files.version, work, src, n_cuda, device_code, skip_var if skip_cuda else None, knobs,
                     patch, ctx.opts.jobs or default_jobs(name), key)


def reuse_cached(plan: BuildPlan, ctx: BuildContext) -> PackageReport | None:
    """The package's wheel from the local cache, when an entry for its key is there and whole; else from the
    shared cache (--cache), once its entry, sha256 and archs are checked."""
    hit = wcache.lookup(ctx.cache, plan.key.key)
    how = "hit"
    if hit is None and ctx.shared is not None:
        hit, how = fetch_shared(plan, ctx), "shared"
    if hit is None:
        return None
    link_or_copy(hit.wheel, ctx.out / hit.wheel.name)
    ctx.progress(f"{plan.name} {plan.version}: {'cache hit' if how == 'hit' else 'shared cache hit'} "
                 f"{hit.wheel.name}")
    return PackageReport(hit.record.wheel_record(plan.cuda_sources), how, plan.jobs, 0.0)


def fetch_shared(plan: BuildPlan, ctx: BuildContext) -> wcache.CacheEntry | None:
    """The package's wheel from the shared cache, verified, then filed in the local cache (None: a miss)."""
    assert ctx.shared is not None
    got = ctx.shared.fetch(plan.key.key, plan.name, plan.work / "shared")
    if got is None:
        return None
    entry, wheel = got
    check_downloaded_archs(plan.name, wheel, ctx.archs if plan.device_code else None, plan.work / "recheck",
                           ctx.tools.cuda_home, str(ctx.shared.source.url))
    return wcache.store(ctx.cache, wheel, entry.cached)


def check_downloaded_archs(name: str, wheel: Path, requested: ArchList | None, work: Path,
                           cuda_home: Callable[[], Path | None], origin: str) -> None:
    """The archs in a downloaded wheel's fat binaries, checked as after a build: exactly `requested` when its key
    says it holds device code, no fat binary at all when it says it does not (requested None; read from the ELF
    section headers, so no CUDA tool is needed for that)."""
    bad = ("its publisher built it with other settings than its signed key says: republish it from a correct "
           "build, or use another --cache; nothing was installed from it")
    with zipfile.ZipFile(wheel) as zf:
        objects = [n for n in zf.namelist() if n.endswith(".so") or ".so." in n]
        for n in objects:
            zf.extract(n, work)
    fat = [n for n in objects if elf_has_fatbin(work / n)]
    if requested is None:
        if fat:
            raise ArchMismatchError(f"{origin}: {wheel.name}: its key says it was built without GPU code (arch list "
                                    f"none), but {', '.join(fat[:3])} hold CUDA fat binaries", bad)
        return
    try:
        found = [object_archs(work / n, find_cuobjdump(_bin(cuda_home())), work) for n in sorted(fat)]
        check_archs(name, requested, found)
    except ArchMismatchError as exc:
        raise ArchMismatchError(f"{origin}: {wheel.name}: {exc.cause}", bad, **exc.details) from exc


def _bin(home: Path | None) -> list[Path] | None:
    return [home / "bin"] if home else None


def compile_package(plan: BuildPlan, ctx: BuildContext) -> PackageReport:
    """Compile against the chosen torch, check the archs of every .so, name the ABI, and cache the wheel."""
    ctx.progress(f"{plan.name} {plan.version}: building against torch {ctx.facts.torch} "
                 f"(arch {plan.key.arch_list}, MAX_JOBS={plan.jobs})")
    force_var = _fact_str(ctx.matrix, plan.name, "force_build_env")
    opts = ctx.tools.for_compile()
    env = _build_env(ctx.record, opts, ctx.facts, plan.knobs.env, force_var, plan.jobs)
    env.update(git_env(plan.work, ctx.cache, env))
    run = run_build(ctx.facts.interpreter, plan.src, plan.work / "dist", env, plan.name, ctx.progress)
    found = wheel_archs(run.wheel, plan.work, opts.cuda_home) if plan.device_code else []
    if plan.device_code:
        check_archs(plan.name, ctx.archs, found)
    if plan.key.keep_version:
        named = run.wheel  # the ABI it was built for is in wheelhouse.json and the cache key
    else:
        facts = ctx.facts
        tag = local_tag(facts.cuda, facts.torch, facts.cxx11abi, ctx.archs.tag if plan.device_code else "")
        named = add_local_version(run.wheel, tag, plan.work / "named")
    built = wcache.CachedWheel(plan.key.key, plan.key, named.name, "", plan.knobs.env,
                               "ok" if plan.device_code else plan.arch_check_skipped(), tuple(found), plan.patch,
                               round(run.seconds, 1), round(run.peak_rss_mb, 1))
    entry = wcache.store(ctx.cache, named, built)
    link_or_copy(entry.wheel, ctx.out / entry.wheel.name)
    ctx.progress(f"{plan.name}: built {entry.wheel.name} in {run.seconds:.1f}s (peak RSS {run.peak_rss_mb:.0f} MB)"
                 + (f", archs {', '.join(sorted({a for o in found for a in o.sass}))}" if found else ""))
    return PackageReport(entry.record.wheel_record(plan.cuda_sources), "miss", plan.jobs, 0.0, run.seconds,
                         run.peak_rss_mb)


def _build_all(to_build: list[tuple[str, LockedPackage]], ctx: BuildContext) -> list[PackageReport | None]:
    """Every package, `opts.parallel` at a time. Parallel builds split the default MAX_JOBS among them: one
    package's compile is often a single long nvcc (causal-conv1d's backward kernel), so running packages side
    by side is what shortens the whole. Reports keep the lock's order; the first failure is raised after the
    builds already running have finished (their wheels stay cached)."""
    width = max(1, min(ctx.opts.parallel, len(to_build)))
    if width == 1:
        return [build_one(n, f, ctx) for n, f in to_build]

    def one(name: str, files: LockedPackage) -> PackageReport | None:
        own = replace(ctx.opts, jobs=ctx.opts.jobs or max(1, default_jobs(name) // width))
        return build_one(name, files, replace(ctx, opts=own))

    with ThreadPoolExecutor(max_workers=width, thread_name_prefix="envbuilder-wheels") as pool:
        futures = [pool.submit(one, n, f) for n, f in to_build]
        wait(futures)
    return [f.result() for f in futures]


def run_wheels(opts: WheelsOptions, matrix: Matrix | None, progress: Progress = lambda _: None) -> WheelsResult:
    t0 = time.monotonic()
    lockdir = Path(opts.lockdir)
    record = open_lockdir(lockdir).record
    out = guard_output_dir(Path(opts.output), lambda d: (d / WHEELHOUSE_RECORD).is_file(), "an envbuilder wheelhouse")
    cache = cache_root(opts.cache_dir)
    archs = check_arch_list(opts.arch_list or record.arch_list(), record.target.cuda)
    to_build = _packages_to_build(lockdir, record, opts.packages, progress)
    # the shared cache's trust and the publisher's key are checked before anything is built
    shared = SharedCache(opts.cache, opts.ca_bundle, progress) if opts.cache is not None else None
    signing_key = load_signing_key(opts.publish) if opts.publish is not None else None
    facts = _choose_torch(opts, lockdir, record, cache, progress, [n for n, _ in to_build])
    progress(f"building against {facts.interpreter}: torch {facts.torch}, CUDA {facts.cuda or 'none'}, "
             f"cxx11abi {facts.cxx11abi}, Python {facts.python}; arch list {archs.torch}"
             + (f"; shared cache {opts.cache.url} ({shared.trust.describe()})" if shared and opts.cache else ""))
    tools = BuildTools(opts, facts, matrix, cache, progress, [n for n, _ in to_build])
    out.parent.mkdir(parents=True, exist_ok=True)
    with staging_dir(out) as staging:
        ctx = BuildContext(record, facts, archs, opts, cache, matrix, staging, progress, tools, shared)
        reports = [r for r in _build_all(to_build, ctx) if r is not None]
        wheelhouse = Wheelhouse(record.lock_sha256, facts.recorded(), archs.torch, tuple(r.record for r in reports))
        write_atomic(staging / WHEELHOUSE_RECORD, wheelhouse.to_json())
        promote_dir(staging, out)
    result = WheelsResult(out, wheelhouse, facts, archs, reports, time.monotonic() - t0, tools.toolkit,
                          shared_summary(opts.cache, shared))
    if opts.publish is not None:
        result.published = publish_run(opts.publish, signing_key, reports, cache, opts.ca_bundle, progress)
        result.seconds = time.monotonic() - t0
    return result


def wheelhouse_from_cache(lockdir: Path, source: CacheSource, matrix: Matrix | None, progress: Progress, *,
                          arch_list: ArchList | None = None, cache_dir: Path | None = None,
                          ca_bundle: Path | None = None, git_mirrors: list[str] | None = None,
                          build_misses: bool = True) -> WheelsResult:
    """`wheels LOCKDIR --cache URL` into a wheelhouse kept in the local cache (cache/wheelhouses/<lock>), for
    `bundle --cache` (misses built here) and `build --cache` (misses left to the image build)."""
    record = open_lockdir(Path(lockdir)).record
    out = cache_root(cache_dir) / "wheelhouses" / f"{record.lock_sha256[:16]}-{'all' if build_misses else 'hits'}"
    return run_wheels(WheelsOptions(lockdir=Path(lockdir), output=out, arch_list=arch_list, cache_dir=cache_dir,
                                    ca_bundle=ca_bundle, cache=source, build_misses=build_misses,
                                    git_mirrors=list(git_mirrors or [])), matrix, progress)


def shared_summary(source: CacheSource | None, shared: SharedCache | None) -> dict[str, Any] | None:
    if source is None or shared is None:
        return None
    return {**source.to_dict(), "gave_up": shared.gave_up}


def publish_run(target: PublishTarget, signing_key: Any, reports: list[PackageReport], cache: Path,
                ca_bundle: Path | None, progress: Progress) -> list[Published]:
    """Every wheel of the finished run, from the local cache, into the shared cache `target`."""
    wheels = []
    for r in reports:
        entry = wcache.lookup(cache, r.record.cache_key)
        if entry is None:
            raise KernelBuildError(f"{r.name}: its wheel left the local cache during the run (key "
                                   f"{r.record.cache_key[:16]}…), so it cannot be published",
                                   "run `envbuilder wheels --publish` again")
        wheels.append((entry.record, entry.wheel))
    progress(f"publishing {len(wheels)} wheel(s) to {target.url}" + ("" if signing_key else " (unsigned)"))
    return publish(target, signing_key, wheels, ca_bundle, progress)


def _packages_to_build(lockdir: Path, record: LockRecord, subset: list[str], progress: Progress
                       ) -> list[tuple[str, LockedPackage]]:
    """The lock's stage-2 packages (or the --package subset) that uv.lock names as sdists."""
    stage2 = list(record.stage2_packages)
    if subset:
        unknown = sorted(set(subset) - set(stage2))
        if unknown:
            raise InvalidOptionError(f"--package {', '.join(unknown)}: not a stage-2 package of this lock "
                                     f"({', '.join(stage2) or 'none'})", "name stage-2 packages only")
        stage2 = [p for p in stage2 if p in subset]
    locked = by_name(read_uv_lock(lockdir / "uv.lock"))
    to_build = []
    for name in stage2:
        files = locked.get(name)
        if files is None:
            raise LockDirError(f"{name} is a stage-2 package of the record but not in uv.lock",
                               "re-run envbuilder lock")
        if files.sdist is None and files.wheel_files:
            progress(f"{name} {files.version}: a wheel on the index, nothing to build")
            continue
        to_build.append((name, files))
    return to_build
