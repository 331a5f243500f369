"""Atomic file and directory replacement: a failed run never leaves a half-written output.

Output directories belong to the user too: `claim_output_dir` refuses a non-empty directory
envbuilder did not make, follows a symlinked -o to its target, creates new directories 0755,
holds an exclusive lock for the run and removes staging directories that dead runs left;
`commit_files` replaces only the files envbuilder owns and leaves everything else (a `.venv`,
notes) and the directory's mode alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from envbuilder import procs
from envbuilder.errors import (
    ForeignOutputDirError,
    OutputBusyError,
    OutputPathError,
    os_error,
)

DIR_MODE = 0o755
FILE_MODE = 0o644
STAGING_INFIX = ".staging."
COMMIT_NAME = ".envbuilder-commit.json"

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def write_atomic(path: Path, data: bytes | str, mode: int = FILE_MODE) -> None:
    """Write to a temp file in the same directory, fsync, then rename over `path`."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _naming(exc, path) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from exc
        raise


def _naming(exc: OSError, path: Path) -> OSError:
    """The same OSError, naming the file the caller was writing (not a temp name, or none at all)."""
    return type(exc)(exc.errno, exc.strerror or str(exc), str(path)) if exc.errno else exc


@contextlib.contextmanager
def staging_dir(target: Path) -> Iterator[Path]:
    """A temp directory beside `target` (same filesystem, so the final rename is atomic).

    Removed on exit unless it was promoted with `promote_dir`. Staging directories that dead runs
    (killed, even by SIGKILL) left beside `target` are removed first: every run holds a flock on its own.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}{STAGING_INFIX}", dir=target.parent))
    try:
        with hold(tmp):  # a live run's staging is never taken for a dead one's
            yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def held_tempdir(parent: Path, prefix: str) -> Iterator[Path]:
    """A private (0700) temp directory in `parent`, held (flock) while this run uses it and removed after;
    the ones dead runs left with the same prefix are removed first."""
    parent = Path(parent)
    remove_abandoned(parent, prefix)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        with hold(tmp):
            yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: prefix of the temp directories envbuilder runs make in $TMPDIR (each held by its run; see held_tempdir)
RUN_TMP_PREFIX = "envbuilder-run-"


def run_tempdir(kind: str) -> contextlib.AbstractContextManager[Path]:
    """held_tempdir in $TMPDIR named envbuilder-run-KIND-*: a killed run's is removed by the next run."""
    return held_tempdir(Path(tempfile.gettempdir()), f"{RUN_TMP_PREFIX}{kind}-")


@contextlib.contextmanager
def hold(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (a temp file or directory) while this run uses it.

    The kernel drops the lock when the process dies, even by SIGKILL, so `abandoned` can tell a
    dead run's leftovers from a live run's work in progress without pids or a lock server.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def abandoned(path: Path) -> bool:
    """True when no live process holds `path` (see `hold`)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_abandoned(parent: Path, prefix: str, suffix: str = "") -> list[Path]:
    """Remove entries of `parent` named prefix*suffix that no live run holds; returns what was removed."""
    removed: list[Path] = []
    try:
        names = sorted(n for n in os.listdir(parent) if n.startswith(prefix) and n.endswith(suffix))
    except OSError:
        return removed
    for name in names:
        p = Path(parent) / name
        if not abandoned(p):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()
        removed.append(p)
    return removed


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with renameat2(RENAME_EXCHANGE); False if unsupported."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return bool(rc == 0)


def promote_dir(staging: Path, target: Path) -> None:
    """Replace directory `target` by `staging` so readers see the old or the new, never a mix."""
    procs.check_stop()
    staging, target = Path(staging), Path(target)
    # mkdtemp makes staging 0700: the output gets the mode the old directory had, or 0755
    os.chmod(staging, stat.S_IMODE(target.stat().st_mode) if target.is_dir() else DIR_MODE)
    if not target.exists():
        os.rename(staging, target)
        return
    if _renameat2_exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # staging now holds the old contents
        return
    # Fallback (filesystems without RENAME_EXCHANGE): two renames; the old copy survives
    # under .old until the new one is in place.
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        shutil.rmtree(old)
    os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)


# --- output directories that belong to the user too ---------------------------------------


def resolve_output(path: Path, flag: str = "-o") -> Path:
    """The real directory `path` names: a symlinked -o is followed to its target (kept a link)."""
    path = Path(path)
    if str(path) == "":
        raise OutputPathError(f"{flag} is empty", f"pass a directory path to {flag}")
    try:
        real = Path(os.path.realpath(path))
    except OSError as exc:  # pragma: no cover - realpath only fails on loops in odd kernels
        raise OutputPathError(f"cannot resolve {path}: {exc.strerror}", f"pass a plain directory to {flag}") from exc
    if path.is_symlink() and not path.exists():
        raise OutputPathError(f"{path} is a dangling symlink (to {os.readlink(path)})",
                              f"create its target first or pass another {flag}")
    if real == Path(real.anchor) or real.parent == real:
        raise OutputPathError(f"{flag} {path} is the filesystem root", f"pass a directory below it to {flag}")
    return real


def guard_output_dir(path: Path, owned: Callable[[Path], bool], what: str, flag: str = "-o") -> Path:
    """Refuse an -o envbuilder may not write: a file, a non-empty directory that is not ours.

    `owned(dir)` says whether an existing directory is one this stage made (a lock directory
    has envbuilder.lock.json, a certificate directory certificate.json). Returns the resolved
    directory (symlinks followed). Creates nothing.
    """
    real = resolve_output(path, flag)
    if real.exists() and not real.is_dir():
        raise OutputPathError(f"{path} exists and is not a directory", f"pass a directory to {flag}")
    if real.is_dir():
        try:
            entries = [e for e in os.listdir(real) if not _is_ours_hidden(e)]
        except OSError as exc:
            raise os_error(exc, real, action="read", flag=flag) from exc
        if entries and not owned(real):
            shown = ", ".join(sorted(entries)[:3]) + (", ..." if len(entries) > 3 else "")
            raise ForeignOutputDirError(
                f"{path} is a non-empty directory that is not {what} (it holds {shown})",
                f"pass a new or empty directory to {flag}; envbuilder never replaces files it did not write")
    return real


def _is_ours_hidden(name: str) -> bool:
    return name == COMMIT_NAME


def _make_dir(path: Path, flag: str) -> bool:
    """mkdir -p with 0755 for each new level (not mkdtemp's 0700); True if `path` was created."""
    if path.is_dir():
        return False
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    try:
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(d, DIR_MODE)
                os.chmod(d, DIR_MODE)  # umask may have taken bits away
    except OSError as exc:
        raise os_error(exc, path, action="create", flag=flag) from exc
    return True


def staging_dirs(target: Path) -> list[Path]:
    """Staging directories beside `target` (any run's)."""
    parent, prefix = target.parent, f".{target.name}{STAGING_INFIX}"
    try:
        return sorted(parent / n for n in os.listdir(parent) if n.startswith(prefix))
    except OSError:
        return []


def remove_stale_staging(target: Path, keep: Path | None = None) -> list[Path]:
    """Remove staging directories that dead runs left beside `target`; finish committed ones.

    Called while holding the target's lock: every run takes it before it makes a staging
    directory, so any other staging directory belongs to a run that is gone (killed, even by
    SIGKILL). One that holds a complete commit journal is rolled forward first, so a run killed
    halfway through `commit_files` ends with the new files, not a mix.
    """
    removed = []
    for st in staging_dirs(target):
        if (keep is not None and st == keep) or not abandoned(st):
            continue
        if (st / COMMIT_NAME).is_file():
            with contextlib.suppress(OSError, ValueError):
                _roll_forward(st, target)
        shutil.rmtree(st, ignore_errors=True)
        removed.append(st)
    return removed


class OutputDirLock:
    """An exclusive flock on the output directory itself (its inode stays: files are swapped inside)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def acquire(self, wait: bool, progress: Callable[[str], None], flag: str) -> None:
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise os_error(exc, self.path, action="open", flag=flag) from exc
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if not wait:
            self.release()
            raise OutputBusyError(f"another envbuilder run is writing {self.path}",
                                  "wait for it to finish, or run without --no-wait to queue behind it")
        progress(f"waiting: another envbuilder run is writing {self.path} (Ctrl-C to stop waiting)")
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)  # closing drops the flock
            self.fd = -1


@contextlib.contextmanager
def claim_output_dir(path: Path, owned: Callable[[Path], bool], what: str, *, flag: str = "-o",
                     wait: bool = True, progress: Callable[[str], None] = lambda _: None,
                     create: bool = True) -> Iterator[Path]:
    """Guard, create (0755), lock and clean an output directory for one run; yields the real path.

    A directory this run created and left empty (the run failed) is removed again.
    """
    real = guard_output_dir(path, owned, what, flag)
    created = _make_dir(real, flag) if create else False
    if not real.is_dir():
        yield real
        return
    lock = OutputDirLock(real)
    lock.acquire(wait, progress, flag)
    try:
        guard_output_dir(real, owned, what, flag)  # the run we waited for may have changed it
        for st in remove_stale_staging(real):
            progress(f"removed {st.name}, left by an earlier run that was killed")
        yield real
    finally:
        lock.release()
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(real)  # only succeeds when still empty


def owned_names(target: Path, names: Iterable[str]) -> list[str]:
    return sorted({n for n in names if (target / n).is_file() or (target / n).is_symlink()})


def _roll_forward(staging: Path, target: Path) -> None:
    journal = json.loads((staging / COMMIT_NAME).read_text(encoding="utf-8"))
    for rel in journal["put"]:
        src, dst = staging / rel, target / rel
        if not src.exists():
            continue  # moved before a crash
        _make_dir(dst.parent, "-o")
        if not src.is_symlink():
            os.chmod(src, FILE_MODE)
        try:
            os.replace(src, dst)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            # target is a mount point of its own: copy beside dst first, then one rename
            fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
            os.close(fd)
            shutil.copy2(src, tmp)
            os.replace(tmp, dst)
            os.unlink(src)
    for rel in journal["remove"]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target / rel)
    _prune_empty_dirs(target, journal["remove"])


def _prune_empty_dirs(target: Path, rels: Iterable[str]) -> None:
    for rel in sorted(rels, key=lambda r: -r.count("/")):
        parent = (target / rel).parent
        while parent != target and target in parent.parents:
            try:
                os.rmdir(parent)
            except OSError:
                break
            parent = parent.parent


def commit_files(staging: Path, target: Path, put: Iterable[str], remove: Iterable[str] = ()) -> None:
    """Move the files `put` (relative names) from staging into target; delete `remove` there.

    Only these files change: everything else in target (a .venv, notes) and target's own mode
    and inode stay. Each move is one rename. A commit journal written first makes the set
    all-or-nothing across a crash: `remove_stale_staging` completes a journalled commit.
    """
    procs.check_stop()  # a signal arrived: nothing is committed after it (another thread may be here)
    put = sorted(set(put))
    gone = sorted(set(remove) - set(put))
    try:
        write_atomic(staging / COMMIT_NAME, json.dumps({"put": put, "remove": gone}, sort_keys=True))
        _roll_forward(staging, target)
        os.unlink(staging / COMMIT_NAME)
    except OSError as exc:
        raise os_error(exc, target, flag="-o") from exc


def link_or_copy(src: Path, dst: Path) -> None:
    """dst as a hard link to src (no copy of a GB wheel), or a copy across filesystems; parents made."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
