"""Level 1 and 2 on real GPUs (marked `gpu`: skipped in CI, which has none).

The device-machine runs recorded in BENCHMARKS.md ("## Certify") are these checks at full size;
run here with a CUDA torch in the test interpreter: `pytest -m gpu tests/certify/test_certify_gpu.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def _certify(*args: str) -> dict:
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-m", "envbuilder.certify", "--json", *args], capture_output=True,
                          text=True, timeout=900, cwd=REPO)
    assert proc.returncode in (0, 50), proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_level1_gpu_checks() -> None:
    cert = _certify("--level", "1", "--only", "driver,arch,kernels,gemm,pretrain")
    by = {c["name"]: c for c in cert["checks"]}
    assert by["arch"]["status"] == "pass" and by["gemm-bf16"]["status"] == "pass"
    assert by["pretrain:torch-gpt-1gpu"]["status"] == "pass"
    for name in ("kernel:flash-attn", "kernel:mamba-ssm", "kernel:causal-conv1d"):
        assert by[name]["status"] in ("pass", "not-installed"), by[name]


def test_level2_nccl_and_variants() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("level 2 needs 2 GPUs")
    cert = _certify("--level", "2", "--only", "nccl,parallel")
    statuses = {c["name"]: c["status"] for c in cert["checks"]}
    assert all(s in ("pass", "skipped", "not-installed") for s in statuses.values()), statuses
