# NeMo-Run executors for nemo-v2.3.0.sqsh (rendered by envbuilder export).
#
# slurm_executor(): NeMo-Run's SlurmExecutor with this image as its container image: pyxis runs each
# task in it (srun --container-image) with the directory you submit from mounted at /workspace.
# NeMo-Run sets the working directory itself (/nemo_run/code), so name the script by its path under
# /workspace: train_script() below does, for allreduce.py in the directory you submit from.
# local_executor(): NeMo-Run's LocalExecutor, for a shell that is already inside the image (an
# interactive `srun --container-image=... --pty bash`, or the image as a login node's environment).
#
# The image: the exported file by default; ENVBUILDER_IMAGE names another copy (e.g. on shared
# storage).
#
# Needs nemo-run where you submit from (pip install nemo-run; nemo-run 0.11.1 imports leptonai.api.v1,
# which leptonai 0.47 removed: add 'leptonai<0.47' with it). Use it from your own script:
#
#     import runpy
#     import nemo_run as run
#
#     executors = runpy.run_path("nemo-v2.3.0.sqsh.nemo-run.py")
#     executor = executors["slurm_executor"](account="my-account", partition="batch")
#     run.run(executors["train_script"](), executor=executor)
#

from __future__ import annotations

import os
import random

import nemo_run as run

IMAGE = os.environ.get("ENVBUILDER_IMAGE", '/shared/images/nemo-v2.3.0.sqsh')
NODES = 2
GPUS_PER_NODE = 0  # 0: the CPU form (gloo workers, no GPU request)
PROCS_PER_NODE = 2
TRAIN_COMMAND = ['allreduce.py']  # --train-script, as words


def train_script(*args: str, root: str = "/workspace") -> run.Script:
    """The training script under `root` (the mounted submit directory; "." for local_executor), run by python."""
    path, *default_args = TRAIN_COMMAND
    return run.Script(path=os.path.join(root, path), args=[*default_args, *args], entrypoint="python")


def rendezvous_port() -> int:
    """NeMo-Run writes one fixed port into the job script, and the job id is not known before submission:
    draw one per submission, so two jobs that share a head node do not meet at one rendezvous store."""
    return int(os.environ.get("ENVBUILDER_RDZV_PORT") or random.randrange(10000, 30000))


def slurm_executor(account: str, partition: str | None = None, *, nodes: int = NODES, time: str = "01:00:00",
                   job_dir: str | None = None, mounts: tuple[str, ...] = (),
                   tunnel: run.SSHTunnel | run.LocalTunnel | None = None) -> run.SlurmExecutor:
    """One task per node; torchrun starts PROCS_PER_NODE workers on each (NeMo-Run's torchrun launcher).

    `tunnel`: run.SSHTunnel(host=..., user=..., job_dir=...) to submit from a workstation; by default
    NeMo-Run submits on this machine (a login node) and keeps its files under `job_dir`."""
    workdir = os.getcwd()
    return run.SlurmExecutor(
        account=account,
        partition=partition,
        nodes=nodes,
        ntasks_per_node=1,
        gpus_per_node=GPUS_PER_NODE or None,
        exclusive=True if GPUS_PER_NODE else None,
        time=time,
        container_image=IMAGE,
        container_mounts=[f"{workdir}:/workspace", *mounts],
        launcher=run.Torchrun(rdzv_port=rendezvous_port()),
        torchrun_nproc_per_node=PROCS_PER_NODE,
        packager=run.Packager(),  # the code is in the mounted directory, not packed from git
        tunnel=tunnel or run.LocalTunnel(job_dir=job_dir or os.path.join(workdir, "nemo-run-jobs")),
    )


def local_executor(procs: int = PROCS_PER_NODE) -> run.LocalExecutor:
    """PROCS workers on this machine through torchrun, inside the image you are already in."""
    return run.LocalExecutor(ntasks_per_node=procs, launcher="torchrun", packager=run.Packager())
