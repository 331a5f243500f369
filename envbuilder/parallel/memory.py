"""Rough per-GPU memory for weights, gradients and Adam states (activations not included).

Bytes per parameter with bf16 mixed precision (NVIDIA/Megatron-LM:docs/source/api-guide/
dist_optimizer.md@core_v0.12.0): bf16 weights 2 + gradients (fp32: 4, NeMo recipes set
grad_reduce_in_fp32; or bf16: 2) + fp32 master weights 4 + Adam m 4 + v 4. The distributed
optimizer shards the 12 bytes of master weights and Adam states over the data-parallel ranks
(DP x CP for dense weights, expert-DP for expert weights): 18 vs 6 + 12/d bytes.
Because activations are left out, the figure is a floor: a layout above it cannot run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from envbuilder.parallel.layout import Layout
from envbuilder.parallel.rules import RuleResult, failed, not_applicable, passed, warned

GIB = 1024**3
WEIGHT_BYTES = 2  # bf16
OPTIMIZER_BYTES = 12  # fp32 master + Adam m + v


@dataclass(frozen=True)
class MemoryEstimate:
    params_total: int
    params_per_gpu: int  # the fullest pipeline stage
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    optimizer_distributed_gib: float
    total_gib: float
    total_distributed_gib: float
    embeddings_included: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _layer_params(lay: Layout) -> tuple[int, int]:
    """(dense, expert) parameters of one transformer layer."""
    h, d = lay.hidden_size, lay.head_dim
    attention = h * d * (lay.num_attention_heads + 2 * lay.query_groups) + lay.num_attention_heads * d * h
    mlp = (3 if lay.gated_linear_unit else 2) * h * lay.ffn
    norms = 2 * h
    if lay.num_experts is None:
        return attention + mlp + norms, 0
    router = h * lay.num_experts
    return attention + norms + router, lay.num_experts * mlp


def estimate_memory(lay: Layout, grad_bytes: int = 4) -> MemoryEstimate:
    dense, expert = _layer_params(lay)
    vocab = lay.vocab_size or 0
    embedding = vocab * lay.hidden_size
    output = 0 if lay.share_embeddings else embedding
    total = lay.num_layers * (dense + expert) + embedding + output + lay.hidden_size

    layers_per_stage = math.ceil(lay.num_layers / lay.pp)
    # PP=1 holds both matrices; with PP>1 the first stage holds the embedding, the last the output
    # layer (a copy of the embedding when shared): either way one vocab x hidden matrix per end stage.
    stage_embedding = (embedding + output) if lay.pp == 1 else embedding
    dense_gpu = (layers_per_stage * dense + stage_embedding) // lay.tp
    expert_gpu = layers_per_stage * expert // (lay.ep * lay.expert_tp)
    per_gpu = dense_gpu + expert_gpu

    dp_dense = (lay.dp or 1) * lay.cp
    expert_model = lay.expert_tp * lay.ep * lay.pp
    dp_expert = max(1, lay.world_size // expert_model)
    weights = per_gpu * WEIGHT_BYTES
    grads = per_gpu * grad_bytes
    optimizer = per_gpu * OPTIMIZER_BYTES
    optimizer_dist = dense_gpu * OPTIMIZER_BYTES / dp_dense + expert_gpu * OPTIMIZER_BYTES / dp_expert
    return MemoryEstimate(
        params_total=total,
        params_per_gpu=per_gpu,
        weights_gib=round(weights / GIB, 2),
        grads_gib=round(grads / GIB, 2),
        optimizer_gib=round(optimizer / GIB, 2),
        optimizer_distributed_gib=round(optimizer_dist / GIB, 2),
        total_gib=round((weights + grads + optimizer) / GIB, 2),
        total_distributed_gib=round((weights + grads + optimizer_dist) / GIB, 2),
        embeddings_included=lay.vocab_size is not None,
    )


def memory_rule(lay: Layout, gpu_memory_gib: float | None, grad_bytes: int = 4) -> RuleResult:
    """Weights + gradients + Adam states per GPU against the GPU's memory."""
    name = "memory"
    est = estimate_memory(lay, grad_bytes)
    figures = (f"~{est.params_total / 1e9:.2f}B params, {est.params_per_gpu / 1e9:.2f}B per GPU: "
               f"{est.total_gib} GiB without / {est.total_distributed_gib} GiB with the distributed optimizer")
    if not est.embeddings_included:
        figures += " (embeddings left out: vocab size unknown)"
    if lay.dp is None:
        return not_applicable(name, f"{figures}; DP undefined (world_size rule failed): the distributed "
                                    "figure assumes DP=1")
    if gpu_memory_gib is None:
        return not_applicable(name, figures + "; GPU memory unknown (pass --gpu or --gpu-memory-gib)")
    where = f"of {gpu_memory_gib:g} GiB, before activations"
    if est.total_distributed_gib > gpu_memory_gib:
        return failed(name, f"does not fit: {figures} {where}",
                      "raise TP/PP (EP for expert weights) or add GPUs so DP shards the optimizer further")
    if est.total_gib > gpu_memory_gib:
        return warned(name, f"fits only with the distributed optimizer: {figures} {where}",
                      "use the distributed optimizer (NeMo recipes: distributed_fused_adam_with_cosine_annealing)")
    return passed(name, f"{figures} {where}")
