"""Benchmark: `envbuilder lock` against raw `uv lock` of the same rendered pyproject.toml.

Both run in this process's environment with the same uv binary and the same uv cache,
interleaved (raw, envbuilder, raw, envbuilder, ...) so network and cache effects hit both
alike. One warm-up pair fills the cache and is not counted. Prints a JSON summary with the
overhead ratio (median envbuilder / median raw).

    .venv/bin/python bench/lock.py --nemo v2.3.0 --rounds 3
"""

from __future__ import annotations

import argparse
import json
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


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=uv_env(None), capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nemo", default="v2.3.0")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-lock-"))
    envb = [sys.executable, "-m", "envbuilder", "lock", "--nemo", args.nemo, "--no-detect", "--json"]
    try:
        # render once through envbuilder to get the exact pyproject raw uv will lock
        timed([*envb, "-o", str(work / "seed")], REPO)
        raw_t, envb_t, own_t = [], [], []
        for i in range(args.rounds + 1):
            raw = work / f"raw{i}"
            raw.mkdir()
            shutil.copy(work / "seed" / "pyproject.toml", raw / "pyproject.toml")
            r, _ = timed([uv_binary(), "lock"], raw)
            e, out = timed([*envb, "-o", str(work / f"envb{i}")], REPO)
            if i == 0:
                continue  # warm-up pair
            raw_t.append(r)
            envb_t.append(e)
            # envbuilder's own work: wall time of the command minus the uv lock it ran
            own_t.append(e - json.loads(out)["timings"]["uv_lock"])
            same = (raw / "uv.lock").read_bytes() == (work / f"envb{i}" / "uv.lock").read_bytes()
            if not same:
                sys.exit("raw uv lock and envbuilder lock produced different uv.lock files")
        result = {
            "nemo": args.nemo,
            "rounds": args.rounds,
            "raw_uv_lock_s": [round(x, 2) for x in raw_t],
            "envbuilder_lock_s": [round(x, 2) for x in envb_t],
            "raw_median_s": round(statistics.median(raw_t), 2),
            "envbuilder_median_s": round(statistics.median(envb_t), 2),
            "overhead_ratio": round(statistics.median(envb_t) / statistics.median(raw_t), 3),
            "envbuilder_own_s": [round(x, 2) for x in own_t],
            "own_overhead_ratio": round(1 + statistics.median(own_t) / statistics.median(raw_t), 3),
            "identical_uv_lock": True,
        }
        print(json.dumps(result, indent=2, sort_keys=True))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
