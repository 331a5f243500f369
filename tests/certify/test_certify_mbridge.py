"""Megatron-Bridge recipe smoke (`pretrain:mbridge-recipe`): everything that can run without a GPU.

The training run itself needs a GPU and the Megatron-Bridge stack; it is not faked here. What is tested:
the skip and fail paths of the host-side check, the expectation flag, the `--only mbridge` group, and the
worker's pure helpers plus its loud failure where the stack is absent.
"""

from __future__ import annotations

import importlib.abc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envbuilder.certify import mbridge_smoke as worker
from envbuilder.certify.__main__ import GROUPS
from envbuilder.certify.expect import Expectations, load_expectations
from envbuilder.certify.expectations import framework_flags
from envbuilder.certify.launch import WorkerRun
from envbuilder.certify.pretrain import judge_run, mbridge_smoke
from envbuilder.certify.result import FAIL, PASS, SKIPPED


class _HideMegatron(importlib.abc.MetaPathFinder):
    """Makes `megatron` unimportable whatever this interpreter has installed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] == "megatron":
            raise ModuleNotFoundError(f"hidden in this test: {name}")
        return None


def test_skipped_when_megatron_bridge_is_not_locked(tmp_path: Path) -> None:
    c = mbridge_smoke(Expectations(), tmp_path, 30)
    assert (c.name, c.level, c.status) == ("pretrain:mbridge-recipe", 1, SKIPPED)
    assert c.detail == "not exercised: megatron-bridge is not locked"
    assert not list(tmp_path.iterdir())  # no worker was started


def test_fails_with_advice_when_locked_but_not_importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] == "megatron"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_HideMegatron(), *sys.meta_path])
    c = mbridge_smoke(Expectations(packages={"megatron-bridge": "0.4.0"}, mbridge_locked=True), tmp_path, 30)
    assert c.status == FAIL and c.advice and "megatron-bridge is locked but not installed" in c.advice
    assert not list(tmp_path.iterdir())


def test_flag_follows_the_lock_and_survives_the_expectations_file(tmp_path: Path) -> None:
    assert framework_flags({"megatron-bridge": "0.4.0", "torch": "2.11.0"}) == (False, True)  # (nemo, mbridge)
    assert framework_flags({"nemo-toolkit": "2.6.0"}) == (True, False)
    p = tmp_path / "expect.json"
    p.write_text(json.dumps({"schema": 1, "packages": {"megatron-bridge": "0.4.0"}, "mbridge_locked": True}))
    assert load_expectations(p).mbridge_locked
    p.write_text(json.dumps({"schema": 1, "packages": {}}))  # files written before the flag existed
    assert not load_expectations(p).mbridge_locked


def test_only_accepts_the_mbridge_group() -> None:
    assert "mbridge" in GROUPS
    proc = subprocess.run([sys.executable, "-m", "envbuilder.certify", "--level", "0", "--only", "mbridge",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "unknown group" not in proc.stderr
    assert json.loads(proc.stdout)["checks"] == []  # level 0 runs no pretrain


# --- the worker's pure parts ------------------------------------------------------------


class _Scalar:
    """A 0-d tensor's interface, as `loss_dict` values have it (torch is not needed for this)."""

    def __init__(self, v: float) -> None:
        self.v = v

    def item(self) -> float:
        return self.v


def test_loss_value_reads_lm_loss_and_refuses_a_step_without_it() -> None:
    assert worker.loss_value({"lm loss": _Scalar(10.5)}) == 10.5
    assert worker.loss_value({"lm loss": 9.25, "other": 1.0}) == 9.25
    with pytest.raises(RuntimeError, match="lm loss"):
        worker.loss_value({"loss": 1.0})
    with pytest.raises(RuntimeError, match="lm loss"):
        worker.loss_value(None)


def test_tokens_per_s_skips_the_warmup_steps() -> None:
    ends = [0.0, 5.0, 6.0, 7.0, 7.5, 8.0, 8.5]  # steps 4..7 take 0.5 s each after step 4 ends at 7.0
    assert worker.tokens_per_s(ends, 100, warmup=3) == pytest.approx(3 * 100 / 1.5)
    assert worker.tokens_per_s(ends[:4], 100, warmup=3) is None


def test_payload_refuses_a_partial_run_and_is_judged_like_the_other_pretrains() -> None:
    model = {"layers": 2, "hidden": 256}
    with pytest.raises(RuntimeError, match="did not complete"):
        worker.result_payload([10.4, 9.0], [1.0, 2.0], 5, model)
    losses = [10.4, 9.8, 8.7, 7.6, 6.9, 6.1]
    payload = worker.result_payload(losses, [float(i) for i in range(6)], 6, model)
    c = judge_run("pretrain:mbridge-recipe", 1, WorkerRun(0, "", json.loads(json.dumps(payload)), 12.0))
    assert c.status == PASS and c.measured["model"] == model and c.measured["steps"] == 6
    flat = worker.result_payload([10.4] * 6, [float(i) for i in range(6)], 6, model)
    assert judge_run("pretrain:mbridge-recipe", 1, WorkerRun(0, "", flat, 12.0)).status == FAIL


def test_tiny_model_keeps_qwen25_head_layout() -> None:
    t = worker.TINY_QWEN25
    assert t["hidden_size"] // t["num_attention_heads"] == 64  # Qwen2.5-0.5B: 896 / 14
    assert t["num_attention_heads"] % t["num_key_value_heads"] == 0 and t["tie_word_embeddings"]
    assert t["num_hidden_layers"] <= 2 and t["max_position_embeddings"] == worker.SEQ
    assert worker.GBS % worker.MBS == 0


def test_run_dir_is_beside_the_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    d = worker.run_dir_for(Path("sub") / "r.json")
    assert d == tmp_path / "sub" / "mbridge-run" and d.is_dir() and d.is_absolute()


def test_worker_fails_loudly_without_the_stack(tmp_path: Path) -> None:
    """Where megatron.bridge cannot be imported the worker exits non-zero and writes no result."""
    out = tmp_path / "r.json"
    out.write_text("stale")  # a previous run's result must not survive a failed one
    code = ("import importlib.abc, runpy, sys\n"
            "class H(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, n, p=None, t=None):\n"
            "        if n.split('.')[0] == 'megatron': raise ModuleNotFoundError('hidden: ' + n)\n"
            "sys.meta_path.insert(0, H())\n"
            f"sys.argv = ['x', '--out', {str(out)!r}, '--steps', '3']\n"
            "runpy.run_module('envbuilder.certify.mbridge_smoke', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode != 0
    assert "hidden: megatron" in proc.stderr and "Traceback" in proc.stderr
    assert not out.exists()
