"""`envbuilder check-parallel` end to end: exit codes, one-line errors, deterministic JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.host.gpus import require_gpu

HPC = ["--gpus-per-node", "4", "--nodes", "2", "--tp", "8", "--num-layers", "12", "--hidden-size", "768",
       "--num-attention-heads", "16", "--seq-length", "1024", "--gbs", "192", "--mbs", "32"]
QWEN_TINY = ["--gpus-per-node", "8", "--num-layers", "28", "--hidden-size", "128", "--num-attention-heads", "28",
             "--num-query-groups", "4", "--seq-length", "4096", "--gbs", "32", "--mbs", "2", "--cp", "2"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", "check-parallel", *args],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))


def assert_clean_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert any(line.startswith("  fix: ") for line in proc.stderr.splitlines())


def test_hpc_guide_layout_passes_with_six_accumulation_steps() -> None:
    proc = run(*HPC)
    assert proc.returncode == 0, proc.stderr
    assert "gradient-accumulation steps: 6" in proc.stderr
    assert "GBS 192 = MBS 32 x DP 1 x 6 gradient-accumulation step(s)" in proc.stderr


def test_json_is_deterministic_and_complete() -> None:
    first, second = run(*HPC, "--json"), run(*HPC, "--json")
    assert first.returncode == 0
    assert first.stdout == second.stdout
    report = json.loads(first.stdout)
    assert report["ok"] is True and report["failed"] == []
    assert report["derived"]["grad_accumulation_steps"] == 6
    names = [r["name"] for r in report["rules"]]
    assert names[0] == "world_size" and "memory" in names and len(names) == len(set(names)) == 17
    assert {r["level"] for r in report["rules"]} <= {"pass", "warn", "fail", "n/a"}


def test_qwen_tiny_fails_with_exit_21_and_reason() -> None:
    proc = run(*QWEN_TINY)
    assert proc.returncode == 21
    assert_clean_error(proc)
    assert "head_dim 4.57" in proc.stderr and "every attention backend is disabled" in proc.stderr
    as_json = run(*QWEN_TINY, "--json")
    assert as_json.returncode == 21
    err = json.loads(as_json.stdout)
    assert err["error"] == "parallel-layout" and err["exit_code"] == 21
    assert err["details"]["failed"] == ["head_dim"]
    assert len(err["details"]["rules"]) == 17


def test_hidden_3584_passes() -> None:
    args = list(QWEN_TINY)
    args[args.index("128")] = "3584"
    assert run(*args).returncode == 0


@pytest.mark.parametrize(("args", "code", "text"), [
    (["--gpus-per-node", "0", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "8",
      "--seq-length", "16", "--gbs", "8"], 22, "--gpus-per-node 0"),
    ([*HPC, "--hidden-size", "-768"], 22, "--hidden-size -768"),
    (["--num-layers", "2"], 22, "missing --gpus-per-node"),
    (["--from-nemo-recipe", "gpt3_5b"], 22, "missing --gpus-per-node"),  # model-only entry: layout needed
    (["--from-nemo-recipe", "llama9_1t"], 23, "no built-in recipe 'llama9_1t'"),
    ([*HPC, "--gpu-memory-gib", "0"], 22, "memory must be positive"),
    ([*HPC, "--gpu", "NoSuchGPU"], 24, "not in matrices/gpus.toml"),
    (["--from-nemo-recipe", "llama3_70b"], 21, "use 4 nodes"),
])
def test_bad_input_exit_codes(args: list[str], code: int, text: str, gpu_matrices: Path) -> None:
    proc = run(*args)
    assert proc.returncode == code, proc.stderr
    assert_clean_error(proc)
    assert text in proc.stderr


def test_recipe_with_flag_override_and_gpu_memory(gpu_matrices: Path) -> None:
    proc = run("--from-nemo-recipe", "llama3_70b", "--nodes", "4", "--gpu", "H100", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["recipe"] == "NVIDIA/NeMo:nemo/collections/llm/recipes/llama3_70b.py@v2.3.0"
    assert report["layout"]["nodes"] == 4 and report["layout"]["tp"] == 4 and report["layout"]["vpp"] == 5
    assert report["gpu"]["memory_gib"] == require_gpu("H100").memory_gib
    assert report["memory"]["gpu_memory_gib"] == report["gpu"]["memory_gib"]


def test_mixtral_recipe_on_one_node_names_expert_rule() -> None:
    proc = run("--from-nemo-recipe", "mixtral_8x7b", "--nodes", "1", "--json")
    assert proc.returncode == 21
    failed = json.loads(proc.stdout)["details"]["failed"]
    assert "expert_world" in failed  # ETP 1 x EP 8 x PP 4 = 32 > 8 GPUs
