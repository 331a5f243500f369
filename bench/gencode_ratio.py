"""Compile cost of an arch list against a package's default gencodes, file by file (GPU machine).

    python3 gencode_ratio.py BUILD_DIR SRC.cu [SRC.cu ...] > ratio.json

BUILD_DIR is an sdist tree after a finished `pip wheel` (it keeps build/temp*/build.ninja). Each
source is compiled twice with the exact flags ninja used: once for sm_90 alone, once for the nine
gencodes that causal-conv1d 1.6.1 / mamba-ssm 2.3.1 hard-code for nvcc >= 13.0 (setup.py:
75 80 87 90 100 120 103 110 121). `--threads 0` lets nvcc compile the archs of one file in parallel,
so the wall time stays short; the CPU seconds (children's rusage) are the work, and their ratio is
what a saturated build (MAX_JOBS = cores) pays. All compiles run at once.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DEFAULT_NVCC13 = ["75", "80", "87", "90", "100", "120", "103", "110", "121"]


def ninja_vars(build_dir: Path) -> dict[str, str]:
    ninja = next(build_dir.glob("build/temp*/build.ninja"))
    out: dict[str, str] = {}
    for line in ninja.read_text().splitlines():
        m = re.match(r"^(\w+) = (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def compile_one(v: dict[str, str], src: Path, archs: list[str], tag: str) -> dict[str, object]:
    post = re.sub(r"-gencode\s*=?\s*arch=\S+|--threads\s+\d+", "", v["cuda_post_cflags"])
    gencodes = " ".join(f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs)
    out = f"/tmp/ratio-{src.stem}-{tag}.o"
    nvcc = v.get("nvcc", "nvcc")
    cmd = f"{nvcc} {v['cuda_cflags']} -c {shlex.quote(str(src))} -o {out} {post} {gencodes} --threads 0"
    t0 = time.time()
    # rusage of one child: run it through a tiny python wrapper
    wrap = ("import resource,subprocess,sys,json;rc=subprocess.call(sys.argv[1],shell=True);"
            "r=resource.getrusage(resource.RUSAGE_CHILDREN);print(json.dumps([rc,r.ru_utime+r.ru_stime,r.ru_maxrss]))")
    p = subprocess.run([sys.executable, "-c", wrap, cmd], capture_output=True, text=True)
    rc, cpu, rss = json.loads(p.stdout.strip().splitlines()[-1])
    return {"file": src.name, "archs": tag, "rc": rc, "wall_s": round(time.time() - t0, 1), "cpu_s": round(cpu, 1),
            "peak_rss_gib": round(rss / 2**20, 2), "stderr_tail": p.stderr[-300:] if rc else ""}


def main() -> None:
    build_dir = Path(sys.argv[1])
    v = ninja_vars(build_dir)
    jobs = [(Path(s), a, t) for s in sys.argv[2:] for a, t in ((["90"], "sm90"), (DEFAULT_NVCC13, "default9"))]
    with ThreadPoolExecutor(len(jobs)) as pool:
        res = list(pool.map(lambda j: compile_one(v, *j), jobs))
    by = {(r["file"], r["archs"]): r for r in res}
    ratios = {f: round(by[(f, "default9")]["cpu_s"] / max(by[(f, "sm90")]["cpu_s"], 0.1), 2)
              for f in {r["file"] for r in res}}
    print(json.dumps({"default_archs": DEFAULT_NVCC13, "results": res, "cpu_ratio_default_over_sm90": ratios},
                     indent=1))


if __name__ == "__main__":
    main()
