"""Level 1's training workers start together and queue on the GPU lock (certify/gpulock.py, launch.Worker).

No GPU here: the workers are small real processes that take the same lock the training workers take and
"use the GPU" by holding it for a while. What is tested: start-up overlaps, the locked phases never do, each
worker reports its wait, a worker of several ranks takes no lock, a timed-out worker is stopped through
SIGTERM (so it can end what it started), and a stopped plan leaves no process behind.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path

import pytest

from envbuilder.certify import gpulock
from envbuilder.certify.launch import start_worker

WORKER = '''
import argparse, json, os, sys, time
sys.path.insert(0, {root!r})
from envbuilder.certify import gpulock
ap = argparse.ArgumentParser(); ap.add_argument("--out"); ap.add_argument("--hold", type=float)
a = ap.parse_args()
started = time.time()
time.sleep(0.5)  # "imports": overlaps with the others
held = gpulock.acquire()
got = time.time()
time.sleep(a.hold)  # "GPU work": alone
done = time.time()
open(a.out, "w").write(json.dumps({{"started": started, "got": got, "done": done, **gpulock.waited(held)}}))
'''


@pytest.fixture()
def worker_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    pkg = tmp_path / "mods"
    pkg.mkdir()
    (pkg / "fakeworker.py").write_text(WORKER.format(root=str(Path(__file__).resolve().parents[2])))
    monkeypatch.setenv("PYTHONPATH", str(pkg))
    return "fakeworker"


def test_workers_start_together_and_their_gpu_work_never_overlaps(tmp_path: Path, worker_module: str) -> None:
    lock = tmp_path / "gpu.lock"
    env = {gpulock.ENV: str(lock)}
    main = gpulock.acquire(str(lock))  # the main process's own GPU checks come first
    assert main is not None and main.waited_s < 1
    t0 = time.time()
    workers = [start_worker(worker_module, ["--hold=0.7"], 1, tmp_path / "w", f"w{i}", 60, env, torchrun=False)
               for i in range(3)]
    time.sleep(1.0)
    main.release()
    runs = [w.wait() for w in workers]
    assert all(r.rc == 0 and r.result for r in runs), [r.log for r in runs]
    res = sorted((r.result for r in runs if r.result), key=lambda d: d["got"])
    assert max(d["started"] for d in res) - t0 < 0.9  # all started before the main process let go
    assert all(d["got"] >= t0 + 1.0 for d in res)  # none got the GPU while the main process held it
    for a, b in itertools.pairwise(res):
        assert b["got"] >= a["done"] - 0.05  # one at a time
    assert res[-1]["gpu_wait_s"] >= 1.4  # the last waited (at least) for the two others


def test_no_lock_without_the_variable_or_with_several_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpulock.ENV, raising=False)
    assert gpulock.acquire() is None and gpulock.waited(None) == {}
    monkeypatch.setenv(gpulock.ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.setenv("WORLD_SIZE", "2")  # ranks of one job cannot queue behind each other
    assert gpulock.acquire() is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    held = gpulock.acquire()
    assert held is not None
    held.release()


def test_a_timed_out_worker_gets_sigterm_first_and_stop_leaves_nothing(tmp_path: Path) -> None:
    pkg = tmp_path / "mods"
    pkg.mkdir()
    (pkg / "termworker.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (open(sys.argv[2] + '.term', 'w').write('1'), sys.exit(143)))\n"
        "time.sleep(300)\n")
    env = {"PYTHONPATH": str(pkg)}
    run = start_worker("termworker", [], 1, tmp_path / "w", "t", 1.0, env, torchrun=False).wait()
    assert run.rc == 124 and "timed out after 1s" in run.log
    assert (tmp_path / "w" / "t.json.term").exists()  # it had the chance to stop what it started
    w = start_worker("termworker", [], 1, tmp_path / "w", "s", 60, env, torchrun=False)
    time.sleep(0.5)
    w.stop()
    assert w.proc.poll() is not None
    out = subprocess.run(["pgrep", "-g", str(w.proc.pid)], capture_output=True, text=True)
    assert out.stdout.strip() == ""  # nothing left in its process group
