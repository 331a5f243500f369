"""NeMo 2.0 recipe smoke (`pretrain:nemo-recipe`): everything that can run without a GPU and without NeMo.

The training run needs a GPU and the NeMo stack (on a GPU host: BENCHMARKS.md). What is tested here: the
not-installed and fail paths of the host-side check, the plain-process launch (NeMo-Run starts the ranks),
the shrunk model's bounds, the recipe's arguments, the loss reading, the job-state and result rules, and the
Lightning callback's recording (against a stand-in `lightning` module: a base class and nothing else).
"""

from __future__ import annotations

import importlib
import importlib.abc
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from envbuilder.certify import nemo_smoke as worker
from envbuilder.certify.expect import Expectations
from envbuilder.certify.launch import WorkerRun, worker_command
from envbuilder.certify.lossrule import judge_losses
from envbuilder.certify.pretrain import judge_run, nemo_smoke
from envbuilder.certify.result import FAIL, NOT_INSTALLED, PASS


class _HideNemo(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in ("nemo", "nemo_run"):
            raise ModuleNotFoundError(f"hidden in this test: {name}")
        return None


@pytest.fixture()
def no_nemo(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in ("nemo", "nemo_run")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_HideNemo(), *sys.meta_path])


def test_not_installed_unless_locked_then_failed(tmp_path: Path, no_nemo: None) -> None:
    c = nemo_smoke(Expectations(), tmp_path, 30)
    assert (c.name, c.level, c.status) == ("pretrain:nemo-recipe", 1, NOT_INSTALLED)
    assert c.detail == "nemo and nemo_run not importable"
    c = nemo_smoke(Expectations(packages={"nemo-toolkit": "2.3.0"}, nemo_locked=True), tmp_path, 30)
    assert c.status == FAIL and c.advice and "nemo-toolkit is locked but not installed" in c.advice
    assert not list(tmp_path.iterdir())  # no worker was started


def test_the_worker_is_a_plain_process_nemo_run_launches_the_ranks(tmp_path: Path) -> None:
    plain = worker_command("envbuilder.certify.nemo_smoke", ["--steps=30"], 1, tmp_path / "o.json", torchrun=False)
    assert plain == [sys.executable, "-m", "envbuilder.certify.nemo_smoke", "--out", str(tmp_path / "o.json"),
                     "--steps=30"]
    assert "torch.distributed.run" in worker_command("m", [], 2, tmp_path / "o.json")


def test_shrunk_model_bounds() -> None:
    worker.check_dimensions(worker.TINY)
    assert worker.TINY["hidden_size"] // worker.TINY["num_attention_heads"] == 64
    for bad, why in [({"hidden_size": 512}, "hidden 512"), ({"num_layers": 3}, "3 layers"),
                     ({"num_attention_heads": 20, "hidden_size": 240, "num_query_groups": 4}, "head_dim 12"),
                     ({"num_attention_heads": 3, "num_query_groups": 2, "hidden_size": 192}, "query groups"),
                     ({"num_attention_heads": 5}, "whole number")]:
        with pytest.raises(ValueError, match=why):
            worker.check_dimensions({**worker.TINY, **bad})


def test_recipe_arguments_ask_for_one_gpu_and_the_run_length(tmp_path: Path) -> None:
    args = worker.recipe_arguments(tmp_path, 30)
    assert args["num_gpus_per_node"] == 1 and args["num_nodes"] == 1 and args["tensor_parallelism"] == 1
    assert args["max_steps"] == 30 and args["val_check_interval"] == 30 and args["limit_val_batches"] == 0
    assert (args["global_batch_size"], args["micro_batch_size"], args["seq_length"]) == (8, 2, 256)
    assert args["dir"] == str(tmp_path)


class _Scalar:
    def __init__(self, v: float) -> None:
        self.v = v

    def item(self) -> float:
        return self.v


def test_loss_of_a_step() -> None:
    assert worker.loss_of(_Scalar(11.9), None) == 11.9
    assert worker.loss_of({"loss": _Scalar(7.5)}, {}) == 7.5
    assert worker.loss_of({}, {"reduced_train_loss": _Scalar(6.0)}) == 6.0
    assert worker.loss_of(None, {"other": 1.0}) is None


def test_job_state_names() -> None:
    member = types.SimpleNamespace(name="SUCCEEDED")
    assert worker.job_state(member) == "SUCCEEDED"
    assert worker.job_state("AppState.FAILED") == "FAILED"


def test_result_requires_success_and_every_step() -> None:
    losses = [11.9 - 0.2 * i for i in range(30)]
    recorded = {"losses": losses, "step_ends": [float(i) for i in range(30)]}
    payload = worker.result_payload(recorded, 30, "SUCCEEDED", {"layers": 2})
    assert payload["nemo_run"] == {"executor": "LocalExecutor", "launcher": "torchrun", "state": "SUCCEEDED"}
    assert payload["tokens_per_s"] == pytest.approx(8 * 256)  # one step per second after the warm-up
    assert judge_losses(payload["losses"])[0]
    with pytest.raises(RuntimeError, match="state FAILED"):
        worker.result_payload(recorded, 30, "FAILED", {})
    with pytest.raises(RuntimeError, match="recorded 29 losses for 30 steps"):
        worker.result_payload({"losses": losses[:29]}, 30, "SUCCEEDED", {})
    check = judge_run("pretrain:nemo-recipe", 1, WorkerRun(0, "", payload, 90.0))
    assert check.status == PASS and check.measured["nemo_run"]["state"] == "SUCCEEDED"


def test_loss_recorder_records_by_step_and_writes_on_rank_zero(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The callback NeMo-Run's training process resolves by name, against a stand-in Lightning base class."""
    pkg = types.ModuleType("lightning")
    sub = types.ModuleType("lightning.pytorch")

    class Callback:  # Lightning's base class is a plain class with no-op hooks
        pass

    sub.Callback = Callback  # type: ignore[attr-defined]
    pkg.pytorch = sub  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lightning", pkg)
    monkeypatch.setitem(sys.modules, "lightning.pytorch", sub)
    mod = importlib.import_module("envbuilder.certify.nemo_smoke")
    monkeypatch.delitem(mod.__dict__, "LossRecorder", raising=False)
    cls = mod.LossRecorder  # made on first use, by the module's __getattr__
    assert issubclass(cls, Callback)
    assert f"{cls.__module__}.{cls.__qualname__}" == "envbuilder.certify.nemo_smoke.LossRecorder"
    out = tmp_path / "losses.json"
    rec = cls(path=str(out))
    trainer = types.SimpleNamespace(callback_metrics={}, global_step=0, is_global_zero=True)
    for step, loss in enumerate([11.9, 10.0, 8.5], start=1):
        trainer.global_step = step
        rec.on_train_batch_end(trainer, None, {"loss": _Scalar(loss)}, None, step - 1)
    rec.on_train_batch_end(trainer, None, None, None, 3)  # a batch end without a loss changes nothing
    rec.on_train_end(trainer, None)
    data = json.loads(out.read_text())
    assert data["losses"] == [11.9, 10.0, 8.5] and len(data["step_ends"]) == 3
    out.unlink()
    rec.on_train_end(types.SimpleNamespace(is_global_zero=False), None)
    assert not out.exists()


def test_stop_children_ends_the_sessions_this_worker_started(tmp_path: Path) -> None:
    """NeMo-Run's local scheduler starts torchrun in a session of its own, which a signal to the worker's group
    misses: the worker stops its children's groups itself (and leaves children of its own group alone)."""
    import subprocess

    script = (
        "import subprocess, sys, time\n"
        "from envbuilder.certify.nemo_smoke import stop_children\n"
        "own = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "mine = subprocess.Popen(['sleep', '300'])\n"
        "time.sleep(0.3)\n"
        "stop_children(grace_s=5)\n"
        "time.sleep(0.3)\n"
        "print(own.poll() is not None, mine.poll() is None)\n"
        "mine.kill()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
