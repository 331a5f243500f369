"""Child processes and signals: every stage starts uv, docker, mksquashfs... through here.

Why: a terminated envbuilder (Ctrl-C, `timeout`, CI cancellation, Slurm's SIGTERM, a closed
terminal's SIGHUP, even SIGKILL) must not leave a child writing into a staging directory.
- SIGTERM and SIGHUP raise `Terminated`, a KeyboardInterrupt, so the same `finally` blocks that
  clean up after Ctrl-C run; the CLI prints one line and exits 128 + the signal number.
- Each child runs in its own session (so its process group is its own: killing the group also
  kills what uv or mksquashfs started) and is killed with the group when the parent unwinds.
- On Linux each child also gets PR_SET_PDEATHSIG(SIGKILL): if envbuilder itself is SIGKILLed,
  the kernel kills the direct child at once instead of leaving it as an orphan.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
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


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # a second SIGTERM during cleanup must not cut the cleanup short: ignore the rest
    for sig in _HANDLED:
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


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


def popen(cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """subprocess.Popen in a new session (own process group) that dies with this process."""
    kwargs.setdefault("start_new_session", True)
    return subprocess.Popen(list(cmd), preexec_fn=_child_setup(os.getpid()), **kwargs)


def kill_group(proc: subprocess.Popen[Any], grace: float = KILL_GRACE_S) -> None:
    """SIGTERM the child's whole process group, then SIGKILL whatever is left after `grace` s."""
    if proc.poll() is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # grandchildren the child left behind
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            return


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
