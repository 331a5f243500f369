"""Fast paths for `uv lock`: reuse the existing lock, and resolve from the uv cache first.

Seeding: the staging directory starts with the current `uv.lock`, so uv treats its versions as
preferences. With unchanged inputs uv only validates the lock (milliseconds, no index traffic);
with a changed pin it re-resolves what that pin touches and keeps everything else.

Offline first: a row pins `exclude-newer`, so index data fetched *after* that cutoff already
lists every file the resolution may use: such data cannot go stale for this lock. We run
`uv lock --offline` first and accept its result only when every index page it consulted was
fetched after the cutoff; a cache miss, or a page older than the cutoff (it may lack releases
published before the cutoff), falls back to a normal online `uv lock`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envbuilder import procs
from envbuilder.errors import EnvbuilderError, MalformedFileError
from envbuilder.lock.uvlock import read_uv_lock
from envbuilder.lock.uvrun import run_uv_lock, uv_binary, uv_env

# uv -v names every package the resolver asks the index about with this line
_SEARCHING = re.compile(r"Searching for a compatible version of ([A-Za-z0-9._-]+)")


@dataclass(frozen=True)
class UvLockRun:
    log: str  # uv's stderr
    resolved_offline: bool
    fallback_reason: str  # why the offline attempt was not used ("" when it was)


def seed_from(previous: Path, staging: Path) -> bool:
    """Copy previous/uv.lock into staging (uv reads it as preferences); True when there was a readable one."""
    src = Path(previous) / "uv.lock"
    if not src.is_file():
        return False
    try:
        read_uv_lock(src)  # an unreadable lock is no preference: lock from scratch instead
    except MalformedFileError:
        return False
    shutil.copyfile(src, Path(staging) / "uv.lock")
    return True


def reusable_constraints(lockdir: Path, render: Callable[[list[str]], str], python: str | None, glibc: str
                         ) -> list[dict[str, str]]:
    """The platform constraints the existing lock added, when it was made from the same inputs.

    A re-lock would otherwise render round 1 without them, make uv re-resolve, find the same
    platform problems and add the same constraints again (two uv runs instead of one validation).
    Taken only when the pyproject rendered with them is byte-identical to the existing one and the
    inputs the platform check uses (target Python, glibc) are unchanged, so the outcome equals a
    from-scratch lock's.
    """
    from envbuilder.lock.record import LockRecord

    try:
        record = LockRecord.from_lockdir(lockdir, verify=False)
        previous = [dict(c) for c in record.constraints_added]
        old = (Path(lockdir) / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, ValueError, EnvbuilderError):
        return []
    if not previous or record.inputs.python != python or record.inputs.glibc != glibc:
        return []
    return previous if render([c["constraint"] for c in previous]) == old else []


def uv_cache_dir(ca_bundle: Path | None = None) -> Path | None:
    """uv's cache directory as uv itself resolves it (UV_CACHE_DIR, XDG, --no-cache...)."""
    try:
        proc = procs.run([uv_binary(), "cache", "dir"], capture_output=True, text=True,
                         env=uv_env(ca_bundle), cwd="/", check=False)
    except OSError:
        return None
    path = proc.stdout.strip()
    return Path(path) if proc.returncode == 0 and path else None


def _index_pages(cache: Path) -> dict[str, list[Path]]:
    """normalized package name -> its cached simple-index pages (one per index) in uv's current layout."""
    buckets = sorted(cache.glob("simple-v*"), key=lambda p: int(p.name[8:]) if p.name[8:].isdigit() else -1)
    pages: dict[str, list[Path]] = {}
    if not buckets:
        return pages
    for index_dir in buckets[-1].iterdir():
        if not index_dir.is_dir():
            continue
        for page in index_dir.glob("*.rkyv"):
            pages.setdefault(page.stem, []).append(page)
    return pages


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def stale_pages(log: str, lock_path: Path, cache: Path | None, cutoff: int) -> list[str]:
    """Packages whose index data the offline resolution used but which was fetched before `cutoff`.

    Consulted = every package uv searched (its -v log), except those the lock takes from a
    non-registry source (git, path, URL: no index page). A consulted registry package without any
    cached page is also reported (uv cannot have resolved it offline from an index we can vouch for).
    """
    consulted = {_normalize(m) for m in _SEARCHING.findall(log)}
    if not consulted:  # uv validated the seeded lock without asking any index
        return []
    if cache is None:
        return ["uv has no cache directory"]
    locked = {p.name: p for p in read_uv_lock(lock_path)}
    pages = _index_pages(cache)
    stale = []
    for name in sorted(consulted):
        pkg = locked.get(name)
        if pkg is not None and not pkg.from_registry:
            continue
        found = pages.get(name, [])
        if not found:
            if pkg is not None:
                stale.append(f"{name} (no index page in the cache)")
            continue
        if any(int(p.stat().st_mtime) <= cutoff for p in found):
            stale.append(f"{name} (index page fetched before the cutoff)")
    return stale


def lock_offline_first(staging: Path, cutoff: int, ca_bundle: Path | None = None,
                       extra: list[str] | None = None, offline_first: bool = True) -> UvLockRun:
    """`uv lock` in staging: from the cache when it is complete for `cutoff`, else online.

    cutoff: the row's exclude-newer as a Unix time; 0 (no cutoff) always goes online, because
    without a cutoff no cached page is known to be complete.
    """
    extra = list(extra or [])
    reason = "offline-first disabled"
    if offline_first and cutoff > 0:
        before = (staging / "uv.lock").read_bytes() if (staging / "uv.lock").is_file() else None
        try:
            verbose = [] if "-v" in extra else ["-v"]  # -v names the packages consulted
            log = run_uv_lock(staging, ca_bundle, ["--offline", *verbose, *extra])
        except EnvbuilderError as exc:
            log, reason = "", f"offline resolution failed: {exc.cause}"
            saved = exc.details.get("log_file")
            if saved:  # the online run that follows is the one whose failure the user sees
                Path(saved).unlink(missing_ok=True)
        if log:
            consulted = bool(_SEARCHING.search(log))
            stale = stale_pages(log, staging / "uv.lock", uv_cache_dir(ca_bundle) if consulted else None, cutoff)
            if not stale:
                return UvLockRun(_strip_debug(log, extra), True, "")
            reason = f"stale cache: {', '.join(stale[:3])}" + (" ..." if len(stale) > 3 else "")
        # undo whatever the offline attempt wrote, so the online run starts from the same seed
        if before is None:
            (staging / "uv.lock").unlink(missing_ok=True)
        else:
            (staging / "uv.lock").write_bytes(before)
    elif cutoff <= 0:
        reason = "the row has no exclude-newer cutoff"
    return UvLockRun(run_uv_lock(staging, ca_bundle, extra or None), False, reason)


def _strip_debug(log: str, extra: list[str]) -> str:
    """Keep uv's -v chatter only when the caller asked for it."""
    if "-v" in extra:
        return log
    return "\n".join(ln for ln in log.splitlines() if not ln.lstrip().startswith(("DEBUG", "TRACE"))) + os.linesep
