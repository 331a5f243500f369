"""SIGTERM, SIGHUP and SIGKILL during a real `uv lock`: message, exit code, no process left, no staging left.

uv is made to hang on a local index that accepts connections and never answers, so the signal
always lands while the uv child runs. Children are found and checked through /proc.
"""

from __future__ import annotations

import contextlib
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
from faultkit import (
    OFFLINE_LOCK_ARGS,
    alive,
    children_of,
    descendants_of,
    offline_env,
    offline_index,
    processes_in,
    snapshot,
)

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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_lock_all_kills_its_running_rows_and_commits_nothing_after_the_signal(tmp_path: Path, silent_index: str,
                                                                            sig: int) -> None:
    """`lock --all` with two rows at a time, each uv hanging on an index that never answers: the signal kills
    every running row's uv at once (the rows are not left to finish), and nothing is written after it."""
    out = tmp_path / "locks"
    out.mkdir()
    (out / "README.md").write_text("the user's file\n")
    before = snapshot(out)
    env = {**os.environ, "UV_DEFAULT_INDEX": silent_index, "UV_CACHE_DIR": str(tmp_path / "cold-cache"),
           "UV_HTTP_TIMEOUT": "300", "UV_HTTP_RETRIES": "0"}
    for var in ("UV_NO_INDEX", "UV_FIND_LINKS", "UV_OFFLINE"):
        env.pop(var, None)
    proc = subprocess.Popen([sys.executable, "-m", "envbuilder", "lock", "--all", "-o", str(out), "--parallel", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.monotonic() + 120
    uvs: set[int] = set()
    while time.monotonic() < deadline and len(uvs) < 2:
        uvs = {k for k in children_of(proc.pid)
               if any(k in processes_in(p) for p in out.iterdir() if ".staging." in p.name)}
        time.sleep(0.3)
    assert len(uvs) == 2, "two rows' uv lock never ran at once"
    tree = descendants_of(proc.pid)
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    try:
        _, err = proc.communicate(timeout=60)
    finally:  # whatever happened, leave no lock --all (or uv) running on this machine
        for pid in [proc.pid, *tree]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert time.monotonic() - t0 < 20, "lock --all waited for its running rows instead of killing them"
    assert proc.returncode == 128 + sig and "interrupted" in err and "Traceback" not in err
    assert all(_gone_within(pid, 5) for pid in tree | uvs), "a row's uv (or its children) outlived lock --all"
    assert [p.name for p in out.iterdir() if ".staging." in p.name] == []
    assert snapshot(out) == before, "lock --all wrote or left something after the signal"


def _kill_all(pids: set[int]) -> None:
    """Leave nothing running on this machine, whatever the test found."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _hanging_uv(tmp_path: Path, hang_on: str) -> tuple[Path, Path]:
    """A `uv` that is the real one, except that `uv HANG_ON ...` records its pid and sleeps (a slow install)."""
    from envbuilder.uvbin import uv_binary

    pidfile = tmp_path / f"uv-{hang_on}.pid"
    fake = tmp_path / "uv-hangs"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = "{hang_on}" ]; then echo $$ > "{pidfile}"; exec sleep 300; fi\n'
                    f'exec "{uv_binary()}" "$@"\n')
    fake.chmod(0o755)
    return fake, pidfile


def _cli_with_uv(fake: Path, module: str, args: list[str], env: dict[str, str] | None = None
                 ) -> subprocess.Popen[str]:
    """envbuilder ARGS in a child process whose `module` calls the fake uv."""
    code = (f"import sys, {module} as m; m.uv_binary = lambda: {str(fake)!r}; "
            "from envbuilder.cli import main; main(sys.argv[1:])")
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, env={**os.environ, **(env or {})})


def _wait_for(pidfile: Path, proc: subprocess.Popen[str], seconds: float = 120) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pidfile.exists() and pidfile.read_text().strip():
            return int(pidfile.read_text())
        if proc.poll() is not None:
            pytest.fail(f"envbuilder ended before uv ran: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.1)
    proc.kill()
    pytest.fail("the slow uv never started")


def test_install_killed_leaves_no_uv_and_the_next_install_cleans_up(tmp_path: Path,
                                                                     bundle_master: dict[str, Path]) -> None:
    """kill -9 of `install` during `uv pip install`: uv dies with it (PR_SET_PDEATHSIG), and the next install
    removes the dead run's unpacked bundle and staging venv (they are ~1 GB on a real bundle)."""
    fake, pidfile = _hanging_uv(tmp_path, "pip")
    venv = tmp_path / "venv"
    proc = _cli_with_uv(fake, "envbuilder.bundle.install", ["install", str(bundle_master["split"]), "--venv",
                                                            str(venv)])
    uv_pid = _wait_for(pidfile, proc)
    tree = descendants_of(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    try:
        assert all(_gone_within(pid, 5) for pid in tree | {uv_pid}), "uv pip install outlived a killed install"
    finally:
        _kill_all(tree | {uv_pid})
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".venv."))
    assert left, "SIGKILL runs no cleanup: the dead run's directories are still there"
    again = subprocess.run([sys.executable, "-m", "envbuilder", "install", str(bundle_master["split"]), "--venv",
                            str(venv)], capture_output=True, text=True, cwd=REPO, check=False, timeout=600)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".venv.")) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_wheels_signal_leaves_no_uv_sync(tmp_path: Path, bundle_master: dict[str, Path], sig: int) -> None:
    """`wheels` preparing its build venv (`uv sync`): SIGTERM and SIGKILL both take uv down with envbuilder."""
    fake, pidfile = _hanging_uv(tmp_path, "sync")
    proc = _cli_with_uv(fake, "envbuilder.kernels.torchenv",
                        ["wheels", str(bundle_master["lock"]), "-o", str(tmp_path / "wh"), "--cache-dir",
                         str(tmp_path / "cache")])
    uv_pid = _wait_for(pidfile, proc)
    tree = descendants_of(proc.pid)
    os.kill(proc.pid, sig)
    proc.communicate(timeout=30)
    try:
        assert all(_gone_within(pid, 5) for pid in tree | {uv_pid}), "uv sync outlived wheels"
    finally:
        _kill_all(tree | {uv_pid})
    assert not (tmp_path / "wh").exists() or not list((tmp_path / "wh").iterdir())


def test_every_host_side_child_goes_through_procs() -> None:
    """subprocess.run/Popen/check_output start a child with no process group of its own and no
    PR_SET_PDEATHSIG: a killed envbuilder would orphan it. Host-side code starts children through procs only
    (the in-environment certify modules and the image's own tools run inside the target, not here)."""
    import ast

    from test_layering import CERTIFY_HOST_SIDE

    pkg = REPO / "envbuilder"
    bad = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        in_env = rel.startswith("certify/") and path.stem not in CERTIFY_HOST_SIDE
        if rel == "procs.py" or in_env or rel.startswith("image/tools/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"
                    and node.func.attr in ("run", "Popen", "call", "check_call", "check_output")):
                bad.append(f"{rel}:{node.lineno} subprocess.{node.func.attr}")
    assert not bad, "start children with envbuilder.procs (run, popen, managed):\n" + "\n".join(bad)
