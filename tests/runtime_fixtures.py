"""Fixtures for the real-runtime tests: Apptainer from the cached sid rootfs and the smoke SIF.

Apptainer is Debian sid's, run by scripts/bin/apptainer as the unprivileged user `runner`
(uid 1000) inside the rootfs made by scripts/apptainer-rootfs.sh (cached under
~/.cache/envbuilder/apptainer-sid; scripts/setup-host.sh makes it). Files handed to it live in
world-readable directories made here, as they must for any unprivileged user.
Registered from tests/conftest.py (`pytest_plugins`), so session fixtures run once.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SHIM_DIR = REPO / "scripts" / "bin"


def runner_dir(prefix: str) -> Path:
    """A fresh directory uid 1000 can read and write (under /tmp, which the shim binds)."""
    d = Path(tempfile.mkdtemp(prefix=f"envbuilder-{prefix}-", dir="/tmp"))
    d.chmod(0o777)
    return d


@pytest.fixture(scope="session")
def apptainer_rootfs() -> Path:
    """The sid rootfs with Apptainer: made (or found cached) by the project's own script."""
    if os.geteuid() != 0:
        pytest.skip("entering the Apptainer rootfs needs root (mount namespace + pivot_root)")
    proc = subprocess.run([str(REPO / "scripts" / "apptainer-rootfs.sh")], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"scripts/apptainer-rootfs.sh failed:\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def apptainer(apptainer_rootfs: Path) -> str:
    """Path of the `apptainer` command (the shim that enters the rootfs)."""
    return str(SHIM_DIR / "apptainer")


@pytest.fixture(scope="session")
def apptainer_path_env(apptainer: str) -> dict[str, str]:
    """os.environ with scripts/bin first on PATH, so `apptainer` resolves to the shim."""
    return {**os.environ, "PATH": f"{SHIM_DIR}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_apptainer(apptainer: str, *args: str, timeout: int = 600, cwd: Path | None = None,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([apptainer, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


@pytest.fixture(scope="session")
def runtime_dir() -> Iterator[Path]:
    """One world-writable work dir for the session's runtime artifacts (removed at the end)."""
    import shutil

    d = runner_dir("runtimes")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def smoke_sif(smoke_image: str, smoke_lockdir: Path, runtime_dir: Path) -> Path:
    """The smoke image exported to a SIF, with its .def and CPU-form launch snippets beside it.

    A warm run gets the SIF from export's own content-addressed cache (~/.cache/envbuilder/exports,
    keyed by image id, options and export code); the side files are rendered each session (their
    rendezvous port is picked per session)."""
    from envbuilder.export.pipeline import ExportOptions, export_image
    from envbuilder.export.render import LaunchParams

    out = runtime_dir / "smoke.sif"
    export_image(ExportOptions(image=smoke_image, fmt="sif", output=out, lock_dir=smoke_lockdir,
                               launch=LaunchParams(gpus_per_node=0, nodes=1, procs_per_node=2,
                                                   train_script="allreduce.py", rdzv_port=free_port())))
    out.chmod(0o644)  # a cache hit is a hard link: make sure uid 1000 can read it
    return out


# --- Slurm: munged + slurmctld + slurmd on localhost, started and stopped here -----------------

SLURM_CONF = """\
ClusterName=envbuilder-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/ctld-state
SlurmdSpoolDir={dir}/slurmd-spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
{node_line}
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""
DAEMON_MARK = "envbuilder-slurm-"  # prefix of the fixture's dirs; stale daemons are found by it


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SlurmCluster:
    """A one-node Slurm on localhost with a private munge socket, config and state directory."""

    def __init__(self, base: Path) -> None:
        import shutil
        import socket

        for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
            if not shutil.which(tool):
                pytest.fail(f"{tool} is not installed; run scripts/setup-host.sh (slurmctld slurmd munge)")
        self.dir = base
        self.node = socket.gethostname().split(".")[0]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.conf = base / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        import time

        d = self.dir
        for sub in ("ctld-state", "slurmd-spool"):
            (d / sub).mkdir(mode=0o700)
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={d}/munge.sock",
                               f"--key-file={key}", f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
                               f"--seed-file={d}/munge.seed"])
        self._wait(lambda: (d / "munge.sock").exists(), "munged socket", d / "munged.log")
        hw = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
        fields = dict(f.split("=", 1) for f in hw.split() if "=" in f)
        fields["NodeName"] = self.node
        fields["NodeAddr"] = "127.0.0.1"
        fields["RealMemory"] = str(min(int(fields.get("RealMemory", "1000")), 4000))
        node_line = " ".join(f"{k}={v}" for k, v in fields.items()) + " State=UNKNOWN"
        self.conf.write_text(SLURM_CONF.format(node=self.node, dir=d, ctld_port=free_port(),
                                               slurmd_port=free_port(), node_line=node_line))
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        t0 = time.monotonic()
        self._wait(lambda: self.node_state() in ("idle", "idle*"), "node idle", d / "slurmd.log", timeout=90)
        self.start_seconds = time.monotonic() - t0

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.dir / f"{name}.out", "wb") as log:  # the child keeps its own copy of the fd
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True)
        self.procs.append(proc)
        (self.dir / f"{name}.fixture-pid").write_text(str(proc.pid))

    def _wait(self, ready: Any, what: str, log: Path, timeout: float = 30) -> None:
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ready():
                return
            for p in self.procs:
                if p.poll() is not None:
                    break
            else:
                time.sleep(0.3)
                continue
            break
        text = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
        outs = "".join((self.dir / f).read_text(errors="replace")[-1500:]
                       for f in ("munged.out", "slurmctld.out", "slurmd.out") if (self.dir / f).exists())
        pytest.fail(f"Slurm fixture: {what} not ready after {timeout:.0f} s\n{text}\n{outs}")

    def node_state(self) -> str:
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=self.env)
        return r.stdout.strip() if r.returncode == 0 else ""

    def sbatch(self, script: Path, cwd: Path, timeout: int = 900, *args: str) -> tuple[int, str]:
        """Submit and wait (`sbatch --wait`): (exit status, job id)."""
        r = subprocess.run(["sbatch", "--parsable", "--wait", f"--chdir={cwd}", *args, str(script)],
                           capture_output=True, text=True, env=self.env, timeout=timeout, cwd=cwd)
        job = r.stdout.strip().split(";")[0]
        return r.returncode, job

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "--partition=debug"], capture_output=True, env=self.env)
        for proc in reversed(self.procs):  # slurmd, slurmctld, then munged
            stop_process(proc)
        self.procs.clear()


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def reap_stale_daemons() -> None:
    """Daemons a killed earlier session left: pids this fixture recorded, still running its config."""
    import glob
    import signal

    for pid_file in glob.glob(f"/tmp/{DAEMON_MARK}*/*.fixture-pid"):
        try:
            pid = int(Path(pid_file).read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            continue
        if str(Path(pid_file).parent) in cmdline:
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    import shutil

    if os.geteuid() != 0:
        pytest.skip("the Slurm fixture runs slurmd as root (it starts job steps as any user)")
    reap_stale_daemons()
    base = Path(tempfile.mkdtemp(prefix=DAEMON_MARK, dir="/tmp"))
    cluster = SlurmCluster(base)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
