"""NeMo 2.0 recipe smoke: a shrunk llama pretrain recipe on mock data, 1 GPU.

Dimensions: 1 layer, hidden 128, 2 heads (head_dim 64, a multiple of 8), seq 128. The
tokenizer is NeMo's byte-level one so nothing is downloaded. A Lightning callback records
`reduced_train_loss` per step; the last rank writes {"losses", "tokens_per_s"} to --out.
Not exercised on real hardware in this repository's CI or device runs (no NeMo there).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:  # older NeMo stacks
    from pytorch_lightning import Callback

SEQ, GBS, MBS = 128, 8, 2


class LossRecorder(Callback):
    def __init__(self, path: str) -> None:
        self.path = path
        self.losses: list[float] = []
        self.t0 = 0.0

    def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        loss = trainer.callback_metrics.get("reduced_train_loss")
        if loss is not None:
            self.losses.append(float(loss))
        if trainer.global_step == 3:
            self.t0 = time.perf_counter()

    def on_train_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        if trainer.is_global_zero:
            dt = time.perf_counter() - self.t0
            steps = max(0, trainer.global_step - 3)
            Path(self.path).write_text(json.dumps({
                "losses": self.losses, "tokens_per_s": steps * GBS * SEQ / dt if dt > 0 and self.t0 else None,
                "layout": {"dp": 1}, "model": {"layers": 1, "hidden": 128, "heads": 2, "seq": SEQ}}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    import nemo_run as run
    from nemo.collections import llm
    from nemo.collections.common.tokenizers.bytelevel_tokenizers import ByteLevelTokenizer

    recipe = llm.llama3_8b.pretrain_recipe(dir=str(a.out.parent / "nemo-run"), name="certify", num_nodes=1,
                                           num_gpus_per_node=1)
    cfg = recipe.model.config
    cfg.num_layers, cfg.hidden_size, cfg.ffn_hidden_size = 1, 128, 256
    cfg.num_attention_heads, cfg.num_query_groups, cfg.seq_length = 2, 2, SEQ
    recipe.data = run.Config(llm.MockDataModule, seq_length=SEQ, global_batch_size=GBS, micro_batch_size=MBS,
                             tokenizer=run.Config(ByteLevelTokenizer))
    recipe.model.tokenizer = recipe.data.tokenizer
    tr = recipe.trainer
    tr.max_steps, tr.val_check_interval, tr.limit_val_batches, tr.log_every_n_steps = a.steps, a.steps, 0, 1
    tr.strategy.tensor_model_parallel_size = tr.strategy.pipeline_model_parallel_size = 1
    tr.strategy.context_parallel_size = 1
    tr.strategy.sequence_parallel = False
    tr.callbacks = [run.Config(LossRecorder, path=str(a.out))]
    tr.enable_checkpointing = False
    recipe.log.ckpt = None
    run.run(recipe, direct=True)


if __name__ == "__main__":
    main()
