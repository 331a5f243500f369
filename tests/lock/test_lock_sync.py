"""`make sync` (python -m envbuilder.lock.sync): the two uv syncs of a lock, as the image build runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from envbuilder.lock.lockdir import open_lockdir
from envbuilder.lock.sync import sync_plan

REPO = Path(__file__).resolve().parents[2]


def test_stage1_skips_the_deferred_stage2_packages_of_26_04() -> None:
    """26.04's stage 1 depends on transformer-engine and the mamba kernels, which need torch to build: `make sync`
    used to install them in stage 1 (before torch); the Dockerfile's --no-install-package never did."""
    lock = open_lockdir(REPO / "locks" / "26.04")
    plan = sync_plan(lock.record, lock.path)
    deferred = lock.record.stage1_deferred
    assert "transformer-engine" in deferred and "mamba-ssm" in deferred
    assert plan.stage1[0] == "--frozen"
    assert [plan.stage1[i + 1] for i, a in enumerate(plan.stage1) if a == "--no-install-package"] == sorted(deferred)
    assert plan.stage2[:3] == ["--frozen", "--extra", "compile"] and "--no-install-package" not in plan.stage2
    # stage 2 compiles for the lock's arch list (13.0: every data-center/workstation arch up to 12.1)
    assert plan.stage2_env["TORCH_CUDA_ARCH_LIST"] == lock.record.arch_list().torch
    assert plan.stage2_env["TORCH_CUDA_ARCH_LIST"].endswith("10.3;12.0;12.1")


def test_stage2_skips_what_it_builds_from_git_tags_and_says_so() -> None:
    lock = open_lockdir(REPO / "locks" / "v2.3.0")
    plan = sync_plan(lock.record, lock.path)
    assert plan.stage1 == ["--frozen"]
    skipped = [plan.stage2[i + 1] for i, a in enumerate(plan.stage2) if a == "--no-install-package"]
    assert skipped == sorted(lock.record.git_sources) == ["causal-conv1d", "mamba-ssm"]
    assert all("envbuilder wheels" in w for w in plan.warnings) and len(plan.warnings) == 2


def test_dry_run_prints_both_commands(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "envbuilder.lock.sync", str(REPO / "locks" / "26.04"), "--dry-run"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    runs = [ln for ln in proc.stderr.splitlines() if ln.startswith("+ ")]
    assert len(runs) == 2 and "--no-install-package transformer-engine" in runs[0] and "--extra compile" in runs[1]
    missing = subprocess.run([sys.executable, "-m", "envbuilder.lock.sync", str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 19 and "is not a directory" in missing.stderr
