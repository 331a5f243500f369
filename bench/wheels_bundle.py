"""Benchmark `envbuilder wheels` (cache miss vs hit), `bundle` size and offline `install` time.

    .venv/bin/python bench/wheels_bundle.py LOCKDIR [--out DIR] [--split 60M] [--json]

In one run, on one machine:
  * wheels with an empty cache (a real compile of every stage-2 sdist) vs the same command again
    (a cache hit): wall time of both, and their ratio;
  * bundle: bytes, file count, parts;
  * install from the bundle with every proxy variable pointing at a closed port (offline) vs the
    real alternative on a networked host, `uv sync --frozen` of the same lock into a fresh venv
    (uv's cache warm, as on a developer machine): wall time of both, and their ratio.
Prints a Markdown table (for BENCHMARKS.md) and, with --json, JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envbuilder.lock.uvrun import uv_binary

BLOCKED = "http://127.0.0.1:9"


def _run(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, str]:
    t = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd)
    wall = time.monotonic() - t
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[:4])} ... failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, proc.stdout


def _envb(*args: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    return _run([sys.executable, "-m", "envbuilder", *args], env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lockdir", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--split", default="60M")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="envbuilder-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    res: dict[str, Any] = {"lockdir": str(args.lockdir), "machine": f"{platform.node()} {os.cpu_count()} cores"}

    # the build venv (stage 1 synced from the lock) is made by the first run; time it apart
    t_cold, text = _envb("wheels", str(args.lockdir), "-o", str(out / "wh1"), "--cache-dir", str(cache),
                         "--json", "--timings")
    cold = json.loads(text)
    t_warm, text = _envb("wheels", str(args.lockdir), "-o", str(out / "wh2"), "--cache-dir", str(cache),
                         "--json", "--timings")
    warm = json.loads(text)
    res["wheels"] = {
        "cold_wall_s": round(t_cold, 1), "warm_wall_s": round(t_warm, 1),
        "packages": [{"name": c["name"], "miss_s": c["timings"]["seconds"],
                      "compile_s": c["timings"]["compile_seconds"], "peak_rss_mb": c["timings"]["peak_rss_mb"],
                      "hit_s": w["timings"]["seconds"],
                      "cache_hit_again": w["cache"] == "hit"}
                     for c, w in zip(cold["packages"], warm["packages"], strict=True)],
    }
    _, text = _envb("bundle", str(args.lockdir), "-o", str(out / "bundle"), "--split", args.split, "--wheelhouse",
                    str(out / "wh1"), "--cache-dir", str(cache), "--json")
    bundle = json.loads(text)
    res["bundle"] = {"bytes": bundle["bytes"], "files": bundle["files"], "parts": len(bundle["parts"] or [])}

    offline = {k: BLOCKED for k in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY")}
    t_install, _ = _envb("install", str(out / "bundle"), "--venv", str(out / "venv-offline"), env=offline)
    # the real alternative: uv sync --frozen of the same lock from the index (stage 1 + stage-2 deps)
    proj = out / "uv-project"
    shutil.rmtree(proj, ignore_errors=True)
    proj.mkdir()
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy2(args.lockdir / name, proj / name)
    if (args.lockdir / "wheels").is_dir():
        shutil.copytree(args.lockdir / "wheels", proj / "wheels")
    record = json.loads((args.lockdir / "envbuilder.lock.json").read_text())
    cmd = [uv_binary(), "sync", "--frozen", "--no-install-project", "--python", record["target"]["python"]]
    t_sync, _ = _run(cmd, {"UV_PROJECT_ENVIRONMENT": str(out / "venv-uv")}, cwd=proj)
    res["install"] = {"offline_bundle_s": round(t_install, 1), "uv_sync_online_s": round(t_sync, 1),
                      "ratio": round(t_install / t_sync, 2) if t_sync else None}

    if args.json:
        print(json.dumps(res, indent=2, sort_keys=True))
    print(f"| lock | {res['lockdir']} ({res['machine']}) |\n|---|---|")
    for p in res["wheels"]["packages"]:
        print(f"| wheels {p['name']}: miss (compile) / hit | {p['miss_s']:.1f} s (compile {p['compile_s']:.1f} s, "
              f"peak RSS {p['peak_rss_mb']:.0f} MB) / {p['hit_s']:.2f} s "
              f"(x{p['miss_s'] / max(p['hit_s'], 0.01):.0f}) |")
    print(f"| wheels command wall: cold / warm | {res['wheels']['cold_wall_s']} s / {res['wheels']['warm_wall_s']} s |")
    b = res["bundle"]
    print(f"| bundle | {b['bytes'] / 1e6:.1f} MB, {b['files']} files, {b['parts']} parts of {args.split} |")
    i = res["install"]
    print(f"| install offline from bundle / uv sync --frozen online | {i['offline_bundle_s']} s / "
          f"{i['uv_sync_online_s']} s (ratio {i['ratio']}) |")


if __name__ == "__main__":
    main()
