"""SIGTERM, SIGHUP and SIGKILL during a real `uv lock`: message, exit code, no process left, no staging left.

uv is made to hang on a local index that accepts connections and never answers, so the signal
always lands while the uv child runs. Children are found and checked through /proc.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultkit import OFFLINE_LOCK_ARGS, alive, children_of, offline_env, offline_index, processes_in, snapshot

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def silent_index() -> Iterator[str]:
    """An HTTP 'index' that accepts and never replies: uv waits on it until it is killed."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                held.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/simple"
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


@pytest.fixture()
def lockdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A real previous lock (offline index) in tmp_path/lk, with a user's .venv and notes in it."""
    env = {**os.environ, **offline_env(offline_index(tmp_path / "wheels"), tmp_path / "cache")}
    out = tmp_path / "lk"
    proc = subprocess.run([sys.executable, "-m", "envbuilder", *OFFLINE_LOCK_ARGS, "-o", str(out)], env=env,
                          capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    (out / ".venv" / "bin").mkdir(parents=True)
    (out / ".venv" / "bin" / "marker").write_text("hours of kernel builds\n")
    (out / "NOTES.md").write_text("mine\n")
    return out, env


def _start_hanging_lock(out: Path, env: dict[str, str], index: str) -> tuple[subprocess.Popen[str], int]:
    hang = {k: v for k, v in env.items() if k not in ("UV_NO_INDEX", "UV_FIND_LINKS", "UV_OFFLINE")}
    hang.update({"UV_DEFAULT_INDEX": index, "UV_CACHE_DIR": str(out.parent / "cold-cache"),
                 "UV_HTTP_TIMEOUT": "300", "UV_HTTP_RETRIES": "0"})
    proc = subprocess.Popen([sys.executable, "-m", "envbuilder", *OFFLINE_LOCK_ARGS, "--glibc", "2.36", "-o",
                             str(out)], env=hang, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)
    deadline = time.monotonic() + 90
    seen: set[int] = set()
    while time.monotonic() < deadline:
        # the uv that hangs: a child working in a staging directory, still there on a second look
        # (an offline first attempt exits at once)
        kids = [k for k in children_of(proc.pid)
                if any(k in processes_in(p) for p in out.parent.iterdir() if ".staging." in p.name)]
        stable = [k for k in kids if k in seen]
        if stable:
            return proc, stable[0]
        seen.update(kids)
        if proc.poll() is not None:
            pytest.fail(f"lock ended early: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.5)
    proc.kill()
    pytest.fail("uv lock never started")


def _nothing_left_in_staging(parent: Path) -> bool:
    """No process (orphan or not) still works in any staging directory beside the output."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not any(processes_in(p) for p in parent.iterdir() if ".staging." in p.name):
            return True
        time.sleep(0.05)
    return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(("sig", "code", "name"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGHUP, 129, "SIGHUP"),
                                                   (signal.SIGINT, 130, "SIGINT")])
def test_terminating_signal_cleans_up(sig: int, code: int, name: str, lockdir: tuple[Path, dict[str, str]],
                                      silent_index: str) -> None:
    out, env = lockdir
    before = snapshot(out)
    proc, uv_pid = _start_hanging_lock(out, env, silent_index)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert f"interrupted ({name})" in err and "Traceback" not in err
    assert _gone_within(uv_pid, 5), "the uv child outlived envbuilder"
    assert children_of(proc.pid) == []
    assert [p.name for p in out.parent.iterdir() if ".staging." in p.name] == []
    assert snapshot(out) == before


def test_sigkill_leaves_no_orphan_and_the_next_run_cleans_staging(lockdir: tuple[Path, dict[str, str]],
                                                                  silent_index: str) -> None:
    out, env = lockdir
    before = snapshot(out)
    proc, uv_pid = _start_hanging_lock(out, env, silent_index)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert _gone_within(uv_pid, 5), "PR_SET_PDEATHSIG did not take the uv child down with envbuilder"
    assert _nothing_left_in_staging(out.parent), "an orphan still works in the abandoned staging directory"
    stale = [p for p in out.parent.iterdir() if ".staging." in p.name]
    assert stale, "SIGKILL cannot run cleanup: the staging directory is still there"
    assert snapshot(out) == before  # killed before the swap: the previous lock is untouched
    again = subprocess.run([sys.executable, "-m", "envbuilder", *OFFLINE_LOCK_ARGS, "-o", str(out)], env=env,
                           capture_output=True, text=True, cwd=REPO, check=False)
    assert again.returncode == 0, again.stderr
    assert "left by an earlier run that was killed" in again.stderr
    assert [p for p in out.parent.iterdir() if ".staging." in p.name] == []
    assert (out / ".venv" / "bin" / "marker").read_text() == "hours of kernel builds\n"


def test_second_run_waits_for_the_first(lockdir: tuple[Path, dict[str, str]], silent_index: str) -> None:
    out, env = lockdir
    first, _ = _start_hanging_lock(out, env, silent_index)
    try:
        second = subprocess.Popen([sys.executable, "-m", "envbuilder", *OFFLINE_LOCK_ARGS, "-o", str(out)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        time.sleep(3)
        assert second.poll() is None, "the second run did not wait"
        busy = subprocess.run([sys.executable, "-m", "envbuilder", *OFFLINE_LOCK_ARGS, "--no-wait", "-o", str(out)],
                              env=env, capture_output=True, text=True, cwd=REPO, check=False)
        assert busy.returncode == 71 and "another envbuilder run is writing" in busy.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=30)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert "waiting: another envbuilder run is writing" in err


def test_sigterm_kills_the_childs_whole_process_group(tmp_path: Path) -> None:
    """procs.run: SIGTERM to envbuilder takes down the child and what the child started (its group)."""
    pids = tmp_path / "pids"
    script = ("import sys\nfrom envbuilder import procs\nprocs.install_signal_handlers()\n"
              f"procs.run(['sh', '-c', 'sleep 300 & echo $! > {pids}; echo $$ >> {pids}; wait'])\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 2):
        time.sleep(0.05)
    grandchild, child = (int(x) for x in pids.read_text().split())
    assert alive(grandchild) and alive(child)
    os.kill(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=30)
    assert _gone_within(child, 5) and _gone_within(grandchild, 5)
