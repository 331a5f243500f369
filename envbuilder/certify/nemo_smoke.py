"""NeMo 2.0 recipe smoke: NeMo's own Qwen2.5-7B pretrain recipe, shrunk, through NeMo-Run's LocalExecutor, 1 GPU.

The check seed 000 describes: `llm.qwen25_7b.pretrain_recipe` (nemo/collections/llm/recipes/qwen25_7b.py), the
run.Partial of `llm.pretrain` that users launch, built with the recipe's own arguments for one GPU and a short
run, then shrunk:
- the model: Qwen2.5-7B's layout (RMSNorm, SwiGLU, QKV bias, GQA, rotary) at TINY's dimensions: 2 layers,
  hidden 256, 4 heads of 64 (head_dim a multiple of 8), 2 query groups; its 152064-token vocabulary is kept;
- length and size: SEQ tokens, global batch GBS of MBS-sized micro-batches, N steps; learning rate LR (the
  recipe's cosine schedule with WARMUP steps and max_steps = N, which the recipe leaves at the scheduler's
  default of 10) so the tiny model learns within 30 steps;
- data: the recipe's MockDataModule (random tokens) with NeMo's byte-level tokenizer, so nothing is downloaded
  (its default, GPT-2 BPE, fetches vocabulary files) and no dataloader workers;
- side effects: no checkpoints, no tensorboard, no validation; gradient-accumulation fusion off (it needs APEX's
  fused_weight_gradient_mlp_cuda, which NGC images carry and PyPI does not).
What the tiny model learns in 30 steps is the token distribution: the loss falls from ln(152064) = 11.9
towards ln(tokenizer vocabulary), judged by the project's loss rule like every tiny pretrain.

The recipe is then run by NeMo-Run, not called directly: an Experiment with a LocalExecutor (torchrun, one
task) launches it in its own process, as `nemo llm pretrain` would. The worker waits for the job and requires
its final state to be SUCCEEDED. A callback in the training process records the loss of every step;
{"losses", "tokens_per_s", "layout", "model", "nemo_run"} is written only after all N steps ran and the job
SUCCEEDED. Any failure propagates: non-zero exit, the job's log in the worker's log, no output file.

Top-level imports are the standard library only: the pure helpers are tested where the stack is absent.
This worker is started as a plain process (not under torchrun): NeMo-Run's executor does the launching.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from envbuilder.certify import gpulock

RECIPE_MODULE = "nemo.collections.llm.recipes.qwen25_7b"
RECIPE = "qwen25_7b.pretrain_recipe"
SEQ, GBS, MBS = 256, 8, 2
LR, MIN_LR, WARMUP = 1e-3, 1e-4, 2
THROUGHPUT_WARMUP = 3  # steps left out of tokens/s
#: Qwen2.5-7B's layout at 2 layers and hidden 256 (7B: 28 heads / 4 query groups of 128; here 4 / 2 of 64)
TINY = {"num_layers": 2, "hidden_size": 256, "ffn_hidden_size": 512, "num_attention_heads": 4,
        "num_query_groups": 2}
LOSS_METRIC = "reduced_train_loss"  # what MegatronStrategy.training_step logs (and returns as "loss")
SUCCEEDED = "SUCCEEDED"  # torchx AppState name NeMo-Run reports for a finished job
# no network on certify hosts: fail at once instead of waiting on Hub timeouts; no experiment trackers
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled",
               "TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "NCCL_NVLS_ENABLE": "0"}


def check_dimensions(dims: dict[str, int]) -> None:
    """The shrunk model must be the size the check promises: 1-2 layers, hidden 128-256, whole heads whose
    size is a multiple of 8 (fused attention kernels need it), whole query groups."""
    layers, hidden = dims["num_layers"], dims["hidden_size"]
    heads, groups = dims["num_attention_heads"], dims["num_query_groups"]
    problems = []
    if not 1 <= layers <= 2:
        problems.append(f"{layers} layers (want 1-2)")
    if not 128 <= hidden <= 256:
        problems.append(f"hidden {hidden} (want 128-256)")
    if heads < 1 or hidden % heads:
        problems.append(f"hidden {hidden} is not a whole number of {heads} heads")
    elif (hidden // heads) % 8:
        problems.append(f"head_dim {hidden // heads} is not a multiple of 8")
    if groups < 1 or heads % groups:
        problems.append(f"{heads} heads do not split into {groups} query groups")
    if problems:
        raise ValueError("shrunk model out of bounds: " + "; ".join(problems))


def recipe_arguments(run_dir: Path, steps: int) -> dict[str, Any]:
    """What pretrain_recipe() itself is asked for: one GPU, no parallelism, N steps, our batch and schedule."""
    return {"dir": str(run_dir), "name": "certify", "tensor_parallelism": 1, "pipeline_parallelism": 1,
            "context_parallelism": 1, "sequence_parallelism": False, "num_nodes": 1, "num_gpus_per_node": 1,
            "max_steps": steps, "limit_val_batches": 0, "limit_test_batches": 0, "log_every_n_steps": 1,
            "val_check_interval": steps, "global_batch_size": GBS, "micro_batch_size": MBS, "seq_length": SEQ,
            "warmup_steps": WARMUP, "constant_steps": 0, "min_lr": MIN_LR, "max_lr": LR}


def loss_of(outputs: Any, metrics: dict[str, Any] | None) -> float | None:
    """One step's loss: the training step's output (a tensor, or a dict with "loss"), else the logged
    reduced_train_loss; None when neither is there."""
    value = outputs.get("loss") if isinstance(outputs, dict) else outputs
    if value is None and metrics:
        value = metrics.get(LOSS_METRIC)
    if value is None:
        return None
    return float(value.item() if hasattr(value, "item") else value)


def tokens_per_s(step_ends: list[float], tokens_per_step: int, warmup: int = THROUGHPUT_WARMUP) -> float | None:
    if len(step_ends) <= warmup + 1:
        return None
    dt = step_ends[-1] - step_ends[warmup]
    return (len(step_ends) - 1 - warmup) * tokens_per_step / dt if dt > 0 else None


def job_state(state: Any) -> str:
    """'SUCCEEDED' from torchx's AppState.SUCCEEDED (an enum member) or its string."""
    name = getattr(state, "name", None)
    return str(name if name else state).rsplit(".", 1)[-1]


def result_payload(recorded: dict[str, Any], steps: int, state: str, model: dict[str, Any]) -> dict[str, Any]:
    """The worker's JSON; refuses a job that did not succeed or did not record one loss per step."""
    if state != SUCCEEDED:
        raise RuntimeError(f"NeMo-Run's job ended in state {state}, not {SUCCEEDED}")
    losses = [float(x) for x in recorded.get("losses", [])]
    if len(losses) != steps:
        raise RuntimeError(f"recorded {len(losses)} losses for {steps} steps; the run did not complete")
    return {"losses": losses, "tokens_per_s": tokens_per_s(list(recorded.get("step_ends", [])), GBS * SEQ),
            "layout": {"dp": 1, "tp": 1, "pp": 1, "cp": 1}, "model": model,
            "nemo_run": {"executor": "LocalExecutor", "launcher": "torchrun", "state": state},
            **{k: recorded[k] for k in ("gpu_wait_s",) if k in recorded}}


def _loss_recorder_class() -> type:
    """The Lightning callback, made on first use (lightning is imported only where the stack is)."""
    try:
        from lightning.pytorch import Callback
    except ImportError:  # pragma: no cover (NeMo 2.0 used pytorch_lightning)
        from pytorch_lightning import Callback

    class LossRecorder(Callback):
        """Records every training step's loss (by global step) and writes them at the end of training."""

        def __init__(self, path: str) -> None:
            self.path = path
            self.by_step: dict[int, float] = {}
            self.step_ends: list[float] = []
            self.held: gpulock.Held | None = None

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            # at the start of fit, before the model, optimizer and data reach the GPU: the training process's
            # GPU work runs alone (certify/gpulock.py; the lock is let go when the process exits). Only here,
            # in the training process: the worker that builds the recipe never calls it
            if self.held is None:
                self.held = gpulock.acquire()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            loss = loss_of(outputs, dict(trainer.callback_metrics))
            if loss is not None:
                self.by_step[int(trainer.global_step)] = loss
                self.step_ends.append(time.perf_counter())

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.is_global_zero:
                Path(self.path).write_text(json.dumps({"losses": [self.by_step[k] for k in sorted(self.by_step)],
                                                       "step_ends": self.step_ends,
                                                       **gpulock.waited(self.held)}))

    LossRecorder.__module__, LossRecorder.__qualname__ = __name__, "LossRecorder"
    return LossRecorder


def __getattr__(name: str) -> Any:
    # NeMo-Run serialises the callback by its import path; the training process resolves it here
    if name == "LossRecorder":
        cls = _loss_recorder_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def build_recipe(run_dir: Path, steps: int, loss_path: Path) -> tuple[Any, dict[str, Any]]:
    """The recipe's run.Partial, shrunk as the module docstring says; and the facts of the model it trains."""
    import nemo_run as run
    from nemo.collections import llm
    from nemo.collections.common.tokenizers.bytelevel_tokenizers import ByteLevelTokenizer

    check_dimensions(TINY)
    recipe = llm.qwen25_7b.pretrain_recipe(**recipe_arguments(run_dir, steps))
    cfg = recipe.model.config
    for key, value in TINY.items():
        setattr(cfg, key, value)
    cfg.seq_length = SEQ
    cfg.gradient_accumulation_fusion = False
    recipe.data.tokenizer = run.Config(ByteLevelTokenizer)
    recipe.data.num_workers = 0
    recipe.optim.lr_scheduler.max_steps = steps
    recipe.trainer.enable_checkpointing = False
    recipe.log.ckpt = None
    recipe.log.tensorboard = None
    # by its importable name (this file runs as __main__; the training process imports the module)
    recorder = importlib.import_module("envbuilder.certify.nemo_smoke").LossRecorder
    recipe.trainer.callbacks = [*(recipe.trainer.callbacks or []), run.Config(recorder, path=str(loss_path))]
    model = {"recipe": f"nemo.collections.llm.{RECIPE}", "layers": cfg.num_layers, "hidden": cfg.hidden_size,
             "heads": cfg.num_attention_heads, "kv_groups": cfg.num_query_groups, "ffn": cfg.ffn_hidden_size,
             "head_dim": cfg.hidden_size // cfg.num_attention_heads, "vocab": cfg.vocab_size, "seq": SEQ,
             "gbs": GBS, "mbs": MBS, "data": "MockDataModule", "tokenizer": "ByteLevelTokenizer"}
    return recipe, model


def executor_env() -> dict[str, str]:
    """The training process's environment additions: envbuilder on its path (it imports the callback), this
    interpreter's bin directory first on PATH (the local scheduler runs `torchrun` from PATH, and a venv used
    without activating it has its torchrun there only), the GPU lock and the offline settings."""
    here = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    lock = {gpulock.ENV: os.environ[gpulock.ENV]} if os.environ.get(gpulock.ENV) else {}
    return {**OFFLINE_ENV, **lock, "PYTHONPATH": here + (os.pathsep + path if path else ""),
            "PATH": bin_first_path()}


def bin_first_path() -> str:
    """PATH with the directory of this interpreter (not resolved: a venv's bin holds a symlink) in front."""
    bindir = str(Path(sys.executable).parent)
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bindir]
    return os.pathsep.join([bindir, *rest])


def run_experiment(recipe: Any, home: Path) -> str:
    """Launch the recipe with a LocalExecutor and wait for it; the job's final state."""
    import nemo_run as run

    executor = run.LocalExecutor(ntasks_per_node=1, launcher="torchrun", env_vars=executor_env())
    with run.Experiment("envbuilder-certify-nemo", executor=executor, base_dir=str(home), log_level="INFO") as exp:
        exp.add(recipe, name="qwen25-tiny", tail_logs=True)
        exp.run(sequential=True)
    # leaving the context waited for the job (Experiment.__exit__ -> _wait_for_jobs)
    return job_state(exp.jobs[0].state)


def own_children() -> list[int]:
    """Processes whose parent is this one: the torchrun NeMo-Run's local scheduler started, which runs in a
    session of its own (torchx: start_new_session), so a signal to this worker's group does not reach it."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if int(ppid) == me and state != "Z":  # a zombie has ended already
                out.append(int(entry))
    return out


def _in_groups(groups: set[int]) -> bool:
    alive = False
    for pid in own_children():
        with contextlib.suppress(ProcessLookupError):
            alive = alive or os.getpgid(pid) in groups
    return alive


def stop_children(grace_s: float = 15.0) -> None:
    """SIGTERM the process group of every child (torchrun passes it on to its ranks), then SIGKILL what is
    left after `grace_s`: a failed or interrupted run leaves no training process behind."""
    groups = set()
    for pid in own_children():
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            continue
    groups.discard(os.getpgrp())  # children in this worker's own group end with it (and killpg would hit us)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + wait
        while wait and _in_groups(groups) and time.monotonic() < deadline:
            time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    # a SIGTERM (the host's timeout) unwinds through the finally below, which stops the training process
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    a.out = a.out.resolve()
    a.out.unlink(missing_ok=True)
    for k, v in OFFLINE_ENV.items():
        os.environ.setdefault(k, v)
    run_dir = a.out.parent / "nemo-run"
    run_dir.mkdir(parents=True, exist_ok=True)
    os.environ["NEMORUN_HOME"] = str(run_dir / "home")  # experiments' metadata, not ~/.nemo_run
    os.environ["PATH"] = bin_first_path()  # the local scheduler resolves `torchrun` in this process
    loss_path = run_dir / "losses.json"
    loss_path.unlink(missing_ok=True)
    recipe, model = build_recipe(run_dir, a.steps, loss_path)
    print(f"[nemo_smoke] {RECIPE} shrunk to {json.dumps(model, sort_keys=True)}", flush=True)
    try:
        state = run_experiment(recipe, run_dir / "home")
    finally:
        stop_children()
    print(f"[nemo_smoke] NeMo-Run job state: {state}", flush=True)
    recorded = json.loads(loss_path.read_text()) if loss_path.is_file() else {}
    payload = result_payload(recorded, a.steps, state, model)
    if not all(math.isfinite(x) for x in payload["losses"]):
        print(f"[nemo_smoke] non-finite losses: {payload['losses']}", flush=True)  # judged by the loss rule
    a.out.write_text(json.dumps(payload))


if __name__ == "__main__":
    main()
