"""Upstream's security overrides in the committed locks, and that what they override still works.

Every lock takes urllib3 >= 2.6.3 (CVE-2026-21441) and, where nemo-run caps it, cryptography >= 43
(46.0.5+, CVE-2026-26007): the Megatron-Bridge rows carry upstream's own overrides, the NeMo 2.x rows
carry the same ones with their reasons (matrices/README.md). The integration test installs, per lock, the
lock's own versions of every package that depends on urllib3 or cryptography (and what those need) into a
CPU-only venv with uv, and runs tests/lock/security_check.py there: each imports and does real work (an
HTTP GET and an S3 call to a local server, dockerd's version over its socket, a torchx docker dry run,
paramiko and Fernet keys, nemo-run objects)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuilder.lock.interpreter import interpreter_for, own_interpreter
from envbuilder.lock.record import LockRecord
from envbuilder.lock.uvlock import LockedPackage, read_uv_lock
from envbuilder.matrix import load_matrix
from envbuilder.uvbin import uv_binary

REPO = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).resolve().parent / "security_check.py"
OVERRIDDEN = ("urllib3", "cryptography")
# every locked version of these runs at least once (botocore, sentry-sdk... run with whichever rows cover these)
COVER = (*OVERRIDDEN, "torchx", "nemo-run", "docker", "paramiko", "requests")


def _rows() -> list[str]:
    return [r.name for r in load_matrix(REPO / "matrices").releases if not r.test_only]


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


@pytest.mark.parametrize("row", _rows())
def test_every_lock_takes_the_fixed_urllib3_and_cryptography(row: str) -> None:
    locked = {p.name: p.version for p in read_uv_lock(REPO / "locks" / row / "uv.lock")}
    assert _version(locked["urllib3"]) >= (2, 6, 3), locked["urllib3"]
    if "cryptography" in locked and "nemo-run" in locked:
        assert _version(locked["cryptography"]) >= (43,), locked["cryptography"]
    r = load_matrix(REPO / "matrices").find_row(name=row)
    assert r is not None
    urllib3 = next(o for o in r.override_dependencies if o.package == "urllib3")
    assert urllib3.reason == "security" and "CVE-2026-21441" in urllib3.text
    assert "NVIDIA-NeMo/Megatron-Bridge:pyproject.toml@v" in urllib3.source


def _dependents(packages: dict[str, LockedPackage]) -> tuple[list[str], dict[str, str]]:
    """The packages that depend on urllib3 or cryptography, and the closure they install (name -> version)."""
    dependents = sorted(n for n, p in packages.items() if any(e[0] in OVERRIDDEN for e in p.dependencies))
    if "torchx" in dependents and "nemo-run" in packages:  # torchx's user: nemo-run runs it with the new urllib3
        dependents = sorted({*dependents, "nemo-run"})
    closure: dict[str, str] = {}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(n, ()) for n in (*dependents, *OVERRIDDEN)]
    while todo:
        name, extras = todo.pop()
        p = packages.get(name)
        if p is None or (name, extras) in seen:
            continue
        seen.add((name, extras))
        closure[name] = p.version
        edges = [*p.dependencies, *(e for x in extras for e in (p.optional or {}).get(x, ()))]
        todo += [(e[0], e[1]) for e in edges if "never" not in e[3]]
    return dependents, closure


class _Handler(http.server.BaseHTTPRequestHandler):
    S3 = (b'<?xml version="1.0" encoding="UTF-8"?><ListAllMyBucketsResult><Owner><ID>o</ID></Owner><Buckets>'
          b"<Bucket><Name>envbuilder</Name><CreationDate>2026-01-01T00:00:00.000Z</CreationDate></Bucket>"
          b"</Buckets></ListAllMyBucketsResult>")

    def do_GET(self) -> None:
        body = self.S3 if self.path.startswith("/s3") else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()


@pytest.mark.integration
def test_overridden_packages_install_and_work_with_every_nemo_lock(tmp_path: Path, server: int) -> None:
    """The NeMo 2.x rows, where envbuilder applies the overrides itself (the Megatron-Bridge rows carry
    upstream's, which its own CI runs). Every version, in any NeMo lock, of the packages whose caps the
    overrides set aside (torchx, nemo-run) and of the main users of urllib3 and cryptography runs at least
    once: venvs are made for the fewest rows that cover them all, each with that row's own versions of the
    whole closure, and there every package that depends on urllib3 or cryptography is checked."""
    m = load_matrix(REPO / "matrices")
    rows: dict[str, tuple[str, list[str], dict[str, str]]] = {}
    for row in (r.name for r in m.releases if r.nemo is not None and not r.test_only):
        lockdir = REPO / "locks" / row
        dependents, closure = _dependents({p.name: p for p in read_uv_lock(lockdir / "uv.lock")})
        rows[row] = (LockRecord.from_lockdir(lockdir).target.python, dependents, closure)

    def pairs(row: str) -> set[tuple[str, str, str]]:
        python, _, closure = rows[row]
        return {(python, n, closure[n]) for n in COVER if n in closure}

    needed = set().union(*(pairs(r) for r in rows))
    chosen: list[str] = []
    while needed:
        best = max(sorted(rows), key=lambda r: len(pairs(r) & needed))
        chosen.append(best)
        needed -= pairs(best)
    uv = uv_binary()
    ran = []
    for i, row in enumerate(chosen):
        python, dependents, closure = rows[row]
        t0 = time.monotonic()
        venv = tmp_path / f"venv{i}"
        # the lock step's own search: the running Python, else one that answers (a pyenv shim may not)
        spec = f"=={python}.*"
        exe = own_interpreter(spec) or interpreter_for(spec) or python
        made = subprocess.run([uv, "venv", "-q", "--python", exe, str(venv)], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        assert made.returncode == 0, f"no Python {python} for {row}: {made.stderr}"
        pins = [f"{n}=={v}" for n, v in sorted(closure.items())]
        done = subprocess.run([uv, "pip", "install", "-q", "--no-deps", "--python", str(venv / "bin" / "python"),
                               *pins], capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, f"{row}: {done.stderr[-2000:]}"
        names = [*dependents, *(n for n in OVERRIDDEN if n in closure)]
        check = subprocess.run([str(venv / "bin" / "python"), str(CHECK), str(server), *dict.fromkeys(names)],
                               capture_output=True, text=True, timeout=600)
        assert check.returncode == 0, f"{row}: {check.stdout}\n{check.stderr[-3000:]}"
        results = json.loads(check.stdout)
        assert results["urllib3"].startswith("urllib3 2.")
        print(f"{row}: {len(pins)} packages, {time.monotonic() - t0:.1f}s: {results}", file=sys.stderr)
        ran.append(row)
    assert {"v2.0.0", "v2.7.3"} <= {r for r in rows} and len(ran) <= len(rows)
