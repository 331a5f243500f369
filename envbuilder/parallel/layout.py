"""A training layout (cluster shape, parallel degrees, model dimensions, batch sizes) as plain values."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from envbuilder.errors import InvalidLayoutInputError


@dataclass(frozen=True)
class Layout:
    gpus_per_node: int
    nodes: int
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    gbs: int
    mbs: int = 1
    tp: int = 1
    pp: int = 1
    vpp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel; Megatron-Core defaults it to TP
    sp: bool = False
    num_query_groups: int | None = None  # None: = heads (multi-head attention)
    kv_channels: int | None = None  # head_dim override; None: hidden // heads
    ffn_hidden_size: int | None = None  # None: 4 x hidden (Megatron-Core's default)
    num_experts: int | None = None
    vocab_size: int | None = None  # None: embeddings left out of the memory estimate
    gated_linear_unit: bool = False  # SwiGLU: three MLP matrices instead of two
    share_embeddings: bool = True  # input embedding and output layer share weights

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def dp(self) -> int | None:
        """Data-parallel size, None when TP x PP x CP does not divide the world."""
        if self.world_size % self.model_parallel:
            return None
        return self.world_size // self.model_parallel

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def query_groups(self) -> int:
        return self.num_query_groups if self.num_query_groups is not None else self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """What Megatron-Core uses: kv_channels, else hidden // heads (floored)."""
        return self.kv_channels if self.kv_channels is not None else self.hidden_size // self.num_attention_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size if self.ffn_hidden_size is not None else 4 * self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Each of these must be >= 1 when given; a 0 or negative value is an impossible input, not a layout error.
_POSITIVE = (
    "gpus_per_node", "nodes", "num_layers", "hidden_size", "num_attention_heads", "seq_length", "gbs", "mbs",
    "tp", "pp", "vpp", "cp", "ep", "etp", "num_query_groups", "kv_channels", "ffn_hidden_size", "num_experts",
    "vocab_size",
)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def validate_layout(layout: Layout) -> Layout:
    """Raise InvalidLayoutInputError naming every impossible value (0 GPUs, negative sizes)."""
    bad = []
    for f in fields(layout):
        if f.name not in _POSITIVE:
            continue
        value = getattr(layout, f.name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            bad.append(f"{flag(f.name)} {value}")
    if bad:
        raise InvalidLayoutInputError(
            "impossible values: " + ", ".join(bad),
            "GPU counts, parallel sizes, model dimensions and batch sizes must be positive integers",
        )
    return layout
