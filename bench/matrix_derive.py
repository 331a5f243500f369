"""Benchmark `envbuilder matrix derive` against reading its inputs raw, and measure each Megatron-Bridge
row's agreement with upstream's own uv.lock before and after the rows pinned it.

    .venv/bin/python bench/matrix_derive.py --mbridge 0.6.0 --from MIRROR --megatron-lm MIRROR [--te MIRROR] \\
        --snapshot tests/fixtures/derive/pypi-snapshot-v0.6.0.json --rounds 3 -o bench/results/matrix-derive

Contenders, interleaved each round, as a user runs them (a fresh `python -m envbuilder`):
  * derive offline: `matrix derive --from MIRROR --snapshot FILE --json` (git + parsing, no network),
  * derive online: the same reading PyPI (every package upstream installs: ~250 JSON documents),
  * raw reads: what derive reads, without envbuilder: `git show` of each release file at the tag and the
    newer tags, the submodule commit, Megatron-LM's package_info.py, and the same PyPI JSON documents with
    the same 8 concurrent requests (the floor for the online derive),
  * start-up: `python -m envbuilder --version`.
Agreement: `matrix compare` on each committed lock; the locks committed before the rows pinned upstream's
versions (git history at BEFORE_COMMIT); and for 26.08, which had no row before, the derived row locked
without the pins (uv lock of its pyproject with the upstream constraints left out, same cutoff).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envbuilder.lock.fidelity import compare, our_versions  # noqa: E402
from envbuilder.matrix import load_matrix  # noqa: E402
from envbuilder.matrix.refresh import PYPI_JSON  # noqa: E402
from envbuilder.matrix.release_files import read_release  # noqa: E402
from envbuilder.matrix.release_source import GitTree, _context, _get  # noqa: E402

BEFORE_COMMIT = "1efd9d6"  # main before the Megatron-Bridge rows pinned upstream's lock (26.04, 26.06 existed)
ROWS = ("26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08")


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    t = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
    return time.monotonic() - t


def _raw_reads(mirror: Path, lm: Path, tag: str, names: list[str]) -> float:
    """git show of every file derive reads + the same PyPI JSON documents, 8 at a time."""
    t = time.monotonic()
    git = ["git", f"--git-dir={mirror}"]
    for path in ("pyproject.toml", "uv.lock", ".python-version", ".gitmodules", "docs/versions1.json",
                 "docs/releases/software-versions.md", "docker/Dockerfile.ci", "src/megatron/bridge/package_info.py"):
        subprocess.run([*git, "show", f"{tag}:{path}"], capture_output=True)
    for path in subprocess.run([*git, "ls-tree", "-r", "--name-only", tag, "--", "docker"], capture_output=True,
                               text=True).stdout.split():
        subprocess.run([*git, "show", f"{tag}:{path}"], capture_output=True)
    commit = subprocess.run([*git, "ls-tree", tag, "--", "3rdparty/Megatron-LM"], capture_output=True,
                            text=True).stdout.split()[2]
    subprocess.run(["git", f"--git-dir={lm}", "show", f"{commit}:megatron/core/package_info.py"], capture_output=True)
    for newer in subprocess.run([*git, "tag", "--list", "v*"], capture_output=True, text=True).stdout.split():
        subprocess.run([*git, "show", f"{newer}:docs/versions1.json"], capture_output=True)
    ctx = _context(None)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: _get(PYPI_JSON.format(name=n), ctx), names))
    return time.monotonic() - t


def _agreement_without_pins(row: str, workdir: Path) -> dict[str, object]:
    """The derived row locked without upstream's constraints (everything else as `lock` renders it)."""
    from envbuilder.render import render_pyproject
    from envbuilder.resolve import ResolveRequest, resolve
    from envbuilder.uvbin import uv_binary

    m = load_matrix(REPO / "matrices")
    r = m.find_row(release=row)
    assert r is not None and r.upstream_lock is not None
    res = resolve(m, ResolveRequest(row=row, row_option="release", glibc=str(r.default_glibc.value)))
    from dataclasses import replace

    text = render_pyproject(replace(res, upstream=None), m)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pyproject.toml").write_text(text)
    from envbuilder.lock.interpreter import interpreter_for, own_interpreter

    python = own_interpreter(res.requires_python) or interpreter_for(res.requires_python) or "3.12"
    done = subprocess.run([uv_binary(), "lock", "--python", python], cwd=workdir, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"uv lock without pins failed: {done.stderr[-2000:]}")
    f = compare(our_versions(workdir / "uv.lock"), r.upstream_lock, None)
    return {"agree": f.agree, "both": f.both, "percent": f.percent}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mbridge", default="0.6.0")
    ap.add_argument("--from", dest="source", required=True)
    ap.add_argument("--megatron-lm", required=True)
    ap.add_argument("--te")
    ap.add_argument("--snapshot", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-o", "--output", type=Path, default=REPO / "bench" / "results" / "matrix-derive")
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    py = [sys.executable, "-m", "envbuilder"]
    derive = [*py, "matrix", "derive", "--mbridge", a.mbridge, "--from", a.source, "--megatron-lm", a.megatron_lm,
              *(["--te", a.te] if a.te else []), "--json"]
    files = read_release(GitTree(Path(a.source), "NVIDIA-NeMo/Megatron-Bridge", f"v{a.mbridge}"))
    names = files.pypi_names()
    times: dict[str, list[float]] = {"derive_offline": [], "derive_online": [], "raw_reads": [], "startup": []}
    for _ in range(a.rounds):
        times["startup"].append(_timed([*py, "--version"], env))
        times["derive_offline"].append(_timed([*derive, "--snapshot", a.snapshot], env))
        times["raw_reads"].append(_raw_reads(Path(a.source), Path(a.megatron_lm), f"v{a.mbridge}", names))
        times["derive_online"].append(_timed(derive, env))
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    m = load_matrix(REPO / "matrices")
    agreement: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for row in ROWS:
            r = m.find_row(release=row)
            assert r is not None and r.upstream_lock is not None
            after = compare(our_versions(REPO / "locks" / row / "uv.lock"), r.upstream_lock, None)
            entry: dict[str, object] = {"after": {"agree": after.agree, "both": after.both, "percent": after.percent}}
            old = subprocess.run(["git", "-C", str(REPO), "show", f"{BEFORE_COMMIT}:locks/{row}/uv.lock"],
                                 capture_output=True, text=True)
            if old.returncode == 0:
                (Path(tmp) / f"{row}.lock").write_text(old.stdout)
                before = compare(our_versions(Path(tmp) / f"{row}.lock"), r.upstream_lock, None)
                entry["before"] = {"agree": before.agree, "both": before.both, "percent": before.percent,
                                   "lock": f"{BEFORE_COMMIT}:locks/{row}/uv.lock"}
            agreement[row] = entry
        agreement["26.08"]["without_pins"] = _agreement_without_pins("26.08", Path(tmp) / "nopins")
    load = os.getloadavg()[0]
    result = {"mbridge": a.mbridge, "rounds": a.rounds, "pypi_documents": len(names), "median_seconds": med,
              "seconds": times, "ratio_online_to_raw": round(med["derive_online"] / med["raw_reads"], 2),
              "agreement": agreement, "load_1min": round(load, 1),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    a.output.mkdir(parents=True, exist_ok=True)
    out = a.output / f"derive-{a.mbridge}.json"
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, indent=1, sort_keys=True))
    print(f"wrote {out}", file=sys.stderr)



if __name__ == "__main__":
    main()
