"""Run every rule over a layout and collect a report: the verdict, the derived sizes, the estimate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envbuilder.parallel import rules as r
from envbuilder.parallel.layout import Layout, validate_layout
from envbuilder.parallel.memory import estimate_memory, memory_rule
from envbuilder.parallel.rules import RuleResult, grad_accumulation


@dataclass(frozen=True)
class GpuTarget:
    """The GPU the layout runs on, when known: sm for attention limits, memory for the estimate."""

    name: str | None = None
    sm: str | None = None
    memory_gib: float | None = None


@dataclass(frozen=True)
class ParallelReport:
    layout: Layout
    gpu: GpuTarget
    rules: tuple[RuleResult, ...]
    grad_bytes: int

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rules)

    @property
    def failures(self) -> list[RuleResult]:
        return [r for r in self.rules if not r.ok]

    def to_dict(self) -> dict[str, Any]:
        lay = self.layout
        return {
            "ok": self.ok,
            "layout": lay.to_dict(),
            "gpu": {"name": self.gpu.name, "sm": self.gpu.sm, "memory_gib": self.gpu.memory_gib},
            "derived": {
                "world_size": lay.world_size,
                "dp": lay.dp,
                "grad_accumulation_steps": grad_accumulation(lay),
                "head_dim": lay.head_dim,
                "expert_tp": lay.expert_tp,
            },
            "memory": {**estimate_memory(lay, self.grad_bytes).to_dict(),
                       "grad_bytes": self.grad_bytes, "gpu_memory_gib": self.gpu.memory_gib},
            "rules": [r.to_dict() for r in self.rules],
            "failed": [r.name for r in self.failures],
        }


def check_layout(layout: Layout, gpu: GpuTarget | None = None, grad_bytes: int = 4) -> ParallelReport:
    """Validate inputs (InvalidLayoutInputError), then apply every rule; never raises for a bad layout."""
    validate_layout(layout)
    target = gpu or GpuTarget()
    rules = (
        r.world_size(layout),
        r.tp_within_node(layout),
        r.heads_divisible_by_tp(layout),
        r.query_groups(layout),
        r.head_dim(layout, target.sm),
        r.ffn_divisible_by_tp(layout),
        r.layers_divisible_by_pp(layout),
        r.layers_divisible_by_vpp(layout),
        r.batch_divisible(layout),
        r.interleaved_microbatches(layout),
        r.sp_needs_tp(layout),
        r.sp_sequence(layout),
        r.cp_sequence(layout),
        r.experts_divisible_by_ep(layout),
        r.expert_world(layout),
        r.moe_sequence_parallel(layout),
        memory_rule(layout, target.memory_gib, grad_bytes),
    )
    return ParallelReport(layout, target, rules, grad_bytes)
