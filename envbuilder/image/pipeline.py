"""`envbuilder build LOCKDIR`: lock dir -> bases -> Dockerfile -> context -> BuildKit -> checks."""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envbuilder import __version__, procs
from envbuilder.archlist import ArchList
from envbuilder.atomic import run_tempdir, write_atomic
from envbuilder.canonical import major_minor
from envbuilder.choices import BUILD_TARGETS, DEFAULT_BUILD_TARGET, LockMode
from envbuilder.errors import BuildFailedError, InvalidOptionError, NoCudaSourcesError, SecretLeakError
from envbuilder.image import engine, layerscan, registry
from envbuilder.image.buildlog import BuildLog, Step
from envbuilder.image.context import assemble
from envbuilder.image.images import BaseChoice, choose_bases
from envbuilder.image.render import (
    RenderValues,
    default_jobs,
    render_dockerfile,
)
from envbuilder.image.secrets import SecretSpec, check_ca_bundle, proxy_settings, secret_files
from envbuilder.jsonread import CA_BUNDLE_MAX_BYTES, read_bytes
from envbuilder.kernels import wheelhouse_for_lock
from envbuilder.kernels.wheelcache.shared import CacheSource
from envbuilder.lock.lockdir import LockDir, open_lockdir
from envbuilder.matrix.archs import check_arch_list
from envbuilder.paths import REPO_ROOT
from envbuilder.troubleshoot import troubleshoot
from envbuilder.uvbin import uv_binary, uv_version

TARGETS = BUILD_TARGETS
LOG_TAIL = 30


@dataclass
class BuildOptions:
    lockdir: Path
    tag: str | None = None
    base: str | None = None
    mode: str | None = None
    arch_list: ArchList | None = None   # None: the lock's (LockRecord.arch_list)
    jobs: int | None = None
    target: str = DEFAULT_BUILD_TARGET
    python: str | None = None
    ca_bundle: Path | None = None
    secrets: list[SecretSpec] = field(default_factory=list)
    no_cache: bool = False
    pull: bool = True
    scan: bool = True
    log_file: Path | None = None
    wheelhouse: Path | None = None  # stage 2 from `envbuilder wheels` output instead of compiling
    git_mirrors: list[str] = field(default_factory=list)  # --git-mirror: clones for the lock's git_sources
    cache_dir: Path | None = None   # where checked git-tag sources are kept (default: the envbuilder cache)
    push: str | None = None  # REGISTRY/NAME[:TAG]: pushed once built (and scanned), recorded by digest
    cache: CacheSource | None = None  # --cache: stage-2 wheels from a shared wheel cache; misses compile in the build


def default_tag(lock: LockDir, target: str) -> str:
    suffix = "" if target == "runtime" else f"-{target}"
    return f"envbuilder/{lock.row.lower()}:{lock.lock_sha256[:12]}{suffix}"


def target_python(lock: LockDir) -> str:
    py = str(lock.target.python or "")
    if not py or py in ("unknown", "none"):
        raise InvalidOptionError("the lock record names no target Python", "pass --python X.Y")
    return major_minor(py)


def probe_python(c: Any, image: str) -> str | None:
    """major.minor of `python3` in an image, or None when it has none."""
    try:
        cmd = ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
        status, out = engine.run_in_image(c, image, cmd, timeout=120)
    except Exception:
        return None
    return out.strip().splitlines()[-1] if status == 0 and out.strip() else None


def git_revision() -> str:
    try:
        out = procs.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    except OSError:
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def _advice_for(log: BuildLog) -> tuple[str, str | None]:
    text = "\n".join(log.raw)
    advice = troubleshoot(text)
    if advice is None:
        return "", None
    return advice.cause, advice.fix


@dataclass(frozen=True)
class BuildEvent:
    """What the build reports while it runs; the CLI decides how to show it.

    kind: "message" (a line), "warning", "status" (transient: replaces the previous status; "" ends it),
    "step" (a Dockerfile step finished: cached, done or error), "error" (where the build failed; the
    error's log_tail carries the log lines), "done" (the image is built).
    """

    kind: str
    text: str
    step: Step | None = None


BuildProgress = Callable[[BuildEvent], None]


@dataclass
class BuildResult:
    tag: str
    image_id: str
    row: str
    mode: str
    target: str
    lock_sha256: str
    base: dict[str, Any]
    python: dict[str, str]
    arch_list: str
    jobs: int
    size_bytes: int
    labels: dict[str, str]
    context_files: list[str]
    steps: list[dict[str, object]]
    build_seconds: float
    warnings: list[str]
    secrets: dict[str, Any]
    import_check: str = "not-run"
    import_check_report: list[str] | None = None
    secret_scan: dict[str, Any] | None = None
    total_seconds: float = 0.0
    push: dict[str, Any] | None = None  # registry.PushResult.to_dict(): reference, digest, by_digest

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for optional in ("import_check_report", "secret_scan", "push"):
            if out[optional] is None:
                del out[optional]
        return out


def _no_progress(event: BuildEvent) -> None:
    pass


def _check_options(opts: BuildOptions, lock: LockDir) -> tuple[LockMode, ArchList | None, int]:
    """(mode, arch list, jobs): every flag is checked before the base-image check, which may pull gigabytes."""
    mode = lock.mode
    if opts.mode is not None and opts.mode != mode:
        raise InvalidOptionError(
            f"--mode {opts.mode} but the lock was made for {mode} (its overrides differ: "
            f"{'torch is in the lock' if mode.torch_from_lock else 'torch comes from the base'})",
            f"re-lock with --mode {opts.mode}, or build without --mode")
    if not mode.builds_image:
        raise InvalidOptionError(f"{lock.path} is a --mode {mode} lock: it installs into an existing interpreter, "
                                 "not an image", "install it with: envbuilder bundle, then envbuilder install "
                                 "--system-site-packages (or re-lock with --mode hermetic or ngc-base)")
    if opts.target not in TARGETS:
        raise InvalidOptionError(f"--target {opts.target!r}", "use stage1, builder or runtime")
    if lock.record.kernel_less and opts.target != "stage1":
        names = ", ".join(lock.record.kernel_less)
        raise NoCudaSourcesError(
            f"{lock.path}: the lock pins {names} from sdists without CUDA sources: stage 2 would build "
            "packages that import and have no kernels",
            f"re-lock with --source git, with --set NAME==VERSION of a release that ships its kernels, or with "
            f"--set NAME==none for {names}; or build --target stage1")
    cuda = lock.target.cuda
    archs = opts.arch_list  # a lock without CUDA compiles nothing for a GPU: only what --arch-list asks
    if cuda not in (None, "none", "unknown"):
        archs = check_arch_list(opts.arch_list or lock.record.arch_list(), cuda)
    if opts.jobs is not None and opts.jobs < 1:
        raise InvalidOptionError(f"--jobs {opts.jobs}: needs at least one compile job",
                                 "pass a positive number, or leave --jobs out for the default")
    jobs = opts.jobs if opts.jobs is not None else default_jobs()
    return mode, archs, jobs


def _build_args(lock: LockDir, bases: BaseChoice, want_py: str, python_from: str, archs: ArchList | None, jobs: int,
                proxy_args: dict[str, str]) -> dict[str, str]:
    sde = lock.source_date_epoch
    created = datetime.fromtimestamp(sde, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "BUILDER_BASE": bases.builder, "RUNTIME_BASE": bases.runtime, "PYTHON": want_py,
        "PYTHON_FROM": python_from, "TORCH_CUDA_ARCH_LIST": archs.torch if archs else "",
        "NVTE_CUDA_ARCHS": archs.semicolon_numbers if archs else "",
        "MAX_JOBS": str(jobs), "SOURCE_DATE_EPOCH": str(sde), "ENVBUILDER_CREATED": created,
        "ENVBUILDER_VERSION": __version__, "ENVBUILDER_REVISION": git_revision(), "ENVBUILDER_ROW": lock.row,
        "ENVBUILDER_LOCK_SHA256": lock.lock_sha256, "ENVBUILDER_BASE": bases.runtime, **proxy_args,
    }


def _raise_build_failure(log: BuildLog, row: str, progress: BuildProgress) -> None:
    failed = log.failed_step()
    fd, log_path = tempfile.mkstemp(prefix=f"envbuilder-build-{row}-", suffix=".log")
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write("\n".join(log.raw) + "\n")
    tail = log.tail(LOG_TAIL)
    cause, fix = _advice_for(log)
    where = failed.short if failed else (log.solve_error or "the build")
    progress(BuildEvent("error", f"build failed at {where}"))  # the CLI prints log_tail above the error
    raise BuildFailedError(
        f"docker build failed at {where}" + (f": {cause}" if cause else ""),
        fix or f"see the last lines above and the full log at {log_path}",
        step=failed.short if failed else None, log_tail=tail, log=log_path)


def _import_check(c: Any, image_id: str, target: str, log: BuildLog) -> tuple[str, list[str] | None]:
    """(import_check, its report lines) for the built image."""
    if target == "stage1":
        return "skipped: stage 1 alone lacks the stage-2 modules its packages import", None
    if target == "builder":
        # the runtime stage checks imports during the build; the builder target gets it here
        status, out = engine.run_in_image(c, image_id, ["/opt/venv/bin/python",
                                                        "/opt/envbuilder/tools/import_check.py"])
        report = [ln for ln in out.splitlines() if ln.startswith("import-check")]
        if status != 0:
            tail = out.strip().splitlines()[-LOG_TAIL:]
            raise BuildFailedError("the import check failed in the builder image",
                                   "see the failing modules above; certify level 0 shows the same",
                                   step="import check", log_tail=tail)
        return "passed", report
    check = log.step_matching("runtime", "import_check.py")
    if check is None:
        return "not-run", None
    return "passed", [ln for ln in check.lines if ln.startswith("import-check")]


def _git_sources(opts: BuildOptions, lock: LockDir, prebuilt: set[str], progress: BuildProgress) -> list[Path]:
    """The checked archives of the lock's git-tag sources that stage 2 builds (none for --target stage1, or
    for a package the wheelhouse brings): had here, from the cache, a mirror or the network, so the image
    build itself needs no route to the repository's host."""
    if opts.target == "stage1":
        return []
    from envbuilder.kernels import gitsource
    from envbuilder.kernels.files import cache_root

    mirrors = gitsource.parse_mirrors(opts.git_mirrors)
    out = []
    for name, src in sorted(lock.record.git_sources.items()):
        if name in prebuilt:
            continue
        got = gitsource.obtain(name, lock.record.pins[name].version, src, cache_root(opts.cache_dir), mirrors,
                               ca_bundle=opts.ca_bundle, progress=lambda m: progress(BuildEvent("message", m.strip())))
        progress(BuildEvent("message", f"stage 2 builds {name} {got.version} from {src.url} {src.tag} "
                                       f"(commit {src.commit[:12]}, tree verified; {got.origin})"))
        out.append(got.path)
    return out


def _wheelhouse_from_cache(opts: BuildOptions, archs: ArchList | None, progress: BuildProgress) -> Path | None:
    """The stage-2 wheels the shared cache holds for this lock (verified) as a wheelhouse; the packages it does
    not hold are left to the build, which compiles them as without a wheelhouse. None when it holds none."""
    from envbuilder.kernels.pipeline import wheelhouse_from_cache
    from envbuilder.matrix import load_matrix

    assert opts.cache is not None
    made = wheelhouse_from_cache(opts.lockdir, opts.cache, load_matrix(),
                                 lambda m: progress(BuildEvent("message", m)), arch_list=archs,
                                 cache_dir=opts.cache_dir, ca_bundle=opts.ca_bundle, git_mirrors=opts.git_mirrors,
                                 build_misses=False)
    progress(BuildEvent("message", f"stage 2 from the shared cache {opts.cache.url}: "
                                   f"{', '.join(p.name for p in made.packages) or 'nothing'}"))
    return made.output if made.packages else None


def build_image(opts: BuildOptions, progress: BuildProgress = _no_progress) -> BuildResult:
    """Build a lock directory into an image. Reports through `progress`; prints nothing itself.

    plan (every option checked, the bases there, before BuildKit starts) -> build (render, context, BuildKit)
    -> check the image (import check, secret scan) -> push."""
    t0 = time.monotonic()
    plan = plan_build(opts, progress)
    built = run_buildkit(plan, progress)
    result = check_image(plan, built, progress)
    if opts.push:  # after the secret scan: an image that leaks a secret is never pushed
        result.push = _push(plan, built.image_id, progress)
    result.total_seconds = round(time.monotonic() - t0, 1)
    progress(BuildEvent("done", f"built {plan.tag}  {built.image_id[:19]}  {result.size_bytes / 1e9:.2f} GB  "
                                   f"in {result.build_seconds:.0f}s"))
    return result


@dataclass(frozen=True)
class BuildPlan:
    """A build decided before BuildKit starts: the lock, the checked options, stage 2's wheels and sources, the
    bases (present in the engine), the Python, the tag and the build arguments."""

    opts: BuildOptions
    lock: LockDir
    mode: LockMode
    archs: ArchList | None
    jobs: int
    ca_bundle: Path | None
    wheels: list[Path]          # --wheelhouse: stage 2's wheels
    prebuilt: list[str]         # the packages they cover
    git_sources: list[Path]
    engine: Any                 # the engine client
    cli: str                    # the engine's CLI with BuildKit
    bases: BaseChoice
    python: str
    python_from: str
    proxy_secrets: dict[str, str]
    tag: str
    build_args: dict[str, str]
    warnings: list[str]


def plan_build(opts: BuildOptions, progress: BuildProgress) -> BuildPlan:
    lock = open_lockdir(opts.lockdir)
    mode, archs, jobs = _check_options(opts, lock)
    if opts.push:  # a bad --push fails before the build, not after an hour of it
        registry.push_target(opts.push, "latest")
    ca_bundle = check_ca_bundle(opts.ca_bundle) if opts.ca_bundle is not None else None
    if opts.cache is not None and opts.wheelhouse is None:  # a given --wheelhouse wins over the cache
        opts = replace(opts, wheelhouse=_wheelhouse_from_cache(opts, archs, progress))
    wheels, prebuilt = ([], []) if opts.wheelhouse is None else \
        wheelhouse_for_lock(opts.wheelhouse, lock.lock_sha256, lock.record.target.torch)
    # before any engine work (a base pull may be gigabytes): the git-tag sources stage 2 builds
    git_sources = _git_sources(opts, lock, set(prebuilt), progress)
    c, cli = engine.client(), engine.buildkit_cli()
    bases = choose_bases(lock.target, mode, opts.base)
    for base in dict.fromkeys((bases.builder, bases.runtime)):
        engine.ensure_base(c, base, pull=opts.pull)
    warnings = [w for w in (bases.warning(),) if w is not None]
    want_py = major_minor(opts.python) if opts.python else target_python(lock)
    if opts.python and want_py != target_python(lock):
        warnings.append(f"--python {want_py} differs from the lock's target Python {target_python(lock)}; "
                        "uv.lock is universal so it installs, but the image is not the locked target")
    python_from = bases.python_from
    if python_from == "probe":
        python_from = "system" if probe_python(c, bases.builder) == want_py else "uv"
    uv_ver, lock_uv = uv_version() or "unknown", lock.record.uv_version or "unknown"
    if lock_uv not in ("unknown", uv_ver):
        warnings.append(f"the lock was made with uv {lock_uv}; this envbuilder ships uv {uv_ver}")
    proxy_args, proxy_secrets = proxy_settings()
    plan = BuildPlan(opts, lock, mode, archs, jobs, ca_bundle, wheels, prebuilt, git_sources, c, cli, bases, want_py,
                     python_from, proxy_secrets, opts.tag or default_tag(lock, opts.target),
                     _build_args(lock, bases, want_py, python_from, archs, jobs, proxy_args), warnings)
    for w in warnings:
        progress(BuildEvent("warning", w))
    progress(BuildEvent("message", f"build {lock.row} ({mode}) -> {plan.tag}  target={opts.target}  "
                                   f"base={bases.builder}  python={want_py} ({python_from})  jobs={jobs}  "
                                   f"arch={archs or '-'}"))
    if opts.wheelhouse is not None:
        progress(BuildEvent("message", f"stage 2 from the wheelhouse {opts.wheelhouse}: "
                                       f"{', '.join(prebuilt) or 'nothing'}"))
    return plan


@dataclass
class BuiltImage:
    image_id: str
    context_files: list[str]
    log: BuildLog
    seconds: float
    secret_ids: list[str]


def run_buildkit(plan: BuildPlan, progress: BuildProgress) -> BuiltImage:
    """Render the Dockerfile, assemble the context, run BuildKit with the secrets mounted; BuildFailedError with
    the failed step when it fails."""
    opts = plan.opts
    log = BuildLog()
    with run_tempdir("ctx") as ctx, \
            secret_files(plan.ca_bundle, opts.secrets, plan.proxy_secrets) as (secret_argv, secret_ids):
        dockerfile = render_dockerfile(RenderValues(
            mode=plan.mode, builder_base=plan.bases.builder, runtime_base=plan.bases.runtime, python=plan.python,
            python_from=plan.python_from, archs=plan.archs, jobs=plan.jobs, secret_ids=tuple(secret_ids),
            stage1_skip=tuple(sorted(plan.lock.record.stage1_deferred)), wheelhouse=bool(plan.wheels),
            stage2_packages=tuple(plan.prebuilt), git_sources=bool(plan.git_sources)))
        files = assemble(ctx, plan.lock, dockerfile, Path(uv_binary()), plan.wheels, plan.git_sources)
        iidfile = ctx / ".iid"
        argv = _buildkit_argv(plan, secret_argv, iidfile, ctx)
        t_build = time.monotonic()
        progress(BuildEvent("status", "building (BuildKit, plain progress)..."))
        rc = engine.run_build(argv, ctx, _step_reporter(log, progress))
        progress(BuildEvent("status", ""))
        seconds = time.monotonic() - t_build
        image_id = iidfile.read_text().strip() if rc == 0 and iidfile.exists() else None
    if opts.log_file is not None:
        write_atomic(opts.log_file, "\n".join(log.raw) + "\n")
    if rc != 0 or image_id is None:
        _raise_build_failure(log, plan.lock.row, progress)
    assert image_id is not None
    return BuiltImage(image_id, files, log, seconds, sorted(secret_ids))


def _buildkit_argv(plan: BuildPlan, secret_argv: list[str], iidfile: Path, ctx: Path) -> list[str]:
    argv = [plan.cli, "build", "--progress=plain", "--target", plan.opts.target, "-t", plan.tag,
            "--iidfile", str(iidfile), *secret_argv]
    for k, v in sorted(plan.build_args.items()):
        argv += ["--build-arg", f"{k}={v}"]
    if plan.opts.no_cache:
        argv.append("--no-cache")
    # The context by its unique absolute path, never ".": the CLI keys BuildKit's incremental
    # context sync on the path, and files with the same size and (normalised) mtime as in the
    # previous sync under that key would not be re-sent, so a changed uv.lock could go unseen.
    return [*argv, str(ctx.resolve())]


def _step_reporter(log: BuildLog, progress: BuildProgress) -> Callable[[str], None]:
    """Feed BuildKit's plain output to the log; report a running step's last line, and each step once done."""
    shown: set[int] = set()

    def on_line(line: str) -> None:
        step = log.feed(line)
        if step is None or step.name == "internal":
            return
        if step.status == "running":
            last = step.lines[-1] if step.lines else ""
            progress(BuildEvent("status", f"{step.short[:70]}  {last[:70]}", step))
        elif step.id not in shown:
            shown.add(step.id)
            progress(BuildEvent("step", step.short[:150], step))

    return on_line


def check_image(plan: BuildPlan, built: BuiltImage, progress: BuildProgress) -> BuildResult:
    """The built image's report, its import check, and (with --scan) the secret scan of its layers."""
    c, bases = plan.engine, plan.bases
    attrs = engine.inspect(c, built.image_id)
    result = BuildResult(
        tag=plan.tag, image_id=built.image_id, row=plan.lock.row, mode=plan.mode, target=plan.opts.target,
        lock_sha256=plan.lock.lock_sha256,
        base={"builder": bases.builder, "runtime": bases.runtime, "digest_pinned": bases.digest_pinned,
              "from": bases.source},
        python={"version": plan.python, "from": plan.python_from}, arch_list=plan.archs.torch if plan.archs else "",
        jobs=plan.jobs, size_bytes=int(attrs.get("Size", 0)),
        labels=dict((attrs.get("Config") or {}).get("Labels") or {}), context_files=built.context_files,
        steps=built.log.summary(), build_seconds=round(built.seconds, 1), warnings=plan.warnings,
        secrets={"ca_bundle": plan.ca_bundle is not None, "ids": built.secret_ids},
    )
    result.import_check, result.import_check_report = _import_check(c, built.image_id, plan.opts.target, built.log)
    if plan.opts.scan:
        result.secret_scan = scan_image(c, built.image_id, plan.ca_bundle, plan.opts.secrets, plan.proxy_secrets,
                                        progress)
    return result


def _push(plan: BuildPlan, image_id: str, progress: BuildProgress) -> dict[str, Any]:
    assert plan.opts.push is not None
    tag = plan.tag
    target = registry.push_target(plan.opts.push, tag.rpartition(":")[2] if ":" in tag.rsplit("/", 1)[-1]
                                  else "latest")
    progress(BuildEvent("status", f"pushing to {target.engine}..."))
    pushed = registry.push_image(image_id, target, lambda m: progress(BuildEvent("status", m[:140])))
    progress(BuildEvent("status", ""))
    progress(BuildEvent("message", f"pushed {pushed.by_digest}"))
    return pushed.to_dict()


def secret_needles(ca_bundle: Path | None, specs: list[SecretSpec],
                   proxy_secrets: dict[str, str]) -> dict[str, bytes]:
    import os

    needles: dict[str, bytes] = {}
    if ca_bundle is not None:
        needles.update(layerscan.ca_needles(read_bytes(ca_bundle, what="CA bundle", max_bytes=CA_BUNDLE_MAX_BYTES)))
    for spec in specs:
        raw = (os.environ.get(spec.env or "", "").encode() if spec.env else
               read_bytes(spec.src or Path(), what="secret file", max_bytes=CA_BUNDLE_MAX_BYTES))
        if len(raw.strip()) >= 8:  # shorter values match by chance
            needles[f"secret:{spec.id}"] = raw.strip()
    for var, pval in proxy_secrets.items():
        needles[f"proxy:{var}"] = pval.encode()
    return needles


def scan_image(c: Any, image: str, ca_bundle: Path | None, specs: list[SecretSpec],
               proxy_secrets: dict[str, str], progress: BuildProgress = _no_progress) -> dict[str, Any]:
    """Scan the built image's own layers; SecretLeakError if a secret is found in one."""
    needles = secret_needles(ca_bundle, specs, proxy_secrets)
    if not needles:
        return {"needles": 0, "findings": []}
    t = time.monotonic()
    progress(BuildEvent("status", f"scanning image layers for {len(needles)} secret values..."))
    findings, stats = layerscan.scan_saved_image(engine.save_stream(c, image), needles)
    progress(BuildEvent("status", ""))
    base_layers: set[str] = set()
    attrs = engine.inspect(c, image)
    # Findings in the base's own layers are the base's business (e.g. a public root it ships);
    # those in layers this build added are leaks.
    parent = (attrs.get("Config") or {}).get("Labels", {}) or {}
    base_ref = parent.get("org.opencontainers.image.base.name")
    if base_ref and engine.image_exists(c, base_ref):
        base_layers = set(engine.inspect(c, base_ref).get("RootFS", {}).get("Layers", []))
    leaks = [f for f in findings if f.layer not in base_layers]
    report = {"needles": len(needles), **stats, "seconds": round(time.monotonic() - t, 1),
              "findings": [f.__dict__ for f in leaks]}
    if leaks:
        first = leaks[0]
        raise SecretLeakError(f"secret {first.needle} found in image layer {first.layer[:19]} at /{first.path}",
                              "mount secrets only with RUN --mount=type=secret; never COPY them or write them "
                              "to files", findings=report["findings"])
    return report
