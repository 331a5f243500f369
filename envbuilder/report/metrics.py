"""Performance numbers a certificate measured: tokens/s per training check, GEMM TFLOP/s, NCCL busbw.

Keys name the check they come from, so a 2-GPU NCCL number is never compared with a 4-GPU one.
"""

from __future__ import annotations

from envbuilder.certify.certificate import Certificate
from envbuilder.safetext import finite

#: metric key prefix -> (title, unit)
KINDS = {"tokens_per_s": ("training throughput", "tokens/s"), "gemm_tflops": ("GEMM", "TFLOP/s"),
         "nccl_busbw_gbps": ("NCCL all-reduce bus bandwidth", "GB/s")}


def metrics_of(cert: Certificate) -> dict[str, float]:
    """{'tokens_per_s:pretrain:torch-gpt-1gpu': 630469.0, 'gemm_tflops:gemm-bf16': 695.2, ...} from passed checks."""
    out: dict[str, float] = {}
    for c in cert.checks:
        m = c.measured
        if c.status != "pass" or not isinstance(m, dict):
            continue
        name = c.name
        found = {"tokens_per_s": m.get("tokens_per_s"),
                 "gemm_tflops": m.get("probe_tflops") if name.startswith("gemm") else None,
                 "nccl_busbw_gbps": m.get("best_busbw_gbps") if name.startswith("nccl") else None}
        for kind, value in found.items():
            number = finite(value)  # a number only if it is one: NaN compares false and would hide a regression
            if number is not None:
                out[f"{kind}:{name}"] = number
    return dict(sorted(out.items()))


def describe(key: str) -> str:
    kind, _, check = key.partition(":")
    title, unit = KINDS.get(kind, (kind, ""))
    return f"{title} ({unit}) — {check}"
