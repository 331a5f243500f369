"""Which Transformer Engine attention backends a head_dim (and GPU, and CP) leaves enabled.

Limits as TE's backend selection applies them for bf16/fp16 training:

- FlashAttention 2: head_dim % 8 == 0 and head_dim <= 256; head_dim > 192 only on
  sm80/90/100/120; sm80+ only.
  NVIDIA/TransformerEngine:transformer_engine/pytorch/dot_product_attention/utils.py@v2.2
  (get_attention_backend, "Disabling FlashAttention 2 due to unsupported head_dim_qk").
- FusedAttention (cuDNN, arbitrary-seqlen sub-backend): head_dim % 8 == 0 and head_dim <= 128;
  up to 256 only on sm90+ with cuDNN 9+ and only for the forward pass (so not for training);
  sm80+ only.
  NVIDIA/TransformerEngine:transformer_engine/common/fused_attn/fused_attn.cpp@v2.2
  (nvte_get_fused_attn_backend, "head dimension" clause and "d=256 only supported for forward").
- UnfusedDotProductAttention: any head_dim, but never with context parallelism
  (utils.py@v2.2: "Disabling UnfusedDotProductAttention as it does not support context parallelism").
  Both fused backends are disabled below sm80 (utils.py@v2.2, "for compute capability < sm80").
"""

from __future__ import annotations

FLASH_MAX_HEAD_DIM = 256
FLASH_LARGE_HEAD_DIM = 192  # above this FlashAttention 2 needs one of FLASH_LARGE_SMS
FLASH_LARGE_SMS = ("8.0", "9.0", "10.0", "12.0")
FUSED_MAX_HEAD_DIM_TRAINING = 128
HEAD_DIM_MULTIPLE = 8
MIN_SM = (8, 0)

FLASH = "FlashAttention"
FUSED = "FusedAttention"
UNFUSED = "UnfusedDotProductAttention"


def _sm_tuple(sm: str) -> tuple[int, int]:
    major, _, minor = sm.partition(".")
    return int(major), int(minor or 0)


def disabled_backends(head_dim: int, sm: str | None, cp: int) -> dict[str, str]:
    """backend name -> why TE disables it. sm None: assume an sm80+ GPU without sm-specific extras."""
    out: dict[str, str] = {}
    old_gpu = sm is not None and _sm_tuple(sm) < MIN_SM
    # FlashAttention 2
    if old_gpu:
        out[FLASH] = f"needs sm80+ (GPU is sm{sm.replace('.', '') if sm else '?'})"
    elif head_dim % HEAD_DIM_MULTIPLE:
        out[FLASH] = f"head_dim {head_dim} is not a multiple of {HEAD_DIM_MULTIPLE}"
    elif head_dim > FLASH_MAX_HEAD_DIM:
        out[FLASH] = f"head_dim {head_dim} > {FLASH_MAX_HEAD_DIM}"
    elif head_dim > FLASH_LARGE_HEAD_DIM and (sm is None or sm not in FLASH_LARGE_SMS):
        where = "an unknown GPU" if sm is None else f"sm{sm.replace('.', '')}"
        out[FLASH] = f"head_dim {head_dim} > {FLASH_LARGE_HEAD_DIM} needs sm80/90/100/120 ({where})"
    # FusedAttention (cuDNN)
    if old_gpu:
        out[FUSED] = f"needs sm80+ (GPU is sm{sm.replace('.', '') if sm else '?'})"
    elif head_dim % HEAD_DIM_MULTIPLE:
        out[FUSED] = f"head_dim {head_dim} is not a multiple of {HEAD_DIM_MULTIPLE}"
    elif head_dim > FUSED_MAX_HEAD_DIM_TRAINING:
        out[FUSED] = (f"head_dim {head_dim} > {FUSED_MAX_HEAD_DIM_TRAINING} (cuDNN takes up to 256 on sm90+ "
                          "for the forward pass only, per TE 2.2)")
    # Unfused
    if cp > 1:
        out[UNFUSED] = f"does not support context parallelism (CP={cp})"
    return out


def nearest_hidden_sizes(hidden: int, heads: int, tp: int, count: int = 2) -> list[int]:
    """Hidden sizes closest to `hidden` that keep both fused backends: heads x head_dim with
    head_dim a multiple of 8 and <= 128, and divisible by TP (true when heads is)."""
    candidates = [
        heads * d for d in range(HEAD_DIM_MULTIPLE, FUSED_MAX_HEAD_DIM_TRAINING + 1, HEAD_DIM_MULTIPLE)
        if (heads * d) % tp == 0
    ]
    candidates.sort(key=lambda h: (abs(h - hidden), h))
    return sorted(candidates[:count])
