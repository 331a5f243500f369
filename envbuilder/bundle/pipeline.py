"""`envbuilder bundle LOCKDIR -o BUNDLE`: an offline install kit for hosts without a package index.

Layout (unsplit):
    envbuilder-bundle.json   manifest: the lock, the target, every file with its sha256 and size
    SHA256SUMS               the same hashes, for `sha256sum -c`
    lock/                    pyproject.toml, uv.lock, envbuilder.lock.json, wheels/ (lock-dir wheels)
    files/                   every index wheel / sdist the target installs, checked against uv.lock
    wheelhouse/              (with --wheelhouse) the stage-2 wheels and their wheelhouse.json
With --split SIZE the same tree is one deterministic tar cut into bundle.tar.NNN parts plus
envbuilder-bundle.parts.json. Written in a staging directory and swapped in at the end.
"""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuilder.archlist import ArchList
from envbuilder.atomic import guard_output_dir, link_or_copy, promote_dir, staging_dir, write_atomic
from envbuilder.bundle.manifest import MANIFEST, SCHEMA, SUMS, sums_text
from envbuilder.bundle.parts import PARTS_INDEX, write_parts
from envbuilder.bundle.plan import LOCK_FILES, PlannedFile, plan_files
from envbuilder.bundle.prebuild import Prebuilt, prebuild
from envbuilder.kernels import WHEELHOUSE_RECORD, gitsource, read_wheelhouse
from envbuilder.kernels.files import cache_root, fetch, verify
from envbuilder.kernels.wheelcache.shared import CacheSource
from envbuilder.lock.lockdir import open_lockdir
from envbuilder.lock.record import sha256_file
from envbuilder.progress import Progress


@dataclass
class BundleOptions:
    lockdir: Path
    output: Path
    split: int | None = None
    wheelhouse: Path | None = None
    cache_dir: Path | None = None
    ca_bundle: Path | None = None
    jobs: int = 4
    wheel_cache: CacheSource | None = None  # --cache: the wheelhouse from a shared wheel cache (misses built here)
    arch_list: ArchList | None = None            # with --cache: the archs the stage-2 wheels are for
    git_mirrors: list[str] = field(default_factory=list)  # --git-mirror: clones for the lock's git_sources


@dataclass
class BundleResult:
    output: Path
    lock_sha256: str
    files: int
    size: int
    downloaded: int
    parts: list[dict[str, Any]] | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"output": str(self.output), "lock_sha256": self.lock_sha256, "files": self.files, "bytes": self.size,
                "downloaded": self.downloaded, "parts": self.parts, "seconds": round(self.seconds, 3)}


def _is_bundle(d: Path) -> bool:
    return (d / MANIFEST).is_file() or (d / PARTS_INDEX).is_file()


def _fetch_all(planned: list[PlannedFile], cache: Path, opts: BundleOptions, progress: Progress
               ) -> tuple[dict[str, Path], int]:
    done: dict[str, Path] = {}
    downloaded = 0

    def one(p: PlannedFile) -> tuple[PlannedFile, Path, bool]:
        path, new = fetch(p.file, cache, opts.ca_bundle)
        return p, path, new

    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        for i, (p, path, new) in enumerate(pool.map(one, planned), 1):
            done[p.file.filename] = path
            downloaded += int(new)
            if new or i == len(planned):
                progress(f"  [{i}/{len(planned)}] {'downloaded' if new else 'cached'} {p.file.filename}")
    return done, downloaded


def _prebuild_all(planned: list[PlannedFile], fetched: dict[str, Path], stage2: list[str], python: str, glibc: str,
                  cache: Path, opts: BundleOptions, progress: Progress) -> tuple[list[Prebuilt], dict[str, str]]:
    """Pure wheels for the stage-1 sdists (cached by sdist sha256 and Python); the others and why."""
    wheeled = {p.package for p in planned if p.kind == "wheel"}
    skip = {canonicalize_name(n) for n in stage2}
    out: list[Prebuilt] = []
    source_only: dict[str, str] = {}
    for p in planned:
        if p.kind != "sdist" or p.package in wheeled or canonicalize_name(p.package) in skip:
            continue
        d = cache / "prebuilt" / f"{p.file.sha256}-py{python}-glibc{glibc}"
        hit = sorted(d.glob("*.whl")) if d.is_dir() else []
        if hit:
            out.append(Prebuilt(p.package, p.version, p.file.filename, p.file.sha256, hit[0], sha256_file(hit[0])))
            continue
        got = prebuild(p.package, p.version, fetched[p.file.filename], p.file.sha256, python, d, opts.ca_bundle,
                       progress, glibc)
        if isinstance(got, Prebuilt):
            out.append(got)
        else:
            source_only[f"{p.package}=={p.version}"] = got
            progress(f"  warning: {p.package} {p.version} travels as an sdist ({got}); offline it is built "
                     "from source, which needs its build backend on the target")
    return out, source_only


def _wheelhouse_from_cache(opts: BundleOptions, progress: Progress) -> Path:
    """The lock's stage-2 wheels from the shared cache (verified), a miss built here, as a wheelhouse to carry."""
    from envbuilder.kernels.pipeline import wheelhouse_from_cache
    from envbuilder.matrix import load_matrix

    assert opts.wheel_cache is not None
    made = wheelhouse_from_cache(Path(opts.lockdir), opts.wheel_cache, load_matrix(), progress,
                                 arch_list=opts.arch_list, cache_dir=opts.cache_dir, ca_bundle=opts.ca_bundle,
                                 git_mirrors=opts.git_mirrors)
    progress(f"stage 2 from {opts.wheel_cache.url}: "
             + (", ".join(f"{p.name} ({p.cache})" for p in made.packages) or "nothing to build"))
    return made.output


def make_bundle(opts: BundleOptions, progress: Progress = lambda _: None) -> BundleResult:
    t0 = time.monotonic()
    lockdir = Path(opts.lockdir)
    record = open_lockdir(lockdir).record
    out = guard_output_dir(Path(opts.output), _is_bundle, "an envbuilder bundle")
    python, glibc = str(record.target.python), str(record.target.glibc or "2.35")
    stage2 = list(record.stage2_packages)
    if opts.wheel_cache is not None and opts.wheelhouse is None:  # a given --wheelhouse wins over the cache
        opts = replace(opts, wheelhouse=_wheelhouse_from_cache(opts, progress))
    wh_record = None
    if opts.wheelhouse is not None:
        wh_record = read_wheelhouse(opts.wheelhouse)
        wh_record.require_lock(record.lock_sha256, opts.wheelhouse,
                               f"rebuild it: envbuilder wheels {lockdir} -o {opts.wheelhouse}")
    progress(f"planning the files lock {record.lock_sha256[:12]} installs on Python {python}, glibc {glibc}")
    planned = plan_files(lockdir, python, glibc, stage2)
    cache = cache_root(opts.cache_dir)
    # a pin built from its git tag travels as the tag's files (packed, tree recomputed), not as the
    # kernel-less PyPI sdist that uv.lock names
    mirrors = gitsource.parse_mirrors(opts.git_mirrors)
    git = {name: gitsource.obtain(name, record.pins[name].version, src, cache, mirrors, (), opts.ca_bundle, progress)
           for name, src in sorted(record.git_sources.items())}
    planned = [p for p in planned if not (p.kind == "sdist" and p.package in git)]
    fetched, downloaded = _fetch_all(planned, cache, opts, progress)
    prebuilt, source_only = _prebuild_all(planned, fetched, stage2, python, glibc, cache, opts, progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    with staging_dir(out) as staging:
        tree = staging / "tree" if opts.split else staging
        tree.mkdir(parents=True, exist_ok=True)
        for name in LOCK_FILES:
            link_or_copy(lockdir / name, tree / "lock" / name)
        for rel in sorted(record.local_wheels.values()):
            link_or_copy(lockdir / rel, tree / "lock" / rel)
        entries: dict[str, dict[str, Any]] = {}
        for p in planned:
            src = fetched[p.file.filename]
            verify(src, p.file.sha256, p.file.filename)  # the cache is trusted only after this
            link_or_copy(src, tree / "files" / p.file.filename)
        for pb in prebuilt:
            link_or_copy(pb.wheel, tree / "files" / pb.wheel.name)
        for got in git.values():
            link_or_copy(got.path, tree / "files" / got.path.name)
        if opts.wheelhouse is not None and wh_record is not None:
            for whl in wh_record.verified_wheels(opts.wheelhouse):
                link_or_copy(whl, tree / "wheelhouse" / whl.name)
            link_or_copy(Path(opts.wheelhouse) / WHEELHOUSE_RECORD, tree / "wheelhouse" / WHEELHOUSE_RECORD)
        for f in sorted(p for p in tree.rglob("*") if p.is_file()):
            rel = f.relative_to(tree).as_posix()
            entries[rel] = {"sha256": sha256_file(f), "size": f.stat().st_size}
        manifest = {
            "schema": SCHEMA, "lock_sha256": record.lock_sha256, "row": record.row,
            "mode": record.mode, "python": python, "glibc": glibc, "stage2_packages": stage2,
            "host_torch": record.host.torch.to_dict() if record.host.torch else None,
            "wheelhouse": ({"arch_list": wh_record.arch_list, "torch": wh_record.torch.to_dict(),
                            "wheels": [p.wheel for p in wh_record.packages]} if wh_record else None),
            "packages": sorted([{"name": p.package, "version": p.version, "kind": p.kind, "file": p.file.filename}
                                for p in planned]
                               + [{"name": g.package, "version": g.version, "kind": "git", "file": g.path.name,
                                   "git": record.git_sources[g.package].to_dict()} for g in git.values()],
                               key=lambda e: (str(e["name"]), str(e["kind"]), str(e["file"]))),
            # stage-1 sdists built into pure wheels here (offline they would need their build backends)
            "prebuilt": [pb.to_dict() for pb in prebuilt],
            "source_only": source_only,
            "files": entries,
        }
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        write_atomic(tree / MANIFEST, text)
        write_atomic(tree / SUMS, sums_text(text.encode(), entries))
        size = sum(e["size"] for e in entries.values())
        parts = None
        if opts.split:
            progress(f"cutting {size / 1e6:.1f} MB into parts of {opts.split / 2**20:.0f} MiB")
            index = write_parts(tree, staging, opts.split,
                                {"lock_sha256": record.lock_sha256, "manifest_sha256": sha256_file(tree / MANIFEST)},
                                mtime=record.source_date_epoch)
            shutil.rmtree(tree)
            parts = index["parts"]
        promote_dir(staging, out)
    return BundleResult(out, record.lock_sha256, len(entries), size, downloaded, parts, time.monotonic() - t0)
