"""Parallel layouts certified per GPU count, and the layout rules they must satisfy.

The rules mirror `envbuilder check-parallel` (envbuilder/parallel); they are restated here
because this module runs inside the target environment, where only the standard library
and torch can be relied on. Dimensions are chosen so no variant fails for a config reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Model:
    layers: int = 4
    hidden: int = 512
    heads: int = 8          # head_dim 64: % 8 == 0
    seq: int = 1024
    vocab: int = 4096
    mbs: int = 4


@dataclass(frozen=True)
class Variant:
    name: str
    tp: int = 1
    pp: int = 1
    vpp: int = 0
    cp: int = 1
    sp: bool = False
    dist_opt: bool = False

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def needs_te(self) -> bool:
        return self.cp > 1  # Megatron's local DotProductAttention refuses context parallelism

    def microbatches(self) -> int:
        return 4 if self.pp > 1 else 1

    def args(self, model: Model) -> list[str]:
        out = [f"--tp={self.tp}", f"--pp={self.pp}", f"--cp={self.cp}", f"--layers={model.layers}",
               f"--hidden={model.hidden}", f"--heads={model.heads}", f"--seq={model.seq}",
               f"--vocab={model.vocab}", f"--mbs={model.mbs}", f"--nmb={self.microbatches()}"]
        if self.vpp:
            # Megatron-LM's default for the interleaved schedule. With batched p2p instead, megatron-core
            # 0.19.2 on 4xH200 gave grad norm ~2.7e4 at step 1 and a flat loss (BENCHMARKS.md, Certify).
            out += [f"--vpp={self.vpp}", "--overlap-p2p"]
        if self.sp:
            out.append("--sp")
        if self.dist_opt:
            out.append("--dist-opt")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TWO_GPU = [
    Variant("dp2-distopt", dist_opt=True),
    Variant("tp2-sp", tp=2, sp=True),
    Variant("pp2", pp=2),
    Variant("cp2", cp=2),
]
FOUR_GPU = [
    Variant("tp2xpp2", tp=2, pp=2),
    Variant("pp2xvpp2", pp=2, vpp=2),
    Variant("tp2xcp2", tp=2, cp=2),
]


def variants_for(gpus: int) -> tuple[int, list[Variant]]:
    """(processes to start, variants). 2-3 GPUs: the 2-GPU set; 4+: the 4-GPU set, DP fills the rest."""
    if gpus >= 4:
        return 4 * (gpus // 4), FOUR_GPU
    if gpus >= 2:
        return 2, TWO_GPU
    return 0, []


def layout_problems(v: Variant, m: Model, world: int) -> list[str]:
    """The check-parallel rules that apply to a dense GPT; empty when the layout can run."""
    p: list[str] = []
    if world % v.model_parallel:
        p.append(f"world {world} not divisible by TP*PP*CP = {v.model_parallel}")
    dp = max(1, world // v.model_parallel)
    if m.heads % v.tp:
        p.append(f"heads {m.heads} not divisible by TP {v.tp}")
    if (m.hidden // m.heads) % 8:
        p.append(f"head_dim {m.hidden // m.heads} not a multiple of 8")
    if (4 * m.hidden) % v.tp or m.vocab % v.tp:
        p.append("ffn or vocab not divisible by TP")
    if m.layers % (v.pp * max(1, v.vpp)):
        p.append(f"layers {m.layers} not divisible by PP*VPP = {v.pp * max(1, v.vpp)}")
    if v.vpp and v.microbatches() % v.pp:
        p.append("interleaved schedule: micro-batches must be a multiple of PP")
    if v.sp and v.tp < 2:
        p.append("sequence parallelism needs TP >= 2")
    if v.cp > 1 and m.seq % (2 * v.cp):
        p.append(f"seq {m.seq} not divisible by 2*CP = {2 * v.cp}")
    if v.sp and (m.seq // v.cp) % v.tp:
        p.append("seq/CP not divisible by TP (sequence parallelism)")
    if dp < 1:
        p.append("data parallel size < 1")
    return p


def to_layout(v: Variant, m: Model, world: int) -> Any:
    """The variant as envbuilder.parallel's Layout (None where that package is not importable)."""
    try:
        from envbuilder.parallel import Layout
    except Exception:
        return None
    dp = max(1, world // v.model_parallel)
    return Layout(gpus_per_node=world, nodes=1, num_layers=m.layers, hidden_size=m.hidden,
                  num_attention_heads=m.heads, seq_length=m.seq, gbs=m.mbs * v.microbatches() * dp, mbs=m.mbs,
                  tp=v.tp, pp=v.pp, vpp=v.vpp or None, cp=v.cp, sp=v.sp, vocab_size=m.vocab,
                  share_embeddings=False)


def check_parallel_failures(v: Variant, m: Model, world: int) -> list[str]:
    """`envbuilder check-parallel`'s failing rules for this variant, when envbuilder.parallel is present."""
    lay = to_layout(v, m, world)
    if lay is None:
        return []
    from envbuilder.parallel import check_layout

    return [f"{r.name}: {r.message}" for r in check_layout(lay).failures]
