"""The generated Slurm scripts under a real Slurm 22.05 (bookworm's slurm-wlm + munge).

A one-node cluster on localhost (slurmctld + slurmd + a private munged, started and stopped by
the `slurm_cluster` fixture) runs, with `sbatch --wait`:
- the exported torchrun-multinode.sbatch in its CPU form (`--gpus-per-node 0`: 2 gloo workers,
  1 node), through `srun apptainer exec` and torchrun's c10d rendezvous on the head node;
- the single-node Apptainer launcher (apptainer.sh).
Both as written by `export`, with only the training script provided. pyxis/enroot (the sqsh
snippets) cannot be installed here: those are checked by convention tests only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from runtime_fixtures import SHIM_DIR, SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.runtime]

ALLREDUCE = """\
import json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
out = {"rank": rank, "world": world, "sum": t.item(), "run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
       "master": os.environ.get("MASTER_ADDR"), "slurm_job": os.environ.get("SLURM_JOB_ID"),
       "backend": dist.get_backend()}
with open(f"result-{os.environ.get('SLURM_JOB_ID')}-{rank}.json", "w") as fh:
    json.dump(out, fh)
dist.destroy_process_group()
"""


def _job_dir(smoke_sif: Path) -> Path:
    d = smoke_sif.parent
    (d / "allreduce.py").write_text(ALLREDUCE)
    return d


def _submit(cluster: SlurmCluster, script: Path, cwd: Path) -> tuple[int, str, str]:
    env_path = f"{SHIM_DIR}{os.pathsep}{os.environ.get('PATH', '')}"  # `apptainer` in the job is the shim
    cluster.env["PATH"] = env_path
    rc, job = cluster.sbatch(script, cwd, 900, f"--output={cwd}/slurm-%j.out")
    log = (cwd / f"slurm-{job}.out")
    return rc, job, log.read_text(errors="replace") if log.exists() else "(no job output)"


def _results(d: Path, job: str) -> list[dict[str, object]]:
    return sorted((json.loads(p.read_text()) for p in d.glob(f"result-{job}-*.json")),
                  key=lambda r: int(str(r["rank"])))


def test_torchrun_sbatch_cpu_form_rendezvous(slurm_cluster: SlurmCluster, smoke_sif: Path) -> None:
    d = _job_dir(smoke_sif)
    script = Path(str(smoke_sif) + ".torchrun-multinode.sbatch")
    text = script.read_text()
    assert "--gpus-per-node" not in text and "--nv" not in text and "--nproc-per-node=2" in text
    rc, job, log = _submit(slurm_cluster, script, d)
    assert rc == 0, log[-4000:]
    results = _results(d, job)
    assert [r["rank"] for r in results] == [0, 1], log[-3000:]
    for r in results:
        # both workers met at the c10d rendezvous named by the job id and summed 1 + 2
        assert r["world"] == 2 and r["sum"] == 3.0 and r["backend"] == "gloo"
        assert r["run_id"] == job and r["slurm_job"] == job
        # the rendezvous host: this node (HEAD_ADDR is its 127.0.0.1; torch may name it localhost)
        assert r["master"] in ("127.0.0.1", "localhost") or str(r["master"]).startswith(slurm_cluster.node)


def test_apptainer_launcher_under_slurm(slurm_cluster: SlurmCluster, smoke_sif: Path) -> None:
    d = _job_dir(smoke_sif)
    script = Path(str(smoke_sif) + ".apptainer.sh")
    rc, job, log = _submit(slurm_cluster, script, d)
    assert rc == 0, log[-4000:]
    results = _results(d, job)
    assert [(r["rank"], r["world"], r["sum"]) for r in results] == [(0, 2, 3.0), (1, 2, 3.0)], log[-3000:]


def test_fixture_daemons_are_ours_and_running(slurm_cluster: SlurmCluster) -> None:
    assert all(p.poll() is None for p in slurm_cluster.procs)
    assert slurm_cluster.node_state().startswith("idle")
