"""Megatron-Bridge recipe smoke: the Qwen2.5 pretrain recipe, shrunk, on mock data, 1 GPU.

It calls Megatron-Bridge's own `qwen25_500m_pretrain_config()` (megatron.bridge.recipes.qwen.qwen2) and
`pretrain(config, forward_step)`, the run users start by hand, with these changes only:
- the model: the recipe asks `AutoBridge.from_hf_pretrained("Qwen/Qwen2.5-0.5B")`, which reads the model's
  config.json from the Hugging Face Hub. Certify hosts may have no network, so for the length of that call
  the recipe gets a bridge built by `AutoBridge.from_hf_config` from a Qwen2 config with Qwen2.5's layout
  (GQA, tied embeddings, RMSNorm, QKV bias, SwiGLU), shrunk to the dimensions below;
- length and size: SEQ tokens, global batch GBS of MBS-sized micro-batches, N steps, warmup of 2 steps;
  learning rate LR so the tiny model learns within 30 steps;
- side effects: no checkpoint save/load, no tensorboard, no validation/test passes, no dataloader workers.
Tokenizer and data stay the recipe's: NullTokenizer (nothing downloaded) and Megatron's mock GPT dataset
(no data paths), whose documents count 1, 2, 3, ... so the next token is learnable.

A callback on `on_train_step_end` records the "lm loss" of every step; the JSON {"losses", "tokens_per_s",
"layout", "model"} is written only after all N steps ran. Any failure propagates: non-zero exit, the
traceback in the log, no output file.

Top-level imports are the standard library only: the pure helpers are tested where the stack is absent.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from envbuilder.certify import gpulock

RECIPE_MODULE = "megatron.bridge.recipes.qwen.qwen2"
RECIPE = "qwen25_500m_pretrain_config"
HF_MODEL_ID = "Qwen/Qwen2.5-0.5B"  # what the recipe asks AutoBridge for
LOSS_KEY = "lm loss"  # megatron.bridge.training.losses: (loss, num_tokens, {"lm loss": ...})

SEQ, GBS, MBS = 256, 8, 2
LR, MIN_LR, WARMUP = 1e-3, 1e-4, 2
THROUGHPUT_WARMUP = 3  # steps left out of tokens/s (compilation, allocator growth)
#: Qwen2.5-0.5B's layout (head_dim 64, 2 KV groups, tied embeddings) at 2 layers and hidden 256
TINY_QWEN25 = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": SEQ,
               "rms_norm_eps": 1e-6, "tie_word_embeddings": True}

# no network on certify hosts: fail at once instead of waiting on Hub timeouts; no experiment trackers
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}


def loss_value(loss_dict: dict[str, Any] | None) -> float:
    """The step's reduced LM loss from `CallbackContext.loss_dict` (a 0-d tensor or a number)."""
    if not loss_dict or LOSS_KEY not in loss_dict:
        raise RuntimeError(f"train step reported no {LOSS_KEY!r} (loss_dict keys: {sorted(loss_dict or {})})")
    v = loss_dict[LOSS_KEY]
    return float(v.item() if hasattr(v, "item") else v)


def tokens_per_s(step_ends: list[float], tokens_per_step: int, warmup: int = THROUGHPUT_WARMUP) -> float | None:
    """Throughput over the steps after `warmup`, from the wall-clock end time of every step."""
    if len(step_ends) <= warmup + 1:
        return None
    dt = step_ends[-1] - step_ends[warmup]
    return (len(step_ends) - 1 - warmup) * tokens_per_step / dt if dt > 0 else None


def result_payload(losses: list[float], step_ends: list[float], steps: int, model: dict[str, Any]) -> dict[str, Any]:
    """The worker's JSON; refuses a run that did not record one loss per step."""
    if len(losses) != steps:
        raise RuntimeError(f"recorded {len(losses)} losses for {steps} steps; the run did not complete")
    return {"losses": losses, "tokens_per_s": tokens_per_s(step_ends, GBS * SEQ),
            "layout": {"dp": 1, "tp": 1, "pp": 1, "cp": 1}, "model": model}


def run_dir_for(out: Path) -> Path:
    """The working directory of the run, beside --out: the recipe derives its default output directories
    (nemo_experiments/...) from the working directory."""
    d = out.resolve().parent / "mbridge-run"
    d.mkdir(parents=True, exist_ok=True)
    return d


def build_config(steps: int) -> Any:
    """The recipe's ConfigContainer, shrunk as the module docstring says."""
    import importlib

    from megatron.bridge import AutoBridge
    from transformers import Qwen2Config

    recipe_mod: Any = importlib.import_module(RECIPE_MODULE)
    tokenizer_vocab = importlib.import_module(
        "megatron.bridge.recipes.utils.tokenizer_utils").DEFAULT_NULL_TOKENIZER_VOCAB_SIZE
    hf_config = Qwen2Config(architectures=["Qwen2ForCausalLM"], vocab_size=tokenizer_vocab, **TINY_QWEN25)

    class OfflineAutoBridge:
        """Stands in for AutoBridge inside the recipe module, for the recipe call only."""

        @staticmethod
        def from_hf_pretrained(path: Any, **kwargs: Any) -> Any:
            if str(path) != HF_MODEL_ID:
                raise RuntimeError(f"{RECIPE} asked for {path!r}, expected {HF_MODEL_ID!r}: recipe changed?")
            return AutoBridge.from_hf_config(hf_config)

    real = recipe_mod.AutoBridge  # the recipe module's own `from megatron.bridge import AutoBridge`
    recipe_mod.AutoBridge = OfflineAutoBridge
    try:
        cfg = getattr(recipe_mod, RECIPE)()
    finally:
        recipe_mod.AutoBridge = real

    cfg.model.tensor_model_parallel_size = cfg.model.pipeline_model_parallel_size = 1
    cfg.model.context_parallel_size = 1
    cfg.model.sequence_parallel = False
    # the recipe fuses gradient accumulation through APEX's fused_weight_gradient_mlp_cuda, which NGC images
    # carry and PyPI does not (megatron/core/tensor_parallel/layers.py raises without it)
    cfg.model.gradient_accumulation_fusion = False
    cfg.model.seq_length = cfg.dataset.seq_length = SEQ
    cfg.model.vocab_size = None  # setup() takes the tokenizer's and pads it (training/setup.py)
    cfg.train.train_iters = steps
    cfg.train.global_batch_size, cfg.train.micro_batch_size = GBS, MBS
    cfg.optimizer.lr, cfg.optimizer.min_lr = LR, MIN_LR
    cfg.scheduler.lr_warmup_iters = WARMUP
    cfg.validation.eval_iters = 0  # no validation/test passes (do_valid/do_test need eval_iters > 0)
    cfg.dataset.num_workers = 0
    cfg.checkpoint.save = cfg.checkpoint.load = None
    cfg.logger.tensorboard_dir = None
    cfg.logger.log_interval = 1
    return cfg


def model_facts(cfg: Any) -> dict[str, Any]:
    m = cfg.model
    return {"recipe": f"{RECIPE_MODULE}.{RECIPE}", "layers": m.num_layers, "hidden": m.hidden_size,
            "heads": m.num_attention_heads, "kv_groups": m.num_query_groups, "ffn": m.ffn_hidden_size,
            "seq": SEQ, "vocab": cfg.tokenizer.vocab_size, "gbs": GBS, "mbs": MBS}


def skip_helper_compile() -> None:
    """megatron.bridge.training.initialize runs megatron.core's compile_helpers() (`make -C
    megatron/core/datasets`) on every start; the PyPI megatron-core wheel ships that extension prebuilt
    (helpers_cpp.*.so) but not its Makefile, so `make` fails and pretrain exits. Use the shipped one."""
    import importlib

    try:
        importlib.import_module("megatron.core.datasets.helpers_cpp")
    except ImportError:
        return  # a source checkout: let Megatron-Bridge compile it as usual
    init: Any = importlib.import_module("megatron.bridge.training.initialize")
    init.compile_helpers = lambda: print("> dataset index builder: using the prebuilt helpers_cpp", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    a.out = a.out.resolve()  # before the chdir below
    a.out.unlink(missing_ok=True)
    for k, v in OFFLINE_ENV.items():
        os.environ.setdefault(k, v)
    os.chdir(run_dir_for(a.out))

    from megatron.bridge.training.callbacks import CallbackManager
    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain

    skip_helper_compile()
    held = gpulock.acquire()  # before the first CUDA call: this worker's GPU work runs alone (certify/gpulock.py)
    cfg = build_config(a.steps)
    losses: list[float] = []
    step_ends: list[float] = []

    def record(context: Any) -> None:
        losses.append(loss_value(context.loss_dict))  # .item() waits for the step's kernels
        step_ends.append(time.perf_counter())

    callbacks = CallbackManager()
    callbacks.register("on_train_step_end", record)
    pretrain(cfg, forward_step, callbacks=callbacks)
    payload = {**result_payload(losses, step_ends, a.steps, model_facts(cfg)), **gpulock.waited(held)}
    if not all(math.isfinite(x) for x in losses):
        print(f"[mbridge_smoke] non-finite losses: {losses}", flush=True)  # judged (and failed) by the loss rule
    if int(os.environ.get("RANK", "0")) == 0:
        a.out.write_text(json.dumps(payload))


if __name__ == "__main__":
    main()
