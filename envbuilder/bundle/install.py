"""`envbuilder install BUNDLE --venv DIR`: install a bundle with no package index, all or nothing.

1. parts (if split): every part present with its sha256, then reassembled into a temp directory;
2. every file of the manifest checked against its sha256 (and the lock's own record);
3. a relocatable venv made in a staging directory beside DIR (`--system-site-packages` keeps a
   host torch visible), then `uv pip install --offline --no-index --find-links files/ --no-deps
   --require-hashes` of exactly what `uv export --frozen` lists, and the stage-2 wheels from the
   bundle's (or a given) wheelhouse;
4. the staging venv replaces DIR in one swap. Any failure leaves DIR as it was.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuilder import procs
from envbuilder.atomic import guard_output_dir, held_tempdir, promote_dir, staging_dir, write_atomic
from envbuilder.bundle.cached import CacheInstall, requirement_lines, stage2_from_cache, summary
from envbuilder.bundle.manifest import MANIFEST, BundleManifest, read_manifest
from envbuilder.bundle.parts import PARTS_INDEX, extract_parts, read_index, verify_parts
from envbuilder.bundle.runtime_hooks import RuntimeHook, write_runtime_hooks
from envbuilder.errors import (
    BundleInvalidError,
    BundlePartMissingError,
    HashMismatchError,
    InvalidOptionError,
    OfflineInstallError,
)
from envbuilder.host.torchprobe import RecordedTorch, probe_torch
from envbuilder.jsonread import Fields
from envbuilder.kernels import WHEELHOUSE_RECORD, read_wheelhouse
from envbuilder.kernels.files import verify
from envbuilder.kernels.torchenv import check_host_torch
from envbuilder.lock.installset import export_requirements
from envbuilder.lock.lockdir import open_lockdir
from envbuilder.lock.record import LockRecord
from envbuilder.lock.uvrun import uv_binary, uv_env
from envbuilder.progress import Progress

INSTALL_RECORD = "envbuilder-install.json"
SDISTS_DIR = "envbuilder-sdists"
# every route to a network: install must never need one, and a test proves it by blocking them
OFFLINE_ENV = {"UV_OFFLINE": "1", "UV_NO_INDEX": "1", "UV_PYTHON_DOWNLOADS": "never"}


@dataclass
class InstallOptions:
    bundle: Path
    venv: Path
    python: str | None = None             # interpreter for the venv (default: the lock's target Python)
    system_site_packages: bool = False
    wheelhouse: Path | None = None        # stage-2 wheels built elsewhere (overrides the bundle's)
    skip_stage2: bool = False
    cache: CacheInstall | None = None     # stage 2 from a shared wheel cache (a miss is built here)


@dataclass
class InstallResult:
    venv: Path
    lock_sha256: str
    packages: int
    stage2: list[str]
    stage2_missing: list[str]
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)
    stage2_wheels: list[dict[str, Any]] = field(default_factory=list)  # --cache: each wheel and where it came from

    def to_dict(self) -> dict[str, Any]:
        return {"venv": str(self.venv), "lock_sha256": self.lock_sha256, "packages": self.packages,
                "stage2": self.stage2, "stage2_missing": self.stage2_missing,
                "stage2_wheels": self.stage2_wheels, "seconds": round(self.seconds, 3),
                "timings": {k: round(v, 3) for k, v in sorted(self.timings.items())}}


def verify_tree(tree: Path, manifest_sha256: str | None = None, lock_sha256: str | None = None
                ) -> tuple[BundleManifest, LockRecord]:
    """The manifest, after checking its own hash, every file it lists and its binding to the lock it carries.

    `manifest_sha256` / `lock_sha256`: what a split bundle's parts index says they are.
    """
    manifest = read_manifest(tree)
    where = f"bundle manifest {tree / MANIFEST}"
    if manifest_sha256 is not None and manifest.sha256 != manifest_sha256:
        raise HashMismatchError(f"{where} has sha256 {manifest.sha256[:12]}…, the parts index's manifest_sha256 is "
                                f"{manifest_sha256[:12]}…", "copy every part and the index again")
    if lock_sha256 is not None and lock_sha256 != manifest.lock_sha256:
        raise BundleInvalidError(f"the parts index names lock {lock_sha256[:12]}, the manifest lock "
                                 f"{manifest.lock_sha256[:12]}", "copy every part and the index again")
    manifest.check_references(where)
    missing = sorted(rel for rel in manifest.files if not (tree / rel).is_file())
    if missing:
        raise BundlePartMissingError(f"{len(missing)} bundle file(s) missing: {', '.join(missing[:5])}",
                                     "copy the whole bundle directory again", missing=missing)
    for rel, (sha, _size) in sorted(manifest.files.items()):
        verify(tree / rel, sha, f"bundle file {rel}")
    record = open_lockdir(tree / "lock").record  # the lock's own hashes (pyproject, uv.lock, wheels), recomputed
    manifest.bind_to_lock(record, where)
    return manifest, record


_BUILD_FAILED = re.compile(r"Failed to (?:download and )?build `([A-Za-z0-9._-]+)==([^`\s]+)`")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], what: str,
         manifest: BundleManifest | None = None) -> None:
    proc = procs.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        head = next((ln for ln in lines if ln.startswith("error:")), lines[-1] if lines else f"exit {proc.returncode}")
        causes = [ln.strip() for ln in lines if ln.strip().startswith("cause:")]
        cause = head.removeprefix("error: ") + (f" ({causes[-1]})" if causes else "")
        raise OfflineInstallError(f"{what} failed: {cause}", _install_fix(proc.stderr, manifest),
                                  log_tail=lines[-20:])


def _install_fix(stderr: str, manifest: BundleManifest | None) -> str:
    """The fix for a failed offline install; specific when the package that failed is one the bundle carries
    unbuilt (its sdist), which offline needs its build requirements and a compiler on this host."""
    m = _BUILD_FAILED.search(stderr)
    unbuilt = manifest.source_only.get(f"{m.group(1)}=={m.group(2)}") if (m and manifest) else None
    if m is None or unbuilt is None or manifest is None:
        return ("nothing was installed; a package the lock needs is missing from the bundle (re-make it with "
                "envbuilder bundle) or the interpreter does not match the lock")
    return (f"nothing was installed; {m.group(1)} {m.group(2)} travels in this bundle as its sdist ({unbuilt}), and "
            "building it here offline needs its build requirements and a compiler: make the bundle on a host whose "
            f"glibc is at most the target's ({manifest.glibc or 'unknown'}), e.g. in a container of the target OS, "
            "so it carries the compiled wheel")


_SITE_PROBE = ("import json, site, sys; print(json.dumps({'venv': sys.prefix != sys.base_prefix, "
               "'site': site.getsitepackages(), 'py': '%d.%d' % sys.version_info[:2]}))")


def _see_host_venv(python: str, venv: Path) -> None:
    """--system-site-packages on an interpreter that is itself a venv (a conda env, a module's venv).

    A venv made from a venv's python sees only the base interpreter's packages, not the host venv's
    (where its torch is): a .pth file adds the host venv's site-packages after the new venv's own,
    which is the precedence --system-site-packages gives.
    """
    if not Path(python).exists():
        return  # a version request: uv picked a base interpreter, nothing to add
    proc = procs.run([python, "-c", _SITE_PROBE], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    if not info["venv"]:
        return
    site_dir = venv / "lib" / f"python{info['py']}" / "site-packages"
    write_atomic(site_dir / "_envbuilder_host.pth", "".join(f"{d}\n" for d in info["site"]))


def _wheelhouse_lines(wh: Path, stage2: list[str]) -> tuple[list[str], list[str]]:
    house = read_wheelhouse(wh)
    lines = [f"{whl.resolve()} --hash=sha256:{pkg.sha256}"
             for pkg, whl in zip(house.packages, house.verified_wheels(wh), strict=True)]
    return lines, sorted(set(stage2) - set(house.names))


def _runtime_hooks(venv: Path, record: LockRecord, sees_host_packages: bool) -> list[RuntimeHook]:
    """The startup hooks this venv needs (bundle/runtime_hooks.py), from the TE version the lock pins."""
    from envbuilder.matrix.load import load_matrix

    te = record.pins.get("transformer-engine")
    return write_runtime_hooks(venv, te.version if te else None, load_matrix().te_loads_pip_libraries_since,
                               sees_host_packages)


def run_install(opts: InstallOptions, progress: Progress = lambda _: None) -> InstallResult:
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    bundle = Path(opts.bundle).absolute()
    venv = guard_output_dir(Path(opts.venv), lambda d: (d / INSTALL_RECORD).is_file(),
                            "a venv envbuilder installed", "--venv")
    venv.parent.mkdir(parents=True, exist_ok=True)
    # held by this run; a killed run's unpacked bundle (and staging venv: staging_dir) goes at the next run
    with held_tempdir(venv.parent, f".{venv.name}.bundle.") as tmp:
        bound: dict[str, str | None] = {"manifest_sha256": None, "lock_sha256": None}
        if (bundle / PARTS_INDEX).is_file() or (bundle / PARTS_INDEX).is_symlink():
            index = read_index(bundle)
            progress(f"checking {len(index.parts)} parts")
            parts = verify_parts(bundle, index)
            progress("reassembling the bundle")
            tree = Path(tmp) / "bundle"
            extract_parts(parts, tree, index.tar_sha256)
            bound = {"manifest_sha256": index.manifest_sha256, "lock_sha256": index.lock_sha256}
        else:
            tree = bundle
        timings["reassemble"] = time.monotonic() - t0
        t = time.monotonic()
        progress("verifying every file's sha256")
        manifest, record = verify_tree(tree, **bound)
        timings["verify"] = time.monotonic() - t
        # the stage-2 packages built from sdists (by `envbuilder wheels`); those the bundle carries
        # as index wheels (transformer-engine-cuXX) install like everything else
        wheeled = {canonicalize_name(p.name) for p in manifest.packages if p.kind == "wheel"}
        stage2 = [n for n in manifest.stage2_packages if canonicalize_name(n) not in wheeled]
        python = opts.python or manifest.python
        env = {**uv_env(None), **OFFLINE_ENV}
        reqs = export_requirements(tree / "lock", ["compile"] if manifest.stage2_packages else [],
                                   no_emit=stage2 + [pb.package for pb in manifest.prebuilt])
        # a prebuilt wheel replaces its sdist: hash-pinned to the wheel the bundle recorded
        reqs += "".join(f"{(tree / 'files' / pb.wheel).resolve()} --hash=sha256:{pb.sha256}\n"
                        for pb in manifest.prebuilt)
        # a given --wheelhouse wins over the cache (which may come from $ENVBUILDER_WHEEL_CACHE)
        from_cache = opts.cache is not None and opts.wheelhouse is None and bool(stage2) and not opts.skip_stage2
        wh = None if from_cache else opts.wheelhouse or (
            tree / "wheelhouse" if (tree / "wheelhouse" / WHEELHOUSE_RECORD).is_file() else None)
        extra_lines: list[str] = []
        missing = list(stage2)
        if wh is not None and stage2 and not opts.skip_stage2:
            extra_lines, missing = _wheelhouse_lines(wh, stage2)
        stage2_wheels: list[dict[str, Any]] = []
        req_file = Path(tmp) / "requirements.txt"
        req_file.write_text(reqs + "".join(f"{ln}\n" for ln in extra_lines), encoding="utf-8")
        with staging_dir(venv) as staging:
            t = time.monotonic()
            cmd = [uv_binary(), "venv", "--relocatable", "--python", python, "--no-project", str(staging / "v")]
            if opts.system_site_packages:
                cmd.insert(2, "--system-site-packages")
            _run(cmd, tree, env, f"uv venv --python {python}")
            if opts.system_site_packages:
                _see_host_venv(python, staging / "v")
            host = manifest.host_torch
            if host:
                if not opts.system_site_packages:
                    raise InvalidOptionError("this bundle's lock keeps the interpreter's torch (--mode host-torch)",
                                             "pass --system-site-packages and --python with that interpreter")
                want = RecordedTorch.from_fields(Fields.of(host, "the bundle manifest's host_torch", BundleInvalidError,
                                                           "re-make the bundle with envbuilder bundle"))
                check_host_torch(want, probe_torch(staging / "v" / "bin" / "python"))
            progress(f"installing {sum(1 for ln in reqs.splitlines() if ln and not ln.startswith(' '))} "
                     f"packages offline from {tree / 'files'}")
            cmd = [uv_binary(), "pip", "install", "--offline", "--no-index", "--find-links", str(tree / "files"),
                   "--no-deps", "--require-hashes", "--python", str(staging / "v" / "bin" / "python"),
                   "-r", str(req_file)]
            _run(cmd, tree / "lock", env, "uv pip install (offline)", manifest)
            if from_cache and opts.cache is not None:
                t2 = time.monotonic()
                built = stage2_from_cache(opts.cache, tree / "lock", tree / "files", staging / "v" / "bin" / "python",
                                          Path(tmp) / "wheelhouse", stage2, progress)
                extra_lines, missing, stage2_wheels = requirement_lines(built), [], summary(built)
                timings["stage2"] = time.monotonic() - t2
                (Path(tmp) / "stage2.txt").write_text("".join(f"{ln}\n" for ln in extra_lines), encoding="utf-8")
                _run([*cmd[:-1], str(Path(tmp) / "stage2.txt")], tree / "lock", env, "uv pip install of stage 2")
            timings["install"] = time.monotonic() - t
            installed = sorted(set(stage2) - set(missing))
            hooks = _runtime_hooks(staging / "v", record, opts.system_site_packages)
            for hook in hooks:
                progress(f"runtime hook {hook.name}: {hook.reason}")
            write_atomic(staging / "v" / INSTALL_RECORD, json.dumps({  # the lock recomputed, not the manifest's word
                "lock_sha256": record.lock_sha256, "row": record.row, "python": python,
                "system_site_packages": opts.system_site_packages, "stage2_installed": installed,
                "stage2_missing": missing, "runtime_hooks": [h.to_dict() for h in hooks],
                "stage2_from": str(opts.cache.source.url) if from_cache and opts.cache else None},
                indent=2, sort_keys=True) + "\n")
            shutil.copytree(tree / "lock", staging / "v" / "envbuilder-lock")
            # the stage-2 sdists stay beside the venv, so `envbuilder wheels --sdists` can build them
            # against this interpreter's torch later (a split bundle is unpacked only for the install)
            for p in manifest.packages:  # p.file is a plain name (read_manifest)
                # sdists and git-tag sources (packed archives) alike
                if p.kind in ("sdist", "git") and canonicalize_name(p.name) in {canonicalize_name(n) for n in stage2}:
                    (staging / "v" / SDISTS_DIR).mkdir(exist_ok=True)
                    shutil.copy2(tree / "files" / p.file, staging / "v" / SDISTS_DIR / p.file)
            promote_dir(staging / "v", venv)
    if missing:
        progress(f"warning: stage-2 packages not installed (no wheel for them): {', '.join(missing)}; build them "
                 f"with `envbuilder wheels` and re-run install with --wheelhouse")
    n = sum(1 for ln in reqs.splitlines() if ln and not ln.startswith(" ")) + len(extra_lines)
    return InstallResult(venv, record.lock_sha256, n, sorted(set(stage2) - set(missing)), missing,
                         time.monotonic() - t0, timings, stage2_wheels)
