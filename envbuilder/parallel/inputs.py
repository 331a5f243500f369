"""check-parallel's inputs: command-line values over a recipe's over the defaults, into a Layout."""

from __future__ import annotations

import math
from typing import Any

from envbuilder.errors import InvalidLayoutInputError
from envbuilder.parallel.check import GpuTarget
from envbuilder.parallel.layout import Layout, flag
from envbuilder.parallel.recipes import find_recipe

# Flags whose value comes from the recipe when not given; model fields are required one way or the other.
LAYOUT_FLAGS = (
    "gpus_per_node", "nodes", "tp", "pp", "vpp", "cp", "ep", "etp", "sp", "num_layers", "hidden_size",
    "num_attention_heads", "num_query_groups", "kv_channels", "ffn_hidden_size", "seq_length", "mbs", "gbs",
    "num_experts", "vocab_size", "gated_linear_unit", "share_embeddings",
)
REQUIRED = ("gpus_per_node", "num_layers", "hidden_size", "num_attention_heads", "seq_length", "gbs")
DEFAULTS: dict[str, Any] = {"nodes": 1, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "mbs": 1, "sp": False,
                            "gated_linear_unit": False, "share_embeddings": True}


def build_layout(flags: dict[str, Any], recipe_name: str | None) -> tuple[Layout, str | None]:
    """Flags over recipe values over defaults. Raises UnknownRecipeError / InvalidLayoutInputError."""
    values: dict[str, Any] = dict(DEFAULTS)
    source = None
    if recipe_name:
        recipe = find_recipe(recipe_name)
        values.update(recipe.layout_values())
        source = recipe.source
    values.update({k: v for k, v in flags.items() if v is not None})
    missing = [flag(k) for k in REQUIRED if values.get(k) is None]
    if missing:
        raise InvalidLayoutInputError(
            f"missing {', '.join(missing)}",
            "give them as flags, or take the model and layout from --from-nemo-recipe NAME",
        )
    kwargs: dict[str, Any] = {k: values[k] for k in LAYOUT_FLAGS if k in values}
    return Layout(**kwargs), source


def gpu_target(memory: float | None, name: str | None = None, sm: str | None = None,
               datasheet_memory: float | None = None) -> GpuTarget:
    """The GPU the layout must fit: a known model (name, sm, datasheet memory), a memory size, or both
    (--gpu-memory-gib overrides the datasheet's)."""
    if memory is not None and not math.isfinite(memory):  # nan passes every comparison; inf is no memory size
        raise InvalidLayoutInputError(f"--gpu-memory-gib {memory}: not a finite number",
                                      "give the GPU memory in GiB, e.g. 80")
    if memory is not None and memory <= 0:
        raise InvalidLayoutInputError(f"--gpu-memory-gib {memory:g}: memory must be positive",
                                      "give the GPU memory in GiB, e.g. 80")
    if name is None:
        return GpuTarget(memory_gib=memory)
    return GpuTarget(name, sm, memory if memory is not None else datasheet_memory)
