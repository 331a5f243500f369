"""Benchmark the lock fast paths against raw uv, in one run, interleaved.

    .venv/bin/python bench/lock_fast.py --nemo v2.3.0 --rounds 5 [--all-rows]

Measures, with the same uv binary and uv cache, alternating the contenders each round:
  * raw `uv lock --check` in an up-to-date lock directory, as a user runs it there (uv finds its
    interpreter itself: on a pyenv host that runs a shell shim and a Python start-up each time),
  * raw `uv lock --check --python <this Python>`: the same with the interpreter named, as
    envbuilder runs uv when its own Python fits the row (the floor without uv's search),
  * interpreter start-up: `python -m envbuilder --version` (what any envbuilder command pays),
  * `envbuilder lock --nemo TAG -o DIR --check` on that directory (seeded: uv validates),
  * `envbuilder lock --nemo TAG -o NEWDIR` of an already-locked row into a new directory
    (offline-first from a warm cache), checked byte-identical to the reference lock,
  * with --all-rows: `envbuilder lock --all -o DIR` (warm) against the sum of single-row locks.
Bytecode caching is left on for every contender (PYTHONDONTWRITEBYTECODE is dropped), as on a
user's machine. The load average is printed with the results: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envbuilder.lock.uvrun import uv_binary, uv_env  # noqa: E402

FILES = ("pyproject.toml", "uv.lock", "envbuilder.lock.json")


def _env() -> dict[str, str]:
    env = uv_env(None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(cmd: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t
    if proc.returncode not in ok:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nemo", default="v2.3.0")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--all-rows", action="store_true", help="also time lock --all against single locks")
    ap.add_argument("--jobs", type=int, default=None, help="lock --all --jobs")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-lock-fast-"))
    envb = [sys.executable, "-m", "envbuilder"]
    lock = [*envb, "lock", "--no-detect"]
    load_before = os.getloadavg()
    try:
        ref = work / "ref"
        timed([*lock, "--nemo", args.nemo, "-o", str(ref), "--json"], REPO)  # warms cache and bytecode
        timed([*envb, "--version"], REPO)
        raw_check, raw_named, startup, envb_check, new_dir = [], [], [], [], []
        offline_flags = []
        for i in range(args.rounds):
            raw_check.append(timed([uv_binary(), "lock", "--check"], ref)[0])
            raw_named.append(timed([uv_binary(), "lock", "--check", "--python", sys.executable], ref)[0])
            startup.append(timed([*envb, "--version"], REPO)[0])
            envb_check.append(timed([*lock, "--nemo", args.nemo, "-o", str(ref), "--check"], REPO)[0])
            out = work / f"new{i}"
            t, stdout = timed([*lock, "--nemo", args.nemo, "-o", str(out), "--json"], REPO)
            new_dir.append(t)
            offline_flags.append(json.loads(stdout)["resolved_offline"])
            for name in FILES:
                if (out / name).read_bytes() != (ref / name).read_bytes():
                    sys.exit(f"{out / name} differs from the reference lock")
            shutil.rmtree(out)
        result: dict[str, object] = {
            "nemo": args.nemo, "rounds": args.rounds,
            "raw_uv_lock_check_s": med(raw_check), "startup_s": med(startup),
            "envbuilder_check_s": med(envb_check),
            "check_target_s": round(1.5 * med(raw_check) + med(startup), 3),
            "check_ratio_vs_raw_plus_startup": round(med(envb_check) / (med(raw_check) + med(startup)), 3),
            "raw_uv_lock_check_named_python_s": med(raw_named),
            "check_ratio_vs_named_python_raw_plus_startup": round(
                med(envb_check) / (med(raw_named) + med(startup)), 3),
            "lock_into_new_dir_s": med(new_dir), "new_dir_resolved_offline": offline_flags,
            "all_runs": {"raw_check": [round(x, 3) for x in raw_check], "startup": [round(x, 3) for x in startup],
                         "raw_check_named_python": [round(x, 3) for x in raw_named],
                         "envbuilder_check": [round(x, 3) for x in envb_check],
                         "new_dir": [round(x, 3) for x in new_dir]},
        }
        if args.all_rows:
            from envbuilder.matrix import load_matrix

            tags = load_matrix().names()
            singles = {}
            for tag in tags:
                # a row that cannot lock fails the same way in both: any exit status is timed
                row = ["--nemo", tag] if tag.startswith("v") or tag == "smoke" else ["--release", tag]
                t, _ = timed([*lock, *row, "-o", str(work / "single" / tag)], REPO, ok=tuple(range(256)))
                singles[tag] = round(t, 3)
            jobs = ["--jobs", str(args.jobs)] if args.jobs else []
            t_all, stdout = timed([*lock, "--all", "-o", str(work / "all"), "--json", "--timings", *jobs], REPO,
                                  ok=tuple(range(256)))
            report = json.loads(stdout)
            rows = report.get("rows") or report.get("details", {}).get("rows", [])
            result["lock_all"] = {
                "rows": len(tags), "wall_s": round(t_all, 3), "sum_of_single_locks_s": round(sum(singles.values()), 3),
                "ratio": round(t_all / sum(singles.values()), 3),
                "resolved_offline": sum(1 for r in rows if r.get("resolved_offline")),
                "failed": [r["row"] for r in rows if "error" in r], "singles_s": singles,
            }
        result["loadavg_before"] = [round(x, 2) for x in load_before]
        result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        result["cpus"] = os.cpu_count()
        result["python3_on_path"] = shutil.which("python3")  # a pyenv shim makes uv's own search slow
        print(json.dumps(result, indent=2, sort_keys=True))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
