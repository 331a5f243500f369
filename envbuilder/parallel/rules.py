"""The layout rules Megatron-Core / NeMo / Transformer Engine enforce at start-up, checked up front.

Each rule is a small pure function of a Layout returning a RuleResult. A "fail" means the job
cannot start (or cannot train); a "warn" means it starts but not as intended; "n/a" means the
rule does not apply to this layout. Sources are the Megatron-Core v0.12 (NeMo v2.3.0) checks:
  parallel_state   = NVIDIA/Megatron-LM:megatron/core/parallel_state.py@core_v0.12.0
  config           = NVIDIA/Megatron-LM:megatron/core/transformer/transformer_config.py@core_v0.12.0
  arguments        = NVIDIA/Megatron-LM:megatron/training/arguments.py@core_v0.12.0
  schedules        = NVIDIA/Megatron-LM:megatron/core/pipeline_parallel/schedules.py@core_v0.12.0
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from envbuilder.parallel.attention import FLASH, FUSED, UNFUSED, disabled_backends, nearest_hidden_sizes
from envbuilder.parallel.layout import Layout

Level = Literal["pass", "warn", "fail", "n/a"]


@dataclass(frozen=True)
class RuleResult:
    name: str
    ok: bool  # False only for "fail": the layout cannot run
    message: str
    fix: str | None = None
    level: Level = "pass"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def passed(name: str, message: str) -> RuleResult:
    return RuleResult(name, True, message, None, "pass")


def warned(name: str, message: str, fix: str) -> RuleResult:
    return RuleResult(name, True, message, fix, "warn")


def failed(name: str, message: str, fix: str) -> RuleResult:
    return RuleResult(name, False, message, fix, "fail")


def not_applicable(name: str, message: str) -> RuleResult:
    return RuleResult(name, True, message, None, "n/a")


def _divisors(n: int, limit: int | None = None) -> list[int]:
    """Divisors of n (up to limit), ascending; O(sqrt n) so a huge GBS stays fast."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    found = sorted(set(small + [n // d for d in small]))
    return [d for d in found if limit is None or d <= limit]


def _fmt(values: list[int], most: int = 6) -> str:
    shown = ", ".join(str(v) for v in values[:most])
    return shown + (", ..." if len(values) > most else "")


def _nearest_multiples(value: int, step: int) -> list[int]:
    below = (value // step) * step
    return sorted({v for v in (below, below + step) if v > 0})


# --- cluster shape -------------------------------------------------------------------------------


def world_size(lay: Layout) -> RuleResult:
    """parallel_state: world_size must be divisible by TP x PP x CP (the rest is DP)."""
    name = "world_size"
    mp = lay.model_parallel
    if lay.dp is not None:
        return passed(name, f"{lay.world_size} GPUs = TP {lay.tp} x PP {lay.pp} x CP {lay.cp} x DP {lay.dp}")
    nodes = next(n for n in range(lay.nodes, lay.nodes + mp + 1) if (n * lay.gpus_per_node) % mp == 0)
    return failed(
        name,
        f"{lay.world_size} GPUs ({lay.nodes} node(s) x {lay.gpus_per_node}) are not divisible by "
        f"TP x PP x CP = {lay.tp} x {lay.pp} x {lay.cp} = {mp}",
        f"use {nodes} nodes ({nodes * lay.gpus_per_node} GPUs), or lower TP/PP/CP so their product divides "
        f"{lay.world_size}",
    )


def tp_within_node(lay: Layout) -> RuleResult:
    """TP all-reduces every layer; across nodes they run over the slower inter-node network."""
    name = "tp_within_node"
    if lay.tp == 1:
        return not_applicable(name, "TP=1")
    if lay.tp <= lay.gpus_per_node and lay.gpus_per_node % lay.tp == 0:
        return passed(name, f"TP {lay.tp} groups stay inside a {lay.gpus_per_node}-GPU node")
    return warned(
        name,
        f"TP {lay.tp} groups span nodes ({lay.gpus_per_node} GPUs per node): tensor-parallel all-reduces "
        "cross the inter-node network (slow)",
        f"keep TP a divisor of {lay.gpus_per_node} ({_fmt(_divisors(lay.gpus_per_node))}) and use PP/DP across nodes",
    )


# --- attention heads -----------------------------------------------------------------------------


def heads_divisible_by_tp(lay: Layout) -> RuleResult:
    """config: num_attention_heads must be a multiple of tensor_model_parallel_size."""
    name = "heads_tp"
    if lay.num_attention_heads % lay.tp == 0:
        per_gpu = lay.num_attention_heads // lay.tp
        return passed(name, f"{lay.num_attention_heads} heads / TP {lay.tp} = {per_gpu} per GPU")
    return failed(
        name,
        f"{lay.num_attention_heads} attention heads are not divisible by TP {lay.tp}",
        f"use TP in {{{_fmt(_divisors(lay.num_attention_heads, lay.world_size))}}}",
    )


def query_groups(lay: Layout) -> RuleResult:
    """config: num_query_groups must be a multiple of TP; heads must be a multiple of groups (GQA)."""
    name = "query_groups_tp"
    g = lay.query_groups
    if lay.num_attention_heads % g:
        return failed(
            name,
            f"{lay.num_attention_heads} heads are not divisible by {g} query groups",
            f"use num_query_groups in {{{_fmt(_divisors(lay.num_attention_heads))}}}",
        )
    if g % lay.tp:
        ok_tp = [d for d in _divisors(g, lay.world_size) if lay.num_attention_heads % d == 0]
        return failed(
            name,
            f"{g} query groups are not divisible by TP {lay.tp}",
            f"use TP in {{{_fmt(ok_tp)}}} or more query groups",
        )
    return passed(name, f"{g} query groups / TP {lay.tp} = {g // lay.tp} per GPU")


def head_dim(lay: Layout, sm: str | None = None) -> RuleResult:
    """TE attention backends: see envbuilder.parallel.attention for the limits and their sources."""
    name = "head_dim"
    d = lay.head_dim
    exact = lay.hidden_size / lay.num_attention_heads
    shape = (
        f"kv_channels {d}" if lay.kv_channels is not None
        else f"hidden {lay.hidden_size} / {lay.num_attention_heads} heads = head_dim "
        + (f"{d}" if exact == d else f"{exact:.2f} (Megatron-Core floors it to {d})")
    )
    disabled = disabled_backends(d, sm, lay.cp)
    listing = "; ".join(f"{b}: {why}" for b, why in disabled.items())
    if lay.kv_channels is None:
        sizes = nearest_hidden_sizes(lay.hidden_size, lay.num_attention_heads, lay.tp)
        step, top = lay.num_attention_heads * 8, lay.num_attention_heads * 128
        hidden_fix = (f"use hidden_size {' or '.join(map(str, sizes))} (any multiple of {step} up to {top} "
                      f"keeps every backend for {lay.num_attention_heads} heads)")
    else:
        hidden_fix = "use kv_channels a multiple of 8, at most 128"
    if d < 1:
        return failed(name, f"{shape}: no head dimension left", hidden_fix)
    left = [b for b in (FLASH, FUSED, UNFUSED) if b not in disabled]
    detail = f" ({listing})" if disabled else ""
    if not left:
        return failed(name, f"{shape}: every attention backend is disabled ({listing})",
                      hidden_fix + (", or CP=1 (slow unfused attention)" if lay.cp > 1 else ""))
    if left == [UNFUSED]:
        return warned(name, f"{shape}: only {UNFUSED} is left ({listing}); slow, memory grows with seq^2",
                      hidden_fix)
    if exact != d:
        return warned(name, f"{shape}: {', '.join(left)} available{detail}; Megatron-LM's own arguments.py "
                            "rejects hidden % heads != 0", hidden_fix)
    # FlashAttention or FusedAttention remains: the layout trains at full speed.
    return passed(name, f"{shape}: {', '.join(left)} available{detail}")


def ffn_divisible_by_tp(lay: Layout) -> RuleResult:
    """ColumnParallelLinear splits the MLP's ffn_hidden_size over TP (megatron/core/tensor_parallel/layers.py)."""
    name = "ffn_tp"
    if lay.tp == 1:
        return not_applicable(name, "TP=1")
    if lay.ffn % lay.tp == 0:
        return passed(name, f"ffn_hidden_size {lay.ffn} / TP {lay.tp} = {lay.ffn // lay.tp}")
    return failed(name, f"ffn_hidden_size {lay.ffn} is not divisible by TP {lay.tp}",
                  f"use ffn_hidden_size {' or '.join(map(str, _nearest_multiples(lay.ffn, lay.tp)))}")


# --- pipeline ------------------------------------------------------------------------------------


def layers_divisible_by_pp(lay: Layout) -> RuleResult:
    """arguments: 'number of layers of the model must be divisible pipeline model parallel size'."""
    name = "layers_pp"
    if lay.num_layers % lay.pp == 0:
        return passed(name, f"{lay.num_layers} layers / PP {lay.pp} = {lay.num_layers // lay.pp} per stage")
    return failed(
        name,
        f"{lay.num_layers} layer(s) are not divisible by PP {lay.pp}",
        f"use PP in {{{_fmt(_divisors(lay.num_layers, lay.world_size))}}} or num_layers "
        f"{' or '.join(map(str, _nearest_multiples(lay.num_layers, lay.pp)))}",
    )


def layers_divisible_by_vpp(lay: Layout) -> RuleResult:
    """parallel_state: interleaving needs PP > 1; NeMo GPTConfig: (num_layers // PP) % VPP == 0."""
    name = "layers_vpp"
    if lay.vpp is None:
        return not_applicable(name, "no virtual pipeline (VPP not set)")
    if lay.pp < 2:
        return failed(name, f"VPP {lay.vpp} needs PP > 1 (interleaved schedule)", "set PP >= 2 or drop VPP")
    if lay.num_layers % (lay.pp * lay.vpp) == 0:
        return passed(name, f"{lay.num_layers} layers / (PP {lay.pp} x VPP {lay.vpp}) = "
                            f"{lay.num_layers // (lay.pp * lay.vpp)} per model chunk")
    per_stage = lay.num_layers // lay.pp
    return failed(
        name,
        f"{lay.num_layers} layers are not divisible by PP x VPP = {lay.pp * lay.vpp}",
        f"use VPP in {{{_fmt([v for v in _divisors(per_stage) if v > 1]) or 'none'}}} or num_layers "
        f"{' or '.join(map(str, _nearest_multiples(lay.num_layers, lay.pp * lay.vpp)))}",
    )


# --- batch ---------------------------------------------------------------------------------------


def grad_accumulation(lay: Layout) -> int | None:
    """Micro-batches per step (GBS / (MBS x DP)), None when it is not a whole number >= 1."""
    if lay.dp is None or lay.gbs % (lay.mbs * lay.dp) or lay.gbs < lay.mbs * lay.dp:
        return None
    return lay.gbs // (lay.mbs * lay.dp)


def batch_divisible(lay: Layout) -> RuleResult:
    """GBS = MBS x DP x gradient-accumulation steps (Megatron's num_microbatches calculator)."""
    name = "batch"
    if lay.dp is None:
        return not_applicable(name, "DP undefined (world_size rule failed)")
    step = lay.mbs * lay.dp
    ga = grad_accumulation(lay)
    if ga is not None:
        return passed(name, f"GBS {lay.gbs} = MBS {lay.mbs} x DP {lay.dp} x {ga} gradient-accumulation step(s)")
    mbs_ok = [m for m in _divisors(lay.gbs // lay.dp) if lay.gbs % lay.dp == 0]
    fix = f"use GBS {' or '.join(map(str, _nearest_multiples(lay.gbs, step)))}"
    if mbs_ok:
        fix += f", or MBS in {{{_fmt(mbs_ok)}}}"
    return failed(name, f"GBS {lay.gbs} is not a multiple of MBS {lay.mbs} x DP {lay.dp} = {step}", fix)


def interleaved_microbatches(lay: Layout) -> RuleResult:
    """schedules: with VPP the micro-batches come in groups of PP (microbatch_group_size_per_vp_stage
    defaults to PP, model_parallel_config.py), so GA must be a multiple of PP."""
    name = "vpp_microbatches"
    if lay.vpp is None or lay.pp < 2:
        return not_applicable(name, "no interleaved schedule")
    ga = grad_accumulation(lay)
    if ga is None:
        return not_applicable(name, "gradient accumulation undefined (batch rule failed)")
    if ga % lay.pp == 0:
        return passed(name, f"{ga} micro-batches form groups of PP {lay.pp}")
    assert lay.dp is not None
    good = [m * lay.pp * lay.mbs * lay.dp for m in (max(1, ga // lay.pp), ga // lay.pp + 1)]
    return failed(
        name,
        f"interleaved schedule: {ga} micro-batch(es) per step is not a multiple of PP {lay.pp}",
        f"use GBS {' or '.join(map(str, sorted(set(good))))}",
    )


# --- sequence ------------------------------------------------------------------------------------


# The exact text megatron-core raises, so a user searching for it finds this rule.
SP_WITHOUT_TP = "Cannot use sequence parallelism without tensor parallelism"


def sp_needs_tp(lay: Layout) -> RuleResult:
    """ModelParallelConfig.__post_init__ raises ValueError(SP_WITHOUT_TP) when sequence_parallel is
    set with tensor_model_parallel_size <= 1 (NVIDIA/Megatron-LM:megatron/core/model_parallel_config.py
    @core_v0.15.0 through @core_v0.19.0; before 0.15 only megatron/training disabled SP with a warning).
    Every row from NeMo 2.6 / 25.11 on runs megatron-core >= 0.15, so this fails like the library does."""
    name = "sp_tp"
    if not lay.sp:
        return not_applicable(name, "SP off")
    if lay.tp > 1:
        return passed(name, f"SP with TP {lay.tp}")
    return failed(name, f"{SP_WITHOUT_TP} (--sp with TP=1: megatron-core >= 0.15 raises this in "
                        "ModelParallelConfig.__post_init__)", "drop --sp, or use --tp 2 or more")


def sp_sequence(lay: Layout) -> RuleResult:
    """SP scatters each CP rank's sequence over TP (tensor_parallel/mappings.py: 'divisible by tensor
    parallel size')."""
    name = "sp_seq"
    if not lay.sp or lay.tp == 1:
        return not_applicable(name, "SP off or TP=1")
    step = lay.tp * lay.cp
    if lay.seq_length % step == 0:
        return passed(name, f"seq {lay.seq_length} splits over CP {lay.cp} x TP {lay.tp}")
    return failed(name, f"seq_length {lay.seq_length} is not divisible by CP x TP = {step} (sequence parallel)",
                  f"use seq_length {' or '.join(map(str, _nearest_multiples(lay.seq_length, step)))}")


def cp_sequence(lay: Layout) -> RuleResult:
    """arguments: 'seq-length should be a multiple of 2 * context-parallel-size' (load-balanced CP)."""
    name = "cp_seq"
    if lay.cp == 1:
        return not_applicable(name, "CP=1")
    step = 2 * lay.cp
    if lay.seq_length % step == 0:
        return passed(name, f"seq {lay.seq_length} splits into 2 x CP = {step} chunks")
    return failed(name, f"seq_length {lay.seq_length} is not divisible by 2 x CP = {step}",
                  f"use seq_length {' or '.join(map(str, _nearest_multiples(lay.seq_length, step)))}")


# --- mixture of experts --------------------------------------------------------------------------


def experts_divisible_by_ep(lay: Layout) -> RuleResult:
    """config: EP > 1 needs num_moe_experts; moe_layer.py: num_moe_experts % EP == 0."""
    name = "experts_ep"
    if lay.num_experts is None:
        if lay.ep > 1:
            return failed(name, f"EP {lay.ep} set but the model has no experts", "give --num-experts or set EP=1")
        return not_applicable(name, "dense model")
    if lay.num_experts % lay.ep == 0:
        return passed(name, f"{lay.num_experts} experts / EP {lay.ep} = {lay.num_experts // lay.ep} per GPU")
    return failed(name, f"{lay.num_experts} experts are not divisible by EP {lay.ep}",
                  f"use EP in {{{_fmt(_divisors(lay.num_experts, lay.world_size))}}}")


def expert_world(lay: Layout) -> RuleResult:
    """parallel_state: world_size must be divisible by ETP x EP x PP (ETP defaults to TP)."""
    name = "expert_world"
    if lay.num_experts is None and lay.ep == 1 and lay.etp is None:
        return not_applicable(name, "dense model")
    size = lay.expert_tp * lay.ep * lay.pp
    if lay.world_size % size == 0:
        return passed(name, f"{lay.world_size} GPUs = ETP {lay.expert_tp} x EP {lay.ep} x PP {lay.pp} x "
                            f"expert-DP {lay.world_size // size}")
    return failed(
        name,
        f"{lay.world_size} GPUs are not divisible by ETP x EP x PP = {lay.expert_tp} x {lay.ep} x {lay.pp} = {size}",
        "choose EP and ETP so that ETP x EP x PP divides the GPU count",
    )


def moe_sequence_parallel(lay: Layout) -> RuleResult:
    """megatron/core/transformer/moe/README.md@core_v0.12.0: with expert parallelism and tensor
    parallelism, sequence parallelism must be enabled."""
    name = "moe_sp"
    if lay.num_experts is None or lay.ep == 1 or lay.tp == 1:
        return not_applicable(name, "needs MoE with EP > 1 and TP > 1")
    if lay.sp:
        return passed(name, "MoE with EP and TP uses SP")
    return failed(name, f"MoE with EP {lay.ep} and TP {lay.tp} needs sequence parallelism", "add --sp")
