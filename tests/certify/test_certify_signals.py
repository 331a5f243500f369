"""certify --cpu stopped mid-pretrain: the launcher's whole tree goes with it (torch puts each worker in a
session of its own), and its temporary directories do not pile up. Checked through /proc.

Needs torch (the CPU wheel venv of tests/conftest.py): integration.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import alive, descendants_of

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _start(venv: Path, out: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], set[int]]:
    proc = subprocess.Popen([sys.executable, "-m", "envbuilder", "certify", "--venv", str(venv), "--cpu",
                             "--level", "1", "--only", "pretrain", "--steps", "10000", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        tree = descendants_of(proc.pid)
        workers = {p for p in tree if "train_torch" in _cmdline(p) and "torch.distributed.run" not in _cmdline(p)}
        if len(workers) >= 2:
            return proc, tree | descendants_of(proc.pid)
        if proc.poll() is not None:
            pytest.fail(f"certify ended before the pretrain started: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.5)
    proc.kill()
    pytest.fail("the pretrain workers never started")


def _gone(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return set()
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_certify_cpu_signal_takes_the_whole_worker_tree(certify_torch_venv: Path, tmp_path: Path, sig: int) -> None:
    tmp = tmp_path / "tmp"  # this run's TMPDIR (host and environment): its temporary directories are ours alone
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc, tree = _start(certify_torch_venv, tmp_path / "cert", env)
    ours = set(tmp.iterdir())
    assert ours, "certify made no temporary directory"
    os.kill(proc.pid, sig)
    proc.communicate(timeout=60)
    left = _gone(tree, 15)
    try:
        assert not left, f"left running: {[_cmdline(p) for p in left]}"
    finally:
        for p in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    if sig == signal.SIGTERM:
        assert proc.returncode == 143
        assert not list(tmp.iterdir()), "SIGTERM left certify's temporary directories"
    else:  # SIGKILL runs no cleanup; the next run removes what the dead one left
        assert list(tmp.iterdir())
        again = subprocess.run([sys.executable, "-m", "envbuilder", "certify", "--venv", str(certify_torch_venv),
                                "--level", "0", "--only", "torch-build"], capture_output=True, text=True,
                               cwd=REPO, timeout=600, env=env)
        assert again.returncode in (0, 50), again.stderr
        assert not list(tmp.iterdir()), "the next run left the dead run's directories"
    assert not (tmp_path / "cert").exists() or not list((tmp_path / "cert").iterdir())
