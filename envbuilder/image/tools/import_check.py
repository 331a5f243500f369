"""Import every top-level module of every installed distribution, each in its own subprocess.

The one import check: runs inside the image at the end of the build, and `envbuilder certify` level 0
imports the locked distributions' modules with the same functions (which modules, which statement,
which failures only need a GPU). A
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
from pathlib import PurePosixPath
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
GPU_ERROR = re.compile(r"libcuda|cuda|driver|nvml|no CUDA GPUs", re.IGNORECASE)

# Top-level names wheels ship that are not meant to be imported on their own.
NOT_MODULES = {"tests", "test", "testing", "benchmarks", "benchmark", "docs", "doc", "examples", "scripts",
               "tools", "bin", "include", "share", "etc", "lib", "lib64"}


def top_level_modules(dist: metadata.Distribution) -> list[str]:
    """Importable top-level module names of one installed distribution (a namespace package such as megatron/
    or nvidia/ counts by its regular sub-packages)."""
    tl = dist.read_text("top_level.txt")
    names: set[str] = set()
    files = [PurePosixPath(str(f)) for f in (dist.files or [])]
    if tl:
        names = {ln.strip().replace("/", ".") for ln in tl.splitlines() if ln.strip()}
        if files:
            # top_level.txt may name an extension the package loads from elsewhere
            # (transformer_engine_torch lives in transformer_engine/wheel_lib/): keep what is importable
            provided = {f.parts[0].split(".", 1)[0] for f in files if f.parts}
            names = {n for n in names if n.split(".")[0] in provided}
    else:
        for f in files:
            parts = f.parts
            if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] in ("..", "__pycache__"):
                continue
            if len(parts) == 1:
                if f.suffix == ".py":
                    names.add(f.stem)
                elif f.suffix == ".so":
                    names.add(f.name.split(".", 1)[0])
            else:
                names.add(parts[0])
    out: list[str] = []
    pkg_inits = {f.parts[0] for f in files if len(f.parts) == 2 and f.name == "__init__.py"}
    for name in sorted(names):
        if not name.isidentifier() or name.startswith("_") or name in NOT_MODULES:
            continue
        top_is_dir = any(len(f.parts) > 1 and f.parts[0] == name for f in files)
        if top_is_dir and files and name not in pkg_inits:
            subs = sorted({f.parts[1] for f in files if len(f.parts) == 3 and f.parts[0] == name
                           and f.name == "__init__.py" and f.parts[1].isidentifier()
                           and not f.parts[1].startswith("_") and f.parts[1] not in NOT_MODULES})
            out.extend(f"{name}.{s}" for s in subs)
        else:
            out.append(name)
    return out


def all_modules() -> dict[str, str]:
    """module -> distribution name (first seen, sorted)."""
    out: dict[str, str] = {}
    dists = sorted(metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower())
    for dist in dists:
        for mod in top_level_modules(dist):
            out.setdefault(mod, dist.metadata["Name"] or "?")
    return out


def extension_modules() -> set[str]:
    """Top-level modules that are bare shared objects (selective_scan_cuda, causal_conv1d_cuda...).

    A torch extension links libc10/libtorch without an RPATH to them: it imports only after torch has
    loaded them, as its package does. Imported alone it fails with "libc10.so: cannot open shared object
    file", which says nothing about the environment.
    """
    out: set[str] = set()
    for dist in metadata.distributions():
        for f in dist.files or []:
            parts = PurePosixPath(str(f)).parts
            if len(parts) == 1 and ".so" in parts[0]:
                out.add(parts[0].split(".", 1)[0])
    return out


def statement(module: str, extensions: set[str]) -> str:
    """The statement that imports `module` in a fresh interpreter (a bare extension after torch)."""
    return f"import torch; import {module}" if module in extensions else f"import {module}"


def needs_gpu(module: str, error: str) -> bool:
    """A failure that only says the driver is missing (never an ABI error: undefined symbol)."""
    return module.split(".")[0] in GPU_AT_IMPORT and bool(GPU_ERROR.search(error)) and "undefined symbol" not in error


def import_one(stmt: str, timeout: int) -> tuple[bool, str]:
    try:
        proc = subprocess.run([sys.executable, "-c", stmt], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"import took longer than {timeout}s"
    if proc.returncode == 0:
        return True, ""
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return False, lines[-1] if lines else f"exit status {proc.returncode}"


def run(jobs: int, timeout: int) -> dict[str, Any]:
    modules = all_modules()
    extensions = extension_modules()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {m: pool.submit(import_one, statement(m, extensions), timeout) for m in modules}
        results = {m: f.result() for m, f in futures.items()}
    report: dict[str, dict[str, str]] = {}
    for mod in sorted(modules):
        ok, err = results[mod]
        if ok:
            status = "ok"
        elif needs_gpu(mod, err):
            status = "needs-gpu"
        else:
            status = "failed"
        entry = {"distribution": modules[mod], "status": status}
        if err:
            entry["error"] = err
        if status == "needs-gpu":
            entry["reason"] = GPU_AT_IMPORT[mod.split(".")[0]]
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
