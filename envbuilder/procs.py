"""Child processes and signals: every stage starts uv, docker, mksquashfs... through here.

Why: a terminated envbuilder (Ctrl-C, `timeout`, CI cancellation, Slurm's SIGTERM, a closed
terminal's SIGHUP, even SIGKILL) must not leave a child writing into a staging directory.
- SIGTERM and SIGHUP raise `Terminated`, a KeyboardInterrupt, so the same `finally` blocks that
  clean up after Ctrl-C run; the CLI prints one line and exits 128 + the signal number.
- Each child runs in its own session (so its process group is its own: killing the group also
  kills what uv or mksquashfs started) and is killed with the group when the parent unwinds.
- On Linux each child also gets PR_SET_PDEATHSIG(SIGKILL): if envbuilder itself is SIGKILLed,
  the kernel kills the direct child at once instead of leaving it as an orphan.
- Every live child is registered: on a signal, `stop_all` kills every running child at once (the
  rows `lock --all` runs on worker threads, not only the main thread's), and once it ran no new child
  starts and `check_stop` refuses to commit anything (atomic.commit_files calls it).
- A process envbuilder starts but does not control (torch.distributed.run's workers, which it puts in
  sessions of their own) calls `die_with_parent()` itself; `kill_tree` kills a process and every
  descendant found through /proc, whatever their sessions.

Standard library only: certify's in-environment modules use it too.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

_PR_SET_PDEATHSIG = 1
_HANDLED = (signal.SIGTERM, signal.SIGHUP)
KILL_GRACE_S = 3.0


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; unwinds like Ctrl-C (KeyboardInterrupt) so cleanup runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def interrupt_exit_code(exc: BaseException) -> int:
    """128 + signal number, the shell's convention (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)."""
    return exc.exit_code if isinstance(exc, Terminated) else 128 + signal.SIGINT


def interrupt_name(exc: BaseException) -> str:
    return exc.signal_name if isinstance(exc, Terminated) else "SIGINT"


#: set once a terminating signal arrived: no child starts and nothing is committed after it
STOPPING = threading.Event()
_STOP_SIGNUM = [int(signal.SIGINT)]
_LIVE: set[subprocess.Popen[Any]] = set()
_LIVE_LOCK = threading.Lock()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # a second SIGTERM during cleanup must not cut the cleanup short: ignore the rest
    for sig in _HANDLED:
        signal.signal(sig, signal.SIG_IGN)
    _STOP_SIGNUM[0] = signum
    STOPPING.set()
    raise Terminated(signum)


def reset_stop() -> None:
    """A new run in this process (the CLI's entry point): no signal has arrived for it yet."""
    STOPPING.clear()


def check_stop() -> None:
    """Raise Terminated when a signal asked this run to stop (called before anything is committed)."""
    if STOPPING.is_set():
        raise Terminated(_STOP_SIGNUM[0])


def stop_all(grace: float = KILL_GRACE_S) -> None:
    """A signal arrived: no new child may start; every running one (any thread's) is killed with its group."""
    with _LIVE_LOCK:  # with popen's: a child is either refused or in _LIVE by now, never started unseen
        STOPPING.set()
        live = [p for p in _LIVE if p.poll() is None]  # a finished child's group id may belong to another now
        _LIVE.difference_update([p for p in _LIVE if p.poll() is not None])
    kill_groups(live, grace)


def install_signal_handlers() -> None:
    """Make SIGTERM and SIGHUP behave like SIGINT (main thread only; a no-op elsewhere)."""
    with contextlib.suppress(ValueError):  # not the main thread (embedded use)
        for sig in _HANDLED:
            signal.signal(sig, _on_signal)


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


_LIBC = _libc() if sys.platform.startswith("linux") else None


def _child_setup(parent_pid: int) -> Any:
    """Runs in the child between fork and exec: die with the parent, even if it is SIGKILLed."""
    libc = _LIBC

    def setup() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(128 + signal.SIGKILL)

    return setup


def die_with_parent() -> None:
    """This process gets SIGKILL when its parent dies (for processes started by code that is not ours)."""
    if _LIBC is not None:
        parent = os.getppid()
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(128 + signal.SIGKILL)


def popen(cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """subprocess.Popen in a new session (own process group) that dies with this process."""
    kwargs.setdefault("start_new_session", True)
    with _LIVE_LOCK:  # the stop check and the registration are one step with stop_all's (see there)
        check_stop()
        proc = subprocess.Popen(list(cmd), preexec_fn=_child_setup(os.getpid()), **kwargs)
        _LIVE.difference_update([p for p in _LIVE if p.returncode is not None])  # reaped ones
        _LIVE.add(proc)
    return proc


def _forget(proc: subprocess.Popen[Any]) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(proc)


def kill_group(proc: subprocess.Popen[Any], grace: float = KILL_GRACE_S) -> None:
    """SIGTERM the child's whole process group, then SIGKILL whatever is left after `grace` s."""
    kill_groups([proc], grace)


def kill_groups(procs: list[subprocess.Popen[Any]], grace: float = KILL_GRACE_S) -> None:
    """kill_group for several children at once: one grace period for all of them."""
    for proc in procs:
        if proc.poll() is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # grandchildren the child left behind
    running = [p for p in procs if p.poll() is None]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if not running:
            return
        for proc in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(p.poll() is None for p in running):
            time.sleep(0.05)
        for proc in [p for p in running if p.poll() is not None]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        running = [p for p in running if p.poll() is None]


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, their children...), from /proc; [] where there is none."""
    parents: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != b"Z":
            parents.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL `pid`, its process group and every descendant, whatever session each put itself in."""
    for p in [*descendants(pid), pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def managed(cmd: Sequence[str], **kwargs: Any) -> Iterator[subprocess.Popen[Any]]:
    """A child that is killed (with its group) if the block exits by an exception or signal."""
    proc = popen(cmd, **kwargs)
    try:
        yield proc
    except BaseException:
        kill_group(proc)
        raise
    finally:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if proc.poll() is None:
            proc.wait()
        _forget(proc)


def run(cmd: Sequence[str], *, input: Any = None, timeout: float | None = None, check: bool = False,
        capture_output: bool = False, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """Like subprocess.run, but the child is in its own group and is killed with envbuilder."""
    if capture_output:
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
    if input is not None:
        kwargs.setdefault("stdin", subprocess.PIPE)
    with managed(cmd, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise
    done: subprocess.CompletedProcess[Any] = subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done
