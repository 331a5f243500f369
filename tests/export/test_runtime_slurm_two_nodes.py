"""The generated multi-node sbatch across two real Slurm nodes (issue 21, item 4).

`slurm_two_nodes` (tests/runtime_fixtures.py) starts slurmctld and two slurmd, each slurmd in its own network
namespace with its own hostname, joined by a veth pair: two hosts as far as Slurm, torchrun and gloo can tell.
The exported SIF's torchrun-multinode.sbatch (CPU form: nodes=2, 2 gloo workers per node) runs with
`sbatch` as written by `export`, with only the training script beside it; torchrun's c10d rendezvous meets on
the first node's address. Two jobs at once on the same two nodes must each meet only their own ranks: the
rendezvous port comes from the job id.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from runtime_fixtures import SHIM_DIR, TwoNodeSlurm

from envbuilder.export import render

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.runtime]

ALLREDUCE = """\
import json, os, socket, time
import torch
import torch.distributed as dist

start = time.time()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
time.sleep(float(os.environ.get("ALLREDUCE_HOLD", "0")))  # keeps concurrent jobs overlapping
dist.barrier()
out = {"rank": rank, "world": world, "sum": t.item(), "run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
       "master": os.environ.get("MASTER_ADDR"), "master_port": os.environ.get("MASTER_PORT"),
       "head_addr": os.environ.get("HEAD_ADDR"), "rdzv_port": os.environ.get("RDZV_PORT"),
       "host": socket.gethostname(), "slurm_job": os.environ.get("SLURM_JOB_ID"), "backend": dist.get_backend(),
       "start": start, "end": time.time()}
with open(f"result-{os.environ.get('SLURM_JOB_ID')}-{rank}.json", "w") as fh:
    json.dump(out, fh)
dist.destroy_process_group()
"""


def _job_dir(smoke_sif: Path, name: str, procs: int) -> tuple[Path, Path]:
    """A directory uid 1000 can write, with allreduce.py and the sbatch `export` renders for two nodes."""
    d = smoke_sif.parent / f"two-{name}"  # in the session's runtime dir (removed at its end)
    d.mkdir(mode=0o777)
    d.chmod(0o777)  # uid 1000 (Apptainer) writes its results here
    (d / "allreduce.py").write_text(ALLREDUCE)
    params = render.LaunchParams(gpus_per_node=0, nodes=2, procs_per_node=procs, train_script="allreduce.py")
    script = d / f"{smoke_sif.name}.torchrun-multinode.sbatch"
    script.write_text(render.render_launch("sif", smoke_sif, params)[".torchrun-multinode.sbatch"])
    return d, script


def _env(cluster: TwoNodeSlurm, **extra: str) -> None:
    cluster.env["PATH"] = f"{SHIM_DIR}{os.pathsep}{os.environ.get('PATH', '')}"  # `apptainer` in the job
    cluster.env.update(extra)


def _results(d: Path, job: str) -> list[dict[str, object]]:
    return sorted((json.loads(p.read_text()) for p in d.glob(f"result-{job}-*.json")),
                  key=lambda r: int(str(r["rank"])))


def _log(d: Path, job: str) -> str:
    p = d / f"slurm-{job}.out"
    return p.read_text(errors="replace")[-4000:] if p.exists() else "(no job output)"


def test_torchrun_sbatch_across_two_nodes(slurm_two_nodes: TwoNodeSlurm, smoke_sif: Path) -> None:
    cluster = slurm_two_nodes
    d, script = _job_dir(smoke_sif, "one", procs=2)
    _env(cluster)
    t0 = time.monotonic()
    rc, job = cluster.sbatch(script, d, 900, f"--output={d}/slurm-%j.out")
    seconds = time.monotonic() - t0
    assert rc == 0, _log(d, job)
    results = _results(d, job)
    assert [r["rank"] for r in results] == [0, 1, 2, 3], _log(d, job)
    for r in results:
        # 4 ranks met at one c10d rendezvous named by the job id and summed 1 + 2 + 3 + 4
        assert (r["world"], r["sum"], r["backend"], r["run_id"]) == (4, 10.0, "gloo", job)
        # the snippet's rendezvous endpoint: the first node's address (which the second node reached over the
        # veth pair) and the port from the job id; torch names the store's host by its hostname
        assert (r["head_addr"], r["rdzv_port"]) == (cluster.addrs[0], str(10000 + int(job) % 20000)), r
        assert r["master"] in (cluster.addrs[0], cluster.nodes[0]), r
    hosts = [r["host"] for r in results]
    assert sorted(hosts) == sorted(cluster.nodes * 2), hosts  # two workers on each node
    print(f"two-node torchrun job {job}: {seconds:.1f} s from sbatch to completion")


def test_two_concurrent_jobs_never_share_a_rendezvous(slurm_two_nodes: TwoNodeSlurm, smoke_sif: Path) -> None:
    """The defect seen by hand: with one fixed port, the second job's torchrun joined the first job's store.
    Both jobs here run on both nodes at the same time (their ranks' lifetimes overlap) and each sums its own."""
    cluster = slurm_two_nodes
    _env(cluster, ALLREDUCE_HOLD="8")
    dirs, jobs = [], []
    for name in ("first", "second"):
        d, script = _job_dir(smoke_sif, name, procs=1)
        dirs.append(d)
        jobs.append(cluster.submit(script, d, f"--output={d}/slurm-%j.out"))
    states = [cluster.wait_job(j) for j in jobs]
    cluster.env.pop("ALLREDUCE_HOLD")
    assert states == ["COMPLETED", "COMPLETED"], [_log(d, j) for d, j in zip(dirs, jobs, strict=True)]
    runs = [_results(d, j) for d, j in zip(dirs, jobs, strict=True)]
    for job, results in zip(jobs, runs, strict=True):
        assert [(r["rank"], r["world"], r["sum"], r["run_id"]) for r in results] == [(0, 2, 3.0, job), (1, 2, 3.0, job)]
        assert sorted(r["host"] for r in results) == sorted(cluster.nodes)
    ports = [{(r["rdzv_port"], r["master_port"]) for r in results} for results in runs]
    assert all(len(p) == 1 for p in ports) and ports[0] != ports[1], ports
    assert [next(iter(p))[0] for p in ports] == [str(10000 + int(j) % 20000) for j in jobs]
    spans = [(min(float(str(r["start"])) for r in res), max(float(str(r["end"])) for r in res)) for res in runs]
    assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1], f"the jobs did not overlap: {spans}"


PYXIS_STANDIN = Path(__file__).resolve().parent.parent / "fixtures" / "pyxis-standin"


def test_pyxis_sbatch_across_two_nodes_without_apptainer(slurm_two_nodes: TwoNodeSlurm, smoke_sqsh: Path) -> None:
    """The sqsh form (`srun --container-image=… torchrun`), no Apptainer anywhere. pyxis and enroot cannot be
    installed here, so `srun` is tests/fixtures/pyxis-standin/srun: a STAND-IN that runs each task in the
    unpacked squashfs (mount namespace + chroot, the --container-mounts and --container-workdir, the image's
    /etc/environment over the task's environment). What this checks is the snippet across two hosts and the
    artifact's own environment (torchrun and python found through /etc/environment), not pyxis itself."""
    cluster = slurm_two_nodes
    d = smoke_sqsh.parent / "two-pyxis"
    d.mkdir()
    (d / "allreduce.py").write_text(ALLREDUCE)
    params = render.LaunchParams(gpus_per_node=0, nodes=2, procs_per_node=2, train_script="allreduce.py")
    script = d / f"{smoke_sqsh.name}.torchrun-multinode.sbatch"
    script.write_text(render.render_launch("sqsh", smoke_sqsh, params)[".torchrun-multinode.sbatch"])
    cluster.env["PATH"] = f"{PYXIS_STANDIN}{os.pathsep}/usr/sbin:/usr/bin:/sbin:/bin"  # no apptainer shim
    cluster.env["PYXIS_STANDIN_CACHE"] = str(d / "unpacked")  # the unpacked image (~1 GB) goes with the job dir
    t0 = time.monotonic()
    try:
        rc, job = cluster.sbatch(script, d, 900, f"--output={d}/slurm-%j.out")
        seconds = time.monotonic() - t0
        assert rc == 0, _log(d, job)
        results = _results(d, job)
        assert [(r["rank"], r["world"], r["sum"], r["run_id"]) for r in results] == [
            (i, 4, 10.0, job) for i in range(4)], _log(d, job)
        assert sorted(str(r["host"]) for r in results) == sorted(cluster.nodes * 2)
        assert {(r["head_addr"], r["rdzv_port"]) for r in results} == {
            (cluster.addrs[0], str(10000 + int(job) % 20000))}
        print(f"two-node pyxis stand-in job {job}: {seconds:.1f} s from sbatch to completion (unpacking included)")
    finally:
        _env(cluster)
        cluster.env.pop("PYXIS_STANDIN_CACHE")
        shutil.rmtree(d, ignore_errors=True)
