"""certify's imports check: one forked child per module after torch (now) against a fresh interpreter per module
(before), in one run, on the same module list, alternating.

    .venv/bin/python bench/certify_imports.py --venv VENV --lock LOCKDIR [--start NAME] [--limit N] [--jobs J]
        [--rounds R]

The module list is the one the imports check builds for LOCKDIR's packages in VENV (certify/level0.py:
modules_to_import; extension modules after torch, image/tools/import_check.py); --limit takes the first N (the
whole NeMo stack is about 400 modules, half an hour a round the old way on a busy 2-core machine). Both
contenders get the same statements and the same number of parallel jobs; the results must agree module by
module (same pass/fail), or the run stops.
Runs inside VENV's interpreter, like certify does. The load average is printed: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

INNER = r"""
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
from envbuilder.certify import level0
from envbuilder.certify.expect import load_expectations
exp = load_expectations(__import__("pathlib").Path(sys.argv[1]))
limit, jobs, which, start = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
ic = level0._import_check()
ext = ic.extension_modules()
mods = [m for m in level0.modules_to_import(exp) if m >= start]
mods = mods[:limit] if limit else mods
stmts = [ic.statement(m, ext) for m in mods]
t = time.monotonic()
if which == "fork":
    results, how = level0.import_each(stmts, jobs)
else:
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results, how = list(pool.map(level0._try_import, stmts)), "a fresh interpreter per module"
print(json.dumps({"seconds": time.monotonic() - t, "how": how, "modules": len(stmts),
                  "rc": {s: rc for s, rc, _ in results}}))
"""


def expectations(venv: Path, lock: Path, out: Path) -> Path:
    """The expectations file `envbuilder certify` writes for this lock (its packages, as uv exports them)."""
    from envbuilder.certify.certificate import Artifact
    from envbuilder.certify.expectations import expectations_from_lock, read_lock

    exp = expectations_from_lock(read_lock(lock), matrices=REPO / "matrices",
                                 artifact=Artifact(kind="venv", ref=str(venv)))
    out.write_text(exp.to_json())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", type=Path, required=True)
    ap.add_argument("--lock", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--start", default="", help="first module name (alphabetical) of the slice")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    exp = expectations(a.venv, a.lock, Path("/tmp") / f"bench-certify-expect-{os.getpid()}.json")
    py = str(a.venv / "bin" / "python")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rows: dict[str, list[float]] = {"fresh": [], "fork": []}
    seen: dict[str, dict[str, int]] = {}
    for r in range(a.rounds):
        for which in (("fresh", "fork") if r % 2 == 0 else ("fork", "fresh")):
            out = subprocess.run([py, "-c", INNER, str(exp), str(a.limit), str(a.jobs), which, a.start], env=env,
                                 capture_output=True, text=True, check=True, cwd="/tmp")
            doc = json.loads(out.stdout.strip().splitlines()[-1])
            rows[which].append(doc["seconds"])
            seen[which] = {s: int(rc != 0) for s, rc in doc["rc"].items()}
            print(f"round {r + 1} {which:5s} {doc['modules']} modules in {doc['seconds']:.1f}s ({doc['how']})",
                  flush=True)
    if seen["fresh"] != seen["fork"]:
        diff = sorted(s for s in seen["fresh"] if seen["fresh"][s] != seen["fork"].get(s))
        raise SystemExit(f"the two ways disagree on {len(diff)} module(s): {diff[:10]}")
    fresh, fork = min(rows["fresh"]), min(rows["fork"])
    failed = sum(seen["fork"].values())
    print(f"best of {a.rounds}: fresh interpreter per module {fresh:.1f}s, forked after torch {fork:.1f}s "
          f"({fresh / fork:.1f}x); same result for every module ({failed} fail both ways); jobs {a.jobs}; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
