"""Import every top-level module of every installed distribution, each in its own subprocess.

Runs inside the image at the end of the build (and by `envbuilder certify` level 0). A
subprocess per module keeps one module's side effects (CUDA init, monkey-patching) from
hiding or causing another's failure. Exit status 1 when any module outside GPU_AT_IMPORT
fails; the report is JSON on stdout when --json is given, else one line per module.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from typing import Any

# Modules that cannot import on a machine without an NVIDIA driver (image builds have none):
# their compiled extensions link libcuda.so.1, which only the driver provides, or they load
# it at import. A failure of these is reported with the reason, not counted as an error;
# `envbuilder certify` imports them again on a GPU host.
GPU_AT_IMPORT: dict[str, str] = {
    "transformer_engine": "loads libcuda.so.1 (the driver) when imported",
    "transformer_engine_torch": "extension links libcuda.so.1 (the driver)",
    "flash_attn": "imports flash_attn_2_cuda, which links libcuda.so.1",
    "flash_attn_2_cuda": "extension links libcuda.so.1 (the driver)",
    "flash_attn_interface": "flash-attn 3 (Hopper) extension, needs the driver",
    "mamba_ssm": "imports selective_scan_cuda and causal_conv1d_cuda, which need the driver",
    "selective_scan_cuda": "extension links libcuda.so.1 (the driver)",
    "causal_conv1d": "imports causal_conv1d_cuda, the CUDA extension (driver needed; absent when "
                     "built with CAUSAL_CONV1D_SKIP_CUDA_BUILD)",
    "causal_conv1d_cuda": "extension links libcuda.so.1 (the driver)",
    "apex": "its fused kernels (amp_C, fused_layer_norm_cuda) link the driver",
    "amp_C": "extension links libcuda.so.1 (the driver)",
    "fused_layer_norm_cuda": "extension links libcuda.so.1 (the driver)",
    "nvidia_dlprof_pytorch_nvtx": "needs the driver",
    "cupy": "cupy_backends load libcuda.so.1 at import",
}

# A listed module's failure counts as "needs a GPU" only when the error says so; an ABI
# mismatch (undefined symbol) is a real failure even for these modules.
_GPU_ERROR = re.compile(r"libcuda|cuda|driver|nvml|no CUDA GPUs", re.IGNORECASE)

# Directory names some distributions wrongly ship at top level; they are not API.
_NOT_MODULES = {"test", "tests", "testing", "docs", "doc", "examples", "benchmarks", "scripts", "bin"}


def top_level_modules(dist: metadata.Distribution) -> set[str]:
    text = dist.read_text("top_level.txt")
    if text:
        names = {line.strip() for line in text.splitlines()}
    else:
        names = set()
        for f in dist.files or ():
            parts = f.parts
            if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] in ("..", "__pycache__"):
                continue
            if len(parts) == 1:
                if parts[0].endswith(".py"):
                    names.add(parts[0][:-3])
                elif parts[0].endswith(".so"):
                    names.add(parts[0].split(".", 1)[0])
            else:
                names.add(parts[0])
    return {n.replace("/", ".") for n in names
            if n and n.isidentifier() and not n.startswith("__") and n not in _NOT_MODULES}


def all_modules() -> dict[str, str]:
    """module -> distribution name (first seen, sorted)."""
    out: dict[str, str] = {}
    dists = sorted(metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower())
    for dist in dists:
        for mod in sorted(top_level_modules(dist)):
            out.setdefault(mod, dist.metadata["Name"] or "?")
    return out


def import_one(module: str, timeout: int) -> tuple[bool, str]:
    try:
        proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"import took longer than {timeout}s"
    if proc.returncode == 0:
        return True, ""
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return False, lines[-1] if lines else f"exit status {proc.returncode}"


def run(jobs: int, timeout: int) -> dict[str, Any]:
    modules = all_modules()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {m: pool.submit(import_one, m, timeout) for m in modules}
        results = {m: f.result() for m, f in futures.items()}
    report: dict[str, dict[str, str]] = {}
    for mod in sorted(modules):
        ok, err = results[mod]
        if ok:
            status = "ok"
        elif mod in GPU_AT_IMPORT and _GPU_ERROR.search(err) and "undefined symbol" not in err:
            status = "needs-gpu"
        else:
            status = "failed"
        entry = {"distribution": modules[mod], "status": status}
        if err:
            entry["error"] = err
        if status == "needs-gpu":
            entry["reason"] = GPU_AT_IMPORT[mod]
        report[mod] = entry
    failed = sorted(m for m, e in report.items() if e["status"] == "failed")
    return {"python": sys.version.split()[0], "modules": report, "failed": failed, "ok": not failed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per module")
    args = ap.parse_args(argv)
    report = run(max(1, args.jobs), args.timeout)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        for mod, e in report["modules"].items():
            extra = f"  ({e['reason']}: {e['error']})" if e["status"] == "needs-gpu" else (
                f"  {e['error']}" if e["status"] == "failed" else "")
            print(f"import-check {e['status']:9} {mod} [{e['distribution']}]{extra}")
        n = len(report["modules"])
        print(f"import-check: {n - len(report['failed'])}/{n} modules usable, "
              f"{len(report['failed'])} failed: {', '.join(report['failed']) or 'none'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
