"""CPU tiny pretrain (torch-only GPT, 2 processes, gloo, DP=2) through the real harness.

Needs torch: the session fixture makes a venv with the CPU wheel (integration: a fresh machine
downloads torch from PyPI). Exercises the trainer, the loss rule and the certificate writer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envbuilder.certify.launch import WorkerRun
from envbuilder.certify.pretrain import judge_run

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_cpu_pretrain_certificate(certify_torch_venv: Path, tmp_path: Path) -> None:
    out = tmp_path / "cert"
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", "certify", "--venv", str(certify_torch_venv), "--cpu", "--level", "1",
         "-o", str(out), "--json"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cert = json.loads(proc.stdout)
    by = {c["name"]: c for c in cert["checks"]}
    pre = by["pretrain:torch-gpt-cpu-dp2"]
    assert pre["status"] == "pass", pre
    assert pre["measured"]["layout"] == {"dp": 2} and pre["measured"]["steps"] == 30
    assert len(pre["losses"]) == 30 and pre["losses"][-1] < 0.9 * pre["losses"][0]
    assert pre["measured"]["tokens_per_s"] > 0
    assert by["torch-build"]["measured"]["torch"].startswith("2.13.0")
    assert by["gemm"]["status"] == "skipped"  # --cpu: GPU checks are skipped, never passed
    assert cert["artifact"] == {"kind": "venv"}
    # every check says how long it took; the pretrain is the slow one
    assert all(isinstance(c["seconds"], (int, float)) and c["seconds"] >= 0 for c in cert["checks"])
    assert pre["seconds"] >= max(c["seconds"] for c in cert["checks"] if c is not pre) / 10
    ET.parse(out / "loss-pretrain-torch-gpt-cpu-dp2.svg")
    assert "loss-pretrain-torch-gpt-cpu-dp2.svg" in (out / "report.md").read_text()


def test_loss_rule_fails_a_model_that_does_not_learn(certify_torch_venv: Path, tmp_path: Path) -> None:
    """Same trainer with learning rate 0: finite but flat losses must fail the rule."""
    result = tmp_path / "flat.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [str(certify_torch_venv / "bin" / "python"), "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node=2", "-m", "envbuilder.certify.train_torch", "--out", str(result), "--lr=0",
         "--steps=8"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(result.read_text())
    check = judge_run("pretrain:flat", 1, WorkerRun(0, proc.stdout, data, 1.0))
    assert check.status == "fail" and "did not fall" in (check.detail or "")
    assert check.advice


def test_failed_worker_becomes_a_failed_check_with_its_log() -> None:
    run = WorkerRun(1, "Traceback ...\nRuntimeError: CUDA error: no kernel image is available for execution on "
                       "the device\n", None, 3.0)
    check = judge_run("parallel:pp2", 2, run)
    assert check.status == "fail" and "--arch-list" in (check.advice or "")
    assert "no kernel image" in (check.detail or "")
