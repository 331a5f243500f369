"""GPU facts, driver and architecture checks, and the bf16 GEMM throughput probe."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from envbuilder.archlist import ArchList
from envbuilder.canonical import version_tuple
from envbuilder.certify.certificate import GpuFacts, GpuInfo
from envbuilder.certify.expect import Expectations
from envbuilder.certify.fatbin import fatbin_archs, runs_on
from envbuilder.certify.result import FAIL, PASS, SKIPPED, CheckResult
from envbuilder.errors import InvalidOptionError

#: GEMM shapes (m, n, k) tried for the measured peak; the probe shape is the first
GEMM_SHAPES = [(8192, 8192, 8192), (16384, 8192, 8192), (8192, 16384, 8192), (8192, 8192, 16384),
               (16384, 16384, 8192)]
#: the probe shape must reach this fraction of the best shape (the card's measured peak)
GEMM_MIN_OF_PEAK = 0.90
#: and the measured peak this fraction of the datasheet dense bf16 rate, when it is known
GEMM_MIN_OF_DATASHEET = 0.60


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.split()
            return out[0] if out else None
        except Exception:
            return None
    return None


def gpu_facts() -> GpuFacts:
    """The driver, and every CUDA device torch sees (none when torch sees none: `error` says why)."""
    driver = _driver_version()
    try:
        import torch

        if not torch.cuda.is_available():
            return GpuFacts(driver)
        gpus = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append(GpuInfo(p.name, f"{p.major}.{p.minor}", round(p.total_memory / 2**30, 1)))
        return GpuFacts(driver, tuple(gpus))
    except Exception as exc:
        return GpuFacts(driver, error=str(exc)[:200])


def check_driver(exp: Expectations, facts: GpuFacts) -> CheckResult:
    drv, need = facts.driver, exp.target.min_driver
    thr = f">= {need}" if need else None
    if not drv:
        return CheckResult("driver", 1, FAIL, None, thr, advice="no NVIDIA driver answered (NVML/nvidia-smi); fix: "
                     "run on a GPU host, with --gpus all (docker) or --nv (apptainer)")
    if not need or need == "unknown":
        return CheckResult("driver", 1, SKIPPED, drv, thr, detail="the lock states no minimum driver")
    if version_tuple(drv) >= version_tuple(str(need)):
        return CheckResult("driver", 1, PASS, drv, thr)
    return CheckResult("driver", 1, FAIL, drv, thr, advice=f"the driver is older than the lock's CUDA needs; fix: "
                 f"upgrade the driver to >= {need}, or lock with --driver {drv} (older CUDA)")


def _arch_list(exp: Expectations) -> tuple[set[str], str]:
    """The archs the lock asked for (every lock states a list: --arch-list, or the default for its CUDA and host),
    else, for an environment certified without a lock, the archs torch was compiled for."""
    if exp.target.arch_list:
        try:
            return set(ArchList.parse(exp.target.arch_list, "the lock's arch list").archs), "lock arch list"
        except InvalidOptionError as exc:
            return set(), exc.cause
    try:
        import torch

        return set(ArchList.parse(torch.cuda.get_arch_list()).archs), "torch's compiled arch list (no lock given)"
    except Exception:
        return set(), "no arch list: no lock given and torch lists none"


def check_arch(exp: Expectations, facts: GpuFacts) -> CheckResult:
    sms = facts.sms
    have, source = _arch_list(exp)
    missing = [s for s in sms if s not in have]
    wheels = installed_kernel_archs()
    lacking = {f"{dist}/{so}": s for dist, sos in wheels.items() for so, s in sos.items()
               if any(not runs_on(s, int(sm.replace(".", ""))) for sm in sms)}
    measured = {"gpu_sm": sms, "arch_list": sorted(have), "source": source,
                "kernel_packages": {d: {so: sorted(f"sm_{a}" for a in s["sass"]) + sorted(f"compute_{a}"
                                                                                     for a in s["ptx"])
                                        for so, s in sos.items()} for d, sos in wheels.items()}}
    thr = "GPU sm in the arch list and in every installed kernel package's shared objects"
    if not sms:
        return CheckResult("arch", 1, FAIL, measured, thr, advice="no CUDA device visible")
    if missing:
        return CheckResult("arch", 1, FAIL, measured, thr,
                     advice=f"kernels are not compiled for sm {', '.join(missing)} ('no kernel image'); "
                            f"fix: add {', '.join(missing)} to --arch-list and rebuild")
    if lacking:
        return CheckResult("arch", 1, FAIL, measured, thr,
                     advice=f"{', '.join(sorted(lacking))} holds no code for sm {', '.join(sms)} ('no kernel "
                            f"image'); fix: rebuild that package with --arch-list {';'.join(sms)}")
    return CheckResult("arch", 1, PASS, measured, thr)


#: distributions whose shared objects carry CUDA kernels (the kernel probes' packages and the TE core)
KERNEL_DISTS = ("flash-attn", "transformer-engine-torch", "transformer-engine-cu12", "transformer-engine-cu13",
                "transformer-engine", "mamba-ssm", "causal-conv1d")


def installed_kernel_archs(dists: tuple[str, ...] = KERNEL_DISTS) -> dict[str, dict[str, dict[str, set[int]]]]:
    """{dist: {relative .so path: {'sass': {...}, 'ptx': {...}}}} for .so files that hold CUDA code.

    Shared objects without a fat binary (pure C++ bindings) are left out: they run on any GPU.
    """
    import importlib.metadata as md

    from envbuilder.certify.expect import normalize

    out: dict[str, dict[str, dict[str, set[int]]]] = {}
    wanted = {normalize(d) for d in dists}
    for dist in md.distributions():
        name = normalize(dist.metadata["Name"] or "")
        if name not in wanted or name in out:
            continue
        sos: dict[str, dict[str, set[int]]] = {}
        for f in dist.files or []:
            if ".so" not in f.name:
                continue
            archs = fatbin_archs(Path(str(dist.locate_file(f))))
            if archs["sass"] or archs["ptx"]:
                sos[str(f)] = archs
        if sos:
            out[name] = sos
    return out


def _time_gemm(torch: Any, m: int, n: int, k: int, iters: int = 20) -> float:
    """TFLOP/s of one bf16 m x k @ k x n product: median of `iters` event-timed runs after warm-up."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.matmul(a, b)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    med = times[len(times) // 2]
    del a, b
    return 2 * m * n * k / med / 1e12


def _warm_up(torch: Any, seconds: float = 1.5) -> None:
    """Run GEMMs until the SM clock has ramped from idle (an idle H100 sits near 375 MHz)."""
    import time

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            torch.matmul(a, a)
        torch.cuda.synchronize()
    del a


def check_gemm(exp: Expectations, facts: GpuFacts) -> CheckResult:
    import torch

    _warm_up(torch)
    per_shape = {f"{m}x{n}x{k}": round(_time_gemm(torch, m, n, k), 1) for m, n, k in GEMM_SHAPES}
    torch.cuda.empty_cache()
    probe = per_shape[f"{GEMM_SHAPES[0][0]}x{GEMM_SHAPES[0][1]}x{GEMM_SHAPES[0][2]}"]
    peak = max(per_shape.values())
    name = facts.gpus[0].name if facts.gpus else ""
    sheet = exp.datasheet_tflops(name)
    measured: dict[str, Any] = {"probe_tflops": probe, "measured_peak_tflops": peak,
                                "pct_of_measured_peak": round(100 * probe / peak, 1), "shapes": per_shape,
                                "datasheet_tflops": sheet,
                                "pct_of_datasheet": round(100 * peak / sheet, 1) if sheet else None}
    thr = {"probe_vs_measured_peak": f">= {GEMM_MIN_OF_PEAK:.0%}",
           "peak_vs_datasheet": f">= {GEMM_MIN_OF_DATASHEET:.0%}" if sheet else "datasheet unknown"}
    slow = probe < GEMM_MIN_OF_PEAK * peak or (sheet is not None and peak < GEMM_MIN_OF_DATASHEET * sheet)
    if slow:
        return CheckResult("gemm-bf16", 1, FAIL, measured, thr,
                     advice="bf16 GEMMs run slowly: check GPU clocks/throttling (nvidia-smi -q -d PERFORMANCE), "
                            "other jobs on the GPU, and that torch uses the locked cuBLAS")
    return CheckResult("gemm-bf16", 1, PASS, measured, thr)
