"""The components envbuilder pins, and how each maps to matrix fields, stages and git tags."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    name: str  # PyPI distribution name
    field: str  # matrix release field holding its version
    stage: int  # 1 = plain install, 2 = torch-dependent build without isolation
    git_url: str | None = None
    git_tag: str | None = None  # format string with {version}


COMPONENTS: tuple[Component, ...] = (
    Component("torch", "torch", 1),
    Component("nemo-toolkit", "pypi_version", 1, "https://github.com/NVIDIA/NeMo.git", "v{version}"),
    Component("megatron-core", "megatron_core", 1, "https://github.com/NVIDIA/Megatron-LM.git", "core_v{version}"),
    Component("megatron-bridge", "megatron_bridge", 1, "https://github.com/NVIDIA-NeMo/Megatron-Bridge.git",
              "v{version}"),
    Component("nemo-run", "nemo_run", 1, "https://github.com/NVIDIA/NeMo-Run.git", "v{version}"),
    # Megatron-Bridge rows pin it (upstream's uv.lock); NeMo rows leave it to their dependencies
    Component("nvidia-resiliency-ext", "nvidia_resiliency_ext", 1),
    # NeMo 2.x constrains the `lightning` distribution (not `pytorch-lightning`)
    Component("lightning", "lightning", 1),
    # transformer-engine expands into its explicit parts (see te_parts)
    Component("transformer-engine", "transformer_engine", 2),
    Component("flash-attn", "flash_attn", 2),
    Component("mamba-ssm", "mamba_ssm", 2, "https://github.com/state-spaces/mamba.git", "v{version}"),
    Component("causal-conv1d", "causal_conv1d", 2, "https://github.com/Dao-AILab/causal-conv1d.git", "v{version}"),
)

BY_NAME = {c.name: c for c in COMPONENTS}
ALIASES = {"nemo": "nemo-toolkit", "mbridge": "megatron-bridge", "te": "transformer-engine",
           "nvrx": "nvidia-resiliency-ext", "transformer-engine-torch": "transformer-engine",
           "flash-attention": "flash-attn"}


def canonical(name: str) -> str:
    n = name.strip().lower().replace("_", "-")
    return ALIASES.get(n, n)


def te_parts(cuda_major: int | None) -> list[str]:
    """TE is three distributions; the `transformer-engine[pytorch]` extra cannot be used
    with no-build-isolation, so the parts are listed explicitly."""
    parts = ["transformer-engine", "transformer-engine-torch"]
    if cuda_major is not None:
        parts.insert(1, f"transformer-engine-cu{cuda_major}")
    return parts
