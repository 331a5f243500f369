"""Kernel probes: each kernel package against a plain-torch reference, forward and backward.

Tolerances are relative L2 errors ||out - ref|| / ||ref||, with the reference computed in
float32 on the same (upcast) inputs: bf16 operands land between 1e-3 and 1e-2, FP8 near 5e-2.
A package that is absent and not locked reports "not-installed" (never "pass").
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import traceback
from collections.abc import Callable
from typing import Any

from envbuilder.certify.expect import Expectations
from envbuilder.certify.result import FAIL, NOT_INSTALLED, PASS, SKIPPED, CheckResult, TimedChecks, advise, tail

TOL_BF16 = 2e-2
TOL_FP32 = 5e-3
TOL_FP8 = 1.5e-1


def _rel(torch: Any, out: Any, ref: Any) -> float:
    out, ref = out.detach().float(), ref.detach().float()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-12))


def _installed(dists: list[str]) -> bool:
    for d in dists:
        try:
            md.distribution(d)
            return True
        except md.PackageNotFoundError:
            continue
    return False


def _flash_attn(torch: Any) -> dict[str, float]:
    from flash_attn import flash_attn_func

    F = torch.nn.functional
    b, s, h, d = 2, 512, 8, 64
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q32.transpose(1, 2), k32.transpose(1, 2), v32.transpose(1, 2),
                                         is_causal=True).transpose(1, 2)
    g = torch.randn_like(ref)
    out.backward(g.to(out.dtype))
    ref.backward(g)
    return {"out": _rel(torch, out, ref), "dq": _rel(torch, q.grad, q32.grad),
            "dk": _rel(torch, k.grad, k32.grad), "dv": _rel(torch, v.grad, v32.grad)}


def _te_linear_layernorm(torch: Any) -> dict[str, float]:
    import transformer_engine.pytorch as te

    F = torch.nn.functional
    n = 1024
    lin = te.Linear(n, n, bias=True, params_dtype=torch.bfloat16).cuda()
    x = torch.randn(256, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = lin(x)
    x32, w32 = x.detach().float().requires_grad_(), lin.weight.detach().float().requires_grad_()
    ref = F.linear(x32, w32, lin.bias.detach().float())
    g = torch.randn_like(ref)
    y.backward(g.to(y.dtype))
    ref.backward(g)
    errs = {"linear_out": _rel(torch, y, ref), "linear_dx": _rel(torch, x.grad, x32.grad),
            "linear_dw": _rel(torch, lin.weight.grad, w32.grad)}
    ln = te.LayerNorm(n, eps=1e-5, params_dtype=torch.bfloat16).cuda()
    x2 = torch.randn(256, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y2 = ln(x2)
    x2r = x2.detach().float().requires_grad_()
    ref2 = F.layer_norm(x2r, (n,), ln.weight.detach().float(), ln.bias.detach().float(), 1e-5)
    g2 = torch.randn_like(ref2)
    y2.backward(g2.to(y2.dtype))
    ref2.backward(g2)
    errs.update({"layernorm_out": _rel(torch, y2, ref2), "layernorm_dx": _rel(torch, x2.grad, x2r.grad)})
    return errs


def _te_fp8(torch: Any) -> dict[str, float]:
    import transformer_engine.pytorch as te

    F = torch.nn.functional
    n = 1024
    lin = te.Linear(n, n, bias=False, params_dtype=torch.bfloat16).cuda()
    x = torch.randn(256, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    autocast = getattr(te, "fp8_autocast", None) or te.autocast
    with autocast(enabled=True):
        y = lin(x)
    x32 = x.detach().float().requires_grad_()
    ref = F.linear(x32, lin.weight.detach().float())
    g = torch.randn_like(ref)
    y.backward(g.to(y.dtype))
    ref.backward(g)
    return {"fp8_out": _rel(torch, y, ref), "fp8_dx": _rel(torch, x.grad, x32.grad)}


def _selective_scan(torch: Any) -> dict[str, float]:
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

    b, d, seq, n = 2, 64, 256, 16
    dev, f32 = "cuda", torch.float32

    def mk(*shape: int, scale: float = 1.0, neg: bool = False) -> Any:
        t = torch.randn(*shape, device=dev, dtype=f32) * scale
        return (-t.abs() if neg else t).requires_grad_()

    u, delta, z = mk(b, d, seq), mk(b, d, seq, scale=0.5), mk(b, d, seq)
    A, Bm, C, Dv, bias = mk(d, n, neg=True), mk(b, n, seq), mk(b, n, seq), mk(d), mk(d, scale=0.1)
    args = (u, delta, A, Bm, C, Dv)
    out = selective_scan_fn(*args, z=z, delta_bias=bias, delta_softplus=True)
    refs = [t.detach().clone().requires_grad_() for t in (*args, z, bias)]
    ref = selective_scan_ref(*refs[:6], z=refs[6], delta_bias=refs[7], delta_softplus=True)
    g = torch.randn_like(ref)
    out.backward(g)
    ref.backward(g)
    return {"out": _rel(torch, out, ref), "du": _rel(torch, u.grad, refs[0].grad),
            "ddelta": _rel(torch, delta.grad, refs[1].grad), "dA": _rel(torch, A.grad, refs[2].grad)}


def _causal_conv1d(torch: Any) -> dict[str, float]:
    from causal_conv1d import causal_conv1d_fn
    from causal_conv1d.causal_conv1d_interface import causal_conv1d_ref

    b, d, seq, w = 2, 256, 512, 4
    x = torch.randn(b, d, seq, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    wt = torch.randn(d, w, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    bias = torch.randn(d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = causal_conv1d_fn(x, wt, bias, activation="silu")
    xr, wr, br = (t.detach().float().requires_grad_() for t in (x, wt, bias))
    ref = causal_conv1d_ref(xr, wr, br, activation="silu")
    g = torch.randn_like(ref)
    out.backward(g.to(out.dtype))
    ref.backward(g)
    return {"out": _rel(torch, out, ref), "dx": _rel(torch, x.grad, xr.grad), "dw": _rel(torch, wt.grad, wr.grad)}


# name, distributions that provide it, module to import, probe, tolerance, min sm (or None)
PROBES: list[tuple[str, list[str], str, Callable[[Any], dict[str, float]], float, tuple[int, int] | None]] = [
    ("kernel:flash-attn", ["flash-attn", "flash_attn"], "flash_attn", _flash_attn, TOL_BF16, None),
    ("kernel:transformer-engine", ["transformer-engine", "transformer-engine-torch", "transformer_engine"],
     "transformer_engine.pytorch", _te_linear_layernorm, TOL_BF16, None),
    ("kernel:transformer-engine-fp8", ["transformer-engine", "transformer-engine-torch", "transformer_engine"],
     "transformer_engine.pytorch", _te_fp8, TOL_FP8, (8, 9)),
    ("kernel:mamba-ssm", ["mamba-ssm", "mamba_ssm"], "mamba_ssm", _selective_scan, TOL_FP32, None),
    ("kernel:causal-conv1d", ["causal-conv1d", "causal_conv1d"], "causal_conv1d", _causal_conv1d, TOL_BF16, None),
]


def run_kernel_probes(exp: Expectations) -> list[CheckResult]:
    import torch

    checks = TimedChecks()
    cap = torch.cuda.get_device_capability(0) if torch.cuda.is_available() else (0, 0)
    for name, dists, module, probe, tol, min_sm in PROBES:
        thr = f"relative L2 error <= {tol:g} (fwd+bwd, vs float32 torch reference)"
        locked = any(exp.is_locked(d) for d in dists)
        if not _installed(dists):
            status = FAIL if locked else NOT_INSTALLED
            checks.append(CheckResult(name, 1, status, None, thr,
                                advice="locked but not installed; fix: rebuild the environment" if locked else None,
                                detail=None if locked else f"{dists[0]} is not installed"))
            continue
        if min_sm and cap < min_sm:
            checks.append(CheckResult(name, 1, SKIPPED, None, thr, detail=f"needs sm >= {min_sm[0]}.{min_sm[1]}"))
            continue
        try:
            importlib.import_module(module)
            torch.manual_seed(0)
            errs = probe(torch)
            torch.cuda.synchronize()
        except Exception as exc:
            log = "".join(traceback.format_exception_only(type(exc), exc))
            checks.append(CheckResult(name, 1, FAIL, None, thr, advice=advise(log) or "the kernel raised; see detail",
                                detail=tail(log)))
            continue
        measured = {k: round(v, 6) for k, v in errs.items()}
        ok = all(v <= tol for v in errs.values())
        checks.append(CheckResult(name, 1, PASS if ok else FAIL, measured, thr,
                            advice=None if ok else "kernel output differs from the torch reference; fix: rebuild "
                                                   "the kernel package against the locked torch and CUDA"))
    return checks
