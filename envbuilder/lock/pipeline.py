"""The lock pipeline: resolve -> render -> uv lock -> platform check (-> fix, re-lock) -> record.

Everything happens in a staging directory beside the output; at the very end only the files
the lock owns (pyproject.toml, uv.lock, the record, .python-version, local wheels) are swapped
in, so a failed or interrupted lock leaves an existing lock directory exactly as it was, and
whatever else the user keeps there (the `.venv` of `uv sync`, notes) survives a re-lock.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from envbuilder.atomic import claim_output_dir, commit_files, link_or_copy, owned_names, staging_dir, write_atomic
from envbuilder.errors import EnvbuilderError, LockOutOfDateError, NetworkError, PlatformWheelError, UvError, os_error
from envbuilder.lock.fidelity import Fidelity, compare, our_versions
from envbuilder.lock.interpreter import interpreter_for, own_interpreter, uv_lacked_interpreter
from envbuilder.lock.kernel_sources import check_kernel_sources, derive_uncovered
from envbuilder.lock.platform import check_platform, fetch_release_files, find_constraint, source_builds, target_tags
from envbuilder.lock.record import RECORD_NAME, GitSource, LockFindings, LockRecord, build_record, source_date_epoch
from envbuilder.lock.reuse import UvLockRun, lock_offline_first, reusable_constraints, seed_from
from envbuilder.lock.uvlock import LockedPackage, read_uv_lock, stage1_closure, stage1_packages
from envbuilder.lock.uvrun import uv_version
from envbuilder.lock.validate import check_ca_bundle, check_find_links, check_glibc, check_target_arch
from envbuilder.matrix.model import Matrix
from envbuilder.progress import Progress
from envbuilder.render.pyproject import render_pyproject
from envbuilder.resolve.prebuilt import BUILD_COST
from envbuilder.resolve.request import ResolveRequest
from envbuilder.resolve.resolver import PYTHON_CANDIDATES, Resolution, resolve, with_locked_stage2

MAX_FIX_ROUNDS = 3


@dataclass
class LockOptions:
    output: Path
    check: bool = False
    ca_bundle: Path | None = None
    find_links: list[Path] = field(default_factory=list)
    verbose_uv: bool = False  # keep uv's -v log in LockResult.uv_log (tests assert no sdist was built)
    wait: bool = True  # False: fail with OutputBusyError when another run holds the directory
    check_fix: str = ""  # the user's own command line, repeated in --check's fix line
    offline_first: bool = True  # resolve from the uv cache when it is complete for the row's cutoff
    reuse_lock: bool = True  # seed staging with the output's uv.lock (uv validates instead of re-resolving)


@dataclass
class LockResult:
    record: LockRecord
    resolution: Resolution
    changed: bool
    output: Path
    timings: dict[str, float]
    uv_log: str = ""
    resolved_offline: bool = False  # every uv lock round resolved from the uv cache alone
    seeded: bool = False  # staging started from the existing uv.lock
    online_reason: str = ""  # why the offline attempt was not used

    def to_dict(self) -> dict[str, object]:
        return {"record": self.record.to_dict(), "changed": self.changed, "output": str(self.output),
                "resolved_offline": self.resolved_offline, "seeded": self.seeded,
                "timings": {k: round(v, 3) for k, v in sorted(self.timings.items())}}


def find_local_wheels(res: Resolution, dirs: list[Path]) -> dict[str, Path]:
    """Wheels in --find-links dirs that satisfy a stage-1 pin on the target platform."""
    tags = target_tags(res.python, res.glibc)
    found: dict[str, Path] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for whl in sorted(d.glob("*.whl")):
            try:
                name, version, _, wtags = parse_wheel_filename(whl.name)
            except InvalidWheelFilename:
                continue
            pin = res.pins.get(str(name))
            if pin and pin.stage == 1 and version.public == Version(pin.version).public and wtags & tags:
                found.setdefault(pin.name, whl)
    return found


def _choose_target_python(res: Resolution, req: ResolveRequest, locked: list[LockedPackage], root: str,
                          progress: Progress) -> tuple[str, dict[str, list[str]]]:
    """The interpreter the lock targets, and what stage 1 builds from source on it.

    requires-python spans several interpreters, but a lock can be wheel-complete on some and
    not others (v2.3.0 on 3.12 compiles pyzmq 23.2.1, which fails). Without --python, prefer
    the newest interpreter whose stage 1 compiles nothing; with --python, only warn.
    """
    spec = SpecifierSet(res.requires_python)
    candidates = [p for p in PYTHON_CANDIDATES if Version(p) in spec] or [res.python]
    builds = {}
    for py in candidates:
        compiled, sdist_only = source_builds(stage1_packages(locked, root, py), py, res.glibc)
        builds[py] = {"compiled": compiled, "sdist_only": sdist_only}
    chosen = res.python
    if req.python is None:
        clean = [p for p in candidates if not builds[p]["compiled"]]
        chosen = clean[-1] if clean else min(candidates, key=lambda p: (len(builds[p]["compiled"]), -float(p[2:])))
        if chosen != res.python:
            progress(f"warning: on Python {res.python} stage 1 would compile "
                     f"{', '.join(builds[res.python]['compiled'])} from source (no wheels for it); "
                     f"targeting Python {chosen} instead (pass --python {res.python} to insist)")
    if builds.get(chosen, {}).get("compiled"):
        progress(f"warning: on Python {chosen} stage 1 compiles {', '.join(builds[chosen]['compiled'])} "
                 "from source: the build needs a compiler and may fail")
    return chosen, builds.get(chosen, {"compiled": [], "sdist_only": []})


def _sdist_only_locked(uv_lock: Path) -> dict[str, str]:
    """name -> version of the registry packages uv locked with an sdist and no wheel."""
    return {p.name: p.version for p in read_uv_lock(uv_lock)
            if p.from_registry and p.sdist is not None and not p.wheels and p.version}


def tomllib_name(pyproject: Path) -> str:
    """The project name uv normalises and records in uv.lock."""
    import re

    m = re.search(r'^name = "([^"]+)"', pyproject.read_text(), re.M)
    return m.group(1) if m else ""


def _same_contents(a: Path, b: Path, names: list[str]) -> bool:
    for n in names:
        fa, fb = a / n, b / n
        if not fa.exists() or not fb.exists() or fa.read_bytes() != fb.read_bytes():
            return False
    return True


def _fix_platform(staging: Path, res: Resolution, ca_bundle: Path | None, progress: Progress
                  ) -> list[dict[str, str]]:
    """Find constraints for packages that cannot install on the target; [] when all is well."""
    problems = check_platform(read_uv_lock(staging / "uv.lock"), res.python, res.glibc)
    added = []
    for prob in problems:
        if prob.kind != "glibc":
            progress(f"warning: {prob.package} {prob.version}: {prob.detail}")
            continue
        try:
            releases = fetch_release_files(prob.package, ca_bundle)
        except OSError as exc:
            raise NetworkError(f"cannot read {prob.package}'s release list to fix its platform problem: {exc}",
                               "check network access, or add the constraint yourself with --set") from exc
        constraint = find_constraint(prob, releases, res.python, res.glibc, res.exclude_newer)
        if constraint is None:
            raise PlatformWheelError(
                f"{prob.package} {prob.version} cannot install on the target ({prob.detail}) and no older "
                f"release can", "use a base OS with a newer glibc (--glibc), or another --nemo row")
        progress(f"{prob.package} {prob.version}: {prob.detail}; adding constraint {constraint}")
        added.append({"package": prob.package, "constraint": constraint,
                      "reason": f"{prob.package} {prob.version}: {prob.detail}"})
    return added


def _uv_lock(staging: Path, cutoff: int, opts: LockOptions, requires_python: str, interpreter: str | None,
             progress: Progress) -> tuple[UvLockRun, str | None]:
    """`uv lock` (offline first), and the interpreter it was given (None: uv found its own).

    envbuilder's own Python when it fits requires-python; else uv searches itself, and only when
    it cannot start (none on its search path, or a broken one there such as an inactive pyenv
    shim) do we look for one and run again with --python. Looking first would cost a Python
    start-up per candidate on every lock, --check of an unchanged lock included. Which interpreter
    uv runs with does not change the lock (it is universal over requires-python).
    """
    def run(python: str | None) -> UvLockRun:
        args = [*(["--python", python] if python else []), *(["-v"] if opts.verbose_uv else [])]
        return lock_offline_first(staging, cutoff, opts.ca_bundle, args, offline_first=opts.offline_first)

    interpreter = interpreter or own_interpreter(requires_python)
    if interpreter is not None:
        return run(interpreter), interpreter
    try:
        return run(None), None
    except UvError as exc:
        found = interpreter_for(requires_python) if uv_lacked_interpreter(exc) else None
        if found is None:
            raise
        saved = exc.details.get("log_file")
        if saved:  # the retry's outcome is the one the user sees
            Path(saved).unlink(missing_ok=True)
    progress(f"uv lock runs with {found} (Python {requires_python})")
    return run(found), found


def run_lock(matrix: Matrix, req: ResolveRequest, opts: LockOptions, progress: Progress = lambda _: None
             ) -> LockResult:
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    check_glibc(req.glibc)
    check_find_links(opts.find_links)
    check_ca_bundle(opts.ca_bundle)
    res = resolve(matrix, req)
    check_target_arch(res, req.arch_list)
    timings["resolve"] = time.monotonic() - t0
    for w in res.warnings:
        progress(f"warning: {w}")
    for v in res.prebuilt:
        if v.answer == "yes":
            progress(f"{v.package} {v.version}: prebuilt wheel {v.wheel} (no compile)")
        else:
            progress(f"{v.package} {v.version} compiles from source in stage 2 ({BUILD_COST.get(v.package, '')}): "
                     f"prebuilt wheel {v.answer} ({v.source})")

    out = Path(opts.output)
    with claim_output_dir(out, is_lock_dir, "an envbuilder lock directory", wait=opts.wait, progress=progress,
                          create=not opts.check) as real:
        try:
            return _lock_into(matrix, req, opts, res, out, real, timings, t0, progress)
        except OSError as exc:
            raise os_error(exc, out, action="use", flag="-o") from exc


PYTHON_VERSION_NAME = ".python-version"
OWNED = ("pyproject.toml", "uv.lock", RECORD_NAME, PYTHON_VERSION_NAME)


def is_lock_dir(path: Path) -> bool:
    return (path / RECORD_NAME).is_file()


def owned_files(lockdir: Path) -> list[str]:
    """The files a previous lock wrote here: the fixed names plus those its record lists."""
    names = set(OWNED)
    with contextlib.suppress(OSError, ValueError, EnvbuilderError):  # a broken record still owns the fixed names
        files = LockRecord.from_lockdir(lockdir, verify=False).files
        names.update(n for n in files if isinstance(n, str) and _safe_rel(n))
    return owned_names(lockdir, names)


def _safe_rel(name: str) -> bool:
    p = Path(name)
    return not p.is_absolute() and ".." not in p.parts


def _stale_summary(staging: Path, out: Path, names: list[str]) -> str:
    """What re-locking would change, in one line (for --check)."""
    differ = [n for n in names if not (out / n).is_file() or (out / n).read_bytes() != (staging / n).read_bytes()]
    pins: list[str] = []
    with contextlib.suppress(OSError, ValueError, KeyError):
        from envbuilder.lock.uvlock import locked_versions

        old = locked_versions(out / "uv.lock")
        new = locked_versions(staging / "uv.lock")
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                pins.append(f"{name} {old.get(name, '-')} -> {new.get(name, '-')}")
    text = f"files that would change: {', '.join(differ) or 'none'}"
    if pins:
        text += f"; packages: {', '.join(pins[:6])}" + (f" (+{len(pins) - 6} more)" if len(pins) > 6 else "")
    return text


def _fidelity(matrix: Matrix, res: Resolution, staging: Path, constraints: list[dict[str, str]],
              progress: Progress) -> Fidelity | None:
    """The lock against the row's fidelity target (upstream's uv.lock), when the row has one."""
    row = matrix.find_row(name=res.row)
    if row is None or row.upstream_lock is None:
        return None
    result = compare(our_versions(staging / "uv.lock"), row.upstream_lock, res.upstream,
                     {c["package"]: c["constraint"] for c in constraints})
    progress(f"fidelity: {result.agree} of {result.both} packages agree with {result.target} "
             f"({result.percent}%); differences by reason: "
             + (", ".join(f"{k} {v}" for k, v in result.by_reason().items()) or "none"))
    for d in result.unexplained:
        progress(f"warning: {d.package} {d.ours} differs from upstream's {d.upstream} for no recorded reason")
    return result


def _lock_into(matrix: Matrix, req: ResolveRequest, opts: LockOptions, res: Resolution, out: Path, real: Path,
               timings: dict[str, float], t0: float, progress: Progress) -> LockResult:
    with staging_dir(real) as staging:
        local = find_local_wheels(res, opts.find_links)
        local_rel: dict[str, str] = {}
        for name, whl in sorted(local.items()):
            rel = f"wheels/{whl.name}"
            link_or_copy(whl, staging / rel)
            local_rel[name] = rel
            progress(f"{name}: using local wheel {whl.name}")

        seeded = opts.reuse_lock and is_lock_dir(real) and seed_from(real, staging)
        # a per-package cutoff later than the row's moves the date cached index pages must postdate
        cutoff = source_date_epoch(res.latest_cutoff) if res.exclude_newer else 0
        offline, online_reason = True, ""
        uv_log = ""
        derived = derive_uncovered(matrix, res, opts.ca_bundle, progress)
        constraints: list[dict[str, str]] = reusable_constraints(
            real, lambda cs: render_pyproject(res, matrix, cs, local_rel, derived), req.python, req.glibc
        ) if seeded else []
        interpreter: str | None = None
        for round_ in range(MAX_FIX_ROUNDS + 1):
            t = time.monotonic()
            text = render_pyproject(res, matrix, [c["constraint"] for c in constraints], local_rel, derived)
            write_atomic(staging / "pyproject.toml", text)
            timings["render"] = timings.get("render", 0.0) + time.monotonic() - t
            progress("uv lock" + (f" (again, after {len(constraints)} platform fix(es))" if round_ else ""))
            t = time.monotonic()
            run, interpreter = _uv_lock(staging, cutoff, opts, res.requires_python, interpreter, progress)
            uv_log = run.log
            offline = offline and run.resolved_offline
            online_reason = online_reason or run.fallback_reason
            timings["uv_lock"] = timings.get("uv_lock", 0.0) + time.monotonic() - t
            t = time.monotonic()
            new = _fix_platform(staging, res, opts.ca_bundle, progress)
            timings["platform_check"] = timings.get("platform_check", 0.0) + time.monotonic() - t
            # a torch-importing sdist the graph brings without a component pin moves to stage 2 (lock again)
            staged = with_locked_stage2(matrix, res, _sdist_only_locked(staging / "uv.lock"))
            if not new and staged is res:
                break
            for name in sorted(set(staged.pins) - set(res.pins)):
                progress(f"{name} {staged.pins[name].version} is in the locked graph and builds only against "
                         "torch: moving it to stage 2")
            if staged is not res:
                res = staged
                derived = derive_uncovered(matrix, res, opts.ca_bundle, progress)
            constraints += new
        else:
            raise PlatformWheelError("platform fixes did not converge after "
                                     f"{MAX_FIX_ROUNDS} rounds", "lock with --glibc of a newer base OS")

        locked = read_uv_lock(staging / "uv.lock")
        t = time.monotonic()
        kernel_less: list[str] = []
        git_sources: dict[str, GitSource] = {}
        check_kernel_sources(res, locked, opts.ca_bundle, progress, matrix=matrix, kernel_less=kernel_less,
                             git_sources=git_sources)
        timings["kernel_sources"] = time.monotonic() - t
        root = tomllib_name(staging / "pyproject.toml")
        # a stage-2 sdist pulled in by stage 1 (nemo-toolkit 2.0/2.1 [all] requires mamba-ssm) would be
        # built during stage 1, before torch is installed: stage 1 must skip it (--no-install-package)
        reach = stage1_closure(locked, root)
        deferred = sorted(p.name for p in res.stage(2) if p.name in reach)
        for name in deferred:
            progress(f"warning: stage 1 depends on {name}; stage 1 installs with --no-install-package {name}")
        python, builds = _choose_target_python(res, req, locked, root, progress)
        fidelity = _fidelity(matrix, res, staging, constraints, progress)
        record = build_record(res, req, staging, LockFindings(
            uv_version() or "unknown", constraints, local_rel, [str(p) for p in opts.find_links if p.is_dir()],
            deferred, target_python=python, source_builds=builds, kernel_less=kernel_less,
            git_sources=git_sources, fidelity=fidelity.to_dict() if fidelity else None))
        write_atomic(staging / RECORD_NAME, record.to_json())
        # `uv sync` in the lock directory picks the interpreter the record targets
        write_atomic(staging / PYTHON_VERSION_NAME, f"{python}\n")
        names = ["pyproject.toml", "uv.lock", RECORD_NAME, PYTHON_VERSION_NAME, *local_rel.values()]
        changed = not (real.is_dir() and _same_contents(staging, real, names)
                       and set(owned_files(real)) <= set(names))
        if opts.check:
            if changed:
                raise LockOutOfDateError(
                    f"{out} is out of date: {_stale_summary(staging, real, names)}",
                    f"run: {opts.check_fix or f'envbuilder lock --{req.row_option} {req.row} -o {out}'}")
        elif changed:
            commit_files(staging, real, names, remove=owned_files(real))
        timings["total"] = time.monotonic() - t0
        return LockResult(record, res, changed, out, timings, uv_log, resolved_offline=offline, seeded=seeded,
                          online_reason=online_reason)
