"""Import statements each in a process of its own, forked from one interpreter that has loaded torch.

    python -m envbuilder.certify.forkimport JOBS TIMEOUT_S < statements.json > results.json

The imports check wants every top-level module imported where nothing else was imported first, so one
broken module cannot hide behind another. A fresh `python -c "import X"` per module did that, and paid the
interpreter's start and torch's import (seconds, for a NeMo stack that is most of a module's import) a few
hundred times. Here one interpreter imports torch once (nothing else; no CUDA context: importing torch does
not create one), then forks one child per statement: the child has the standard library and torch loaded,
imports the statement's module, and exits through os._exit (no atexit handlers, no finalizers of the
parent's objects). At most JOBS children run at once; a child that runs past TIMEOUT_S is killed (124).

Reads a JSON list of statements, writes a JSON list of {"statement", "rc", "err"} in the same order (err: the
child's stderr, last 8 kB). Standard library only (torch is imported when it is there).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

ERR_TAIL = 8192


@dataclass
class _Child:
    statement: str
    err_path: str
    started: float


def preload() -> str:
    """Import what nearly every module of the stack imports; the children inherit it. Returns what was
    loaded (a broken torch is left for the children to report, module by module)."""
    try:
        import torch  # noqa: F401

        return "torch"
    except BaseException:
        return ""


def _run_child(statement: str, err_fd: int) -> None:
    """In the child: stdout to /dev/null (the parent's stdout carries the results), stderr to err_fd."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(err_fd, 2)
    code = 0
    try:
        exec(compile(statement, "<import-check>", "exec"), {"__name__": "__import_check__"})
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _start(statement: str, tmpdir: str) -> tuple[int, _Child]:
    fd, path = tempfile.mkstemp(prefix="import-", suffix=".err", dir=tmpdir)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        _run_child(statement, fd)
    os.close(fd)
    return pid, _Child(statement, path, time.monotonic())


def _read_tail(path: str) -> str:
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - ERR_TAIL))
        return fh.read().decode("utf-8", errors="replace")


def import_all(statements: list[str], jobs: int, timeout_s: float) -> list[dict[str, object]]:
    results: dict[int, dict[str, object]] = {}
    pending = list(enumerate(statements))
    running: dict[int, tuple[int, _Child]] = {}
    with tempfile.TemporaryDirectory(prefix="envbuilder-import-") as tmpdir:
        while pending or running:
            while pending and len(running) < jobs:
                index, statement = pending.pop(0)
                pid, child = _start(statement, tmpdir)
                running[pid] = (index, child)
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid in running:
                index, child = running.pop(pid)
                results[index] = {"statement": child.statement, "rc": os.waitstatus_to_exitcode(status),
                                  "err": _read_tail(child.err_path)}
                continue
            now = time.monotonic()
            for pid, (index, child) in list(running.items()):
                if now - child.started > timeout_s:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    running.pop(pid)
                    results[index] = {"statement": child.statement, "rc": 124,
                                      "err": _read_tail(child.err_path) + f"\ntimed out after {timeout_s:.0f}s"}
            time.sleep(0.01)
    return [results[i] for i in range(len(statements))]


def main(argv: list[str]) -> int:
    jobs, timeout_s = int(argv[1]), float(argv[2])
    statements = json.loads(sys.stdin.read())
    loaded = preload()
    results = import_all(statements, max(1, jobs), timeout_s)
    sys.stdout.write(json.dumps({"preloaded": loaded, "results": results}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
