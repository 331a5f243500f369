"""Fixtures for the real-runtime tests: Apptainer from the cached sid rootfs and the smoke SIF, a
one-node Slurm, a TLS registry with htpasswd auth (Debian's docker-registry) and a plain HTTP server.

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


@pytest.fixture(scope="session")
def smoke_sqsh(smoke_image: str, smoke_lockdir: Path, runtime_dir: Path) -> Path:
    """The smoke image exported to an enroot squashfs (export's cache makes a warm run cheap)."""
    from envbuilder.export.pipeline import ExportOptions, export_image

    out = runtime_dir / "smoke.sqsh"
    export_image(ExportOptions(image=smoke_image, fmt="sqsh", output=out, lock_dir=smoke_lockdir, snippets=False))
    out.chmod(0o644)
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


# --- Servers: an OCI registry (Debian's docker-registry) with TLS + htpasswd, and a static HTTP server ----------

SERVER_MARK = "envbuilder-servers-"  # prefix of the server fixtures' dirs; stale daemons are found by it
REGISTRY_CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {dir}/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  tls:
    certificate: {dir}/server.crt
    key: {dir}/server.key
auth:
{auth}"""
HTPASSWD_AUTH = """\
  htpasswd:
    realm: envbuilder-test
    path: {dir}/htpasswd
"""


def make_test_ca(d: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate it signs for `hosts`: (ca.crt, server.crt, server.key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "envbuilder test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = (d / "ca.crt", d / "server.crt", d / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    paths[2].chmod(0o600)
    return paths


def _system_ca_bundle() -> bytes:
    import ssl

    paths = ssl.get_default_verify_paths()
    for candidate in (os.environ.get("SSL_CERT_FILE"), paths.cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_bytes()
    return b""


class _Daemon:
    """One server process in its own session, its output in DIR/NAME.out, its pid recorded for reaping."""

    def __init__(self, d: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with open(d / f"{name}.out", "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        (d / f"{name}.fixture-pid").write_text(str(self.proc.pid))
        self.log = d / f"{name}.out"

    def wait_listening(self, port: int, what: str, timeout: float = 30) -> None:
        import socket
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                break
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        out = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no output)"
        self.stop()
        pytest.fail(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s:\n{out}")

    def stop(self) -> None:
        stop_process(self.proc)


class RegistryServer:
    """A real OCI distribution registry (Debian's `docker-registry`, the CNCF distribution) on localhost.

    The interface the tests use:
      host          "localhost:PORT" (the name the TLS certificate is issued for)
      url           "https://localhost:PORT" (the /v2/ API under it)
      ca_file       the test CA's PEM certificate alone
      ca_bundle     the system's CA bundle plus the test CA: pass it as --ca-bundle (or SSL_CERT_FILE) where the same
                    command also reaches PyPI through the TLS-intercepting proxy
      username, password   htpasswd (bcrypt) credentials; anything else gets 401
      storage       the registry's filesystem storage root (tests may tamper with blobs under it)
      ref(repo, tag)  "localhost:PORT/REPO:TAG", an image reference for `docker push` / `build --push`
      oci(repo)     "oci://localhost:PORT/REPO", a wheel-cache URL
      docker_config(dir)   writes DIR/config.json with these credentials and returns DIR (set DOCKER_CONFIG=DIR
                    for docker and envbuilder)
    Docker's engine needs no set-up to push here: it trusts the CA through /etc/docker/certs.d/HOST/ca.crt,
    which the fixture writes when it can (root) and removes at the end of the session.
    """

    username = "envbuilder"

    def __init__(self, d: Path) -> None:
        import secrets
        import shutil

        for tool in ("docker-registry", "htpasswd"):
            if not shutil.which(tool):
                pytest.fail(f"{tool} is not installed; run scripts/setup-host.sh (docker-registry apache2-utils)")
        self.dir = d
        self.port = free_port()
        self.host = f"localhost:{self.port}"
        self.url = f"https://{self.host}"
        self.password = secrets.token_urlsafe(18)
        self.storage = d / "storage"
        self.ca_file, _, _ = make_test_ca(d)
        self.ca_bundle = d / "ca-bundle.pem"
        self.ca_bundle.write_bytes(_system_ca_bundle() + b"\n" + self.ca_file.read_bytes())
        self._certs_d: Path | None = None
        self.daemon: _Daemon | None = None

    def start(self) -> None:
        d = self.dir
        self.storage.mkdir()
        hashed = subprocess.run(["htpasswd", "-Bbn", self.username, self.password], capture_output=True, text=True,
                                check=True).stdout
        (d / "htpasswd").write_text(hashed)
        (d / "config.yml").write_text(REGISTRY_CONFIG.format(dir=d, port=self.port, auth=self.auth_config()))
        self.daemon = _Daemon(d, "registry", ["docker-registry", "serve", str(d / "config.yml")])
        self.daemon.wait_listening(self.port, "docker-registry")
        self._trust_in_docker()

    def auth_config(self) -> str:
        """The config's `auth:` block (htpasswd here; a subclass may configure token auth)."""
        return HTPASSWD_AUTH.format(dir=self.dir)

    def _trust_in_docker(self) -> None:
        import shutil

        certs_d = Path("/etc/docker/certs.d") / self.host
        try:
            certs_d.mkdir(parents=True, exist_ok=False)
            shutil.copy(self.ca_file, certs_d / "ca.crt")
            self._certs_d = certs_d
        except OSError:
            self._certs_d = None  # not root: docker treats 127.0.0.0/8 as insecure anyway

    def ref(self, repo: str, tag: str) -> str:
        return f"{self.host}/{repo}:{tag}"

    def oci(self, repo: str) -> str:
        return f"oci://{self.host}/{repo}"

    def docker_config(self, d: Path) -> Path:
        import base64
        import json

        d.mkdir(parents=True, exist_ok=True)
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        path = d / "config.json"
        path.write_text(json.dumps({"auths": {self.host: {"auth": auth}}}))
        path.chmod(0o600)
        return d

    def stop(self) -> None:
        import shutil

        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None
        if self._certs_d is not None:
            shutil.rmtree(self._certs_d, ignore_errors=True)
            self._certs_d = None


class HttpServer:
    """A plain static HTTP server (python -m http.server) serving `root` on 127.0.0.1.

      root   the directory it serves (tests publish into sub-directories of it)
      url    "http://127.0.0.1:PORT" (no trailing slash)
    """

    def __init__(self, d: Path) -> None:
        import sys

        self.root = d / "www"
        self.root.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.daemon = _Daemon(d, "http", [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1",
                                          "--directory", str(self.root)])
        self.daemon.wait_listening(self.port, "python -m http.server")

    def stop(self) -> None:
        self.daemon.stop()


def reap_stale_servers() -> None:
    """Servers that a killed earlier session left: pids these fixtures recorded, still running their config,
    whose owning pytest process is gone (other sessions on this machine keep theirs)."""
    import glob
    import signal

    for pid_file in glob.glob(f"/tmp/{SERVER_MARK}*/*.fixture-pid"):
        d = Path(pid_file).parent
        try:
            owner = int((d / "owner-pid").read_text())
            if owner == os.getpid() or Path(f"/proc/{owner}").exists():
                continue
            pid = int(Path(pid_file).read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            continue
        if str(d) in cmdline:
            os.kill(pid, signal.SIGKILL)


def server_dir(kind: str) -> Path:
    reap_stale_servers()
    base = Path(tempfile.mkdtemp(prefix=f"{SERVER_MARK}{kind}-", dir="/tmp"))
    (base / "owner-pid").write_text(str(os.getpid()))
    return base


@pytest.fixture(scope="session")
def registry_server() -> Iterator[RegistryServer]:
    """The session's registry: TLS from a test CA (`ca_file`), htpasswd auth, storage in a private dir."""
    import shutil

    base = server_dir("registry")
    server = RegistryServer(base)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def http_server() -> Iterator[HttpServer]:
    """The session's static HTTP server over a private directory (`root`), at `url`."""
    import shutil

    base = server_dir("http")
    server = HttpServer(base)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


# --- Slurm across two nodes: each slurmd in its own network namespace ------------------------------------------

TWO_NODE_CONF = """\
ClusterName=envbuilder-two
SlurmctldHost={head}({head_addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/ctld-state
SlurmdSpoolDir={dir}/slurmd-spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
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
{node_lines}
PartitionName=two Nodes={nodes} Default=YES MaxTime=INFINITE State=UP
"""
# RFC 2544's benchmarking range: the two namespaces' addresses exist only on their veth pair
TWO_NODE_NET = "198.18.{n}.{host}"


class TwoNodeSlurm(SlurmCluster):
    """Two Slurm nodes on one machine, as two hosts: each slurmd in its own network namespace (`ip netns add`)
    with its own hostname (a UTS namespace) and an /etc/hosts that names both, joined by one veth pair. The
    head node (first namespace) also runs slurmctld; clients (sbatch, sinfo) run there too. `hostname
    --ip-address` on a node gives its own address, so torchrun's rendezvous meets on the first node's address
    over the veth pair, as across two hosts. One munged serves both (its socket is a file both can reach)."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        for tool in ("ip", "unshare", "nsenter"):
            import shutil

            if not shutil.which(tool):
                pytest.fail(f"{tool} is not installed; run scripts/setup-host.sh (iproute2, util-linux)")
        tag = f"{os.getpid() % 100000:05d}"
        self.nodes = [f"ebn{tag}a", f"ebn{tag}b"]  # also the namespaces' names
        self.subnet = (os.getpid() % 250) + 1
        self.addrs = [TWO_NODE_NET.format(n=self.subnet, host=h) for h in (1, 2)]
        self.node = self.nodes[0]
        self.netns: list[str] = []

    def _run(self, *argv: str) -> None:
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail(f"two-node fixture: {' '.join(argv)} failed: {r.stderr.strip()}")

    def _network(self) -> None:
        """Namespaces, the veth pair between them, addresses, and each node's /etc/hosts."""
        a, b = self.nodes
        for ns in self.nodes:
            self._run("ip", "netns", "add", ns)
            self.netns.append(ns)
            (self.dir / f"{ns}.fixture-netns").write_text(ns)
            self._run("ip", "-n", ns, "link", "set", "lo", "up")
        self._run("ip", "link", "add", "eb0", "netns", a, "type", "veth", "peer", "name", "eb0", "netns", b)
        for ns, addr in zip(self.nodes, self.addrs, strict=True):
            self._run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eb0")
            self._run("ip", "-n", ns, "link", "set", "eb0", "up")
        names = zip(self.nodes, self.addrs, strict=True)
        hosts = "127.0.0.1 localhost\n" + "".join(f"{addr} {n}\n" for n, addr in names)
        (self.dir / "hosts").write_text(hosts)
        (self.dir / "hosts").chmod(0o644)

    def on_node(self, i: int, argv: list[str]) -> list[str]:
        """`argv` on node `i`: its network namespace, its hostname and its /etc/hosts (a private mount ns)."""
        inner = (f'hostname {self.nodes[i]} && mount --bind {self.dir}/hosts /etc/hosts && exec "$@"')
        # nsenter, not `ip netns exec`: that one mounts a fresh /sys, without the cgroup tree slurmd reads
        return ["nsenter", f"--net=/run/netns/{self.nodes[i]}", "unshare", "--uts", "--mount", "--propagation",
                "private", "sh", "-c", inner, "node", *argv]

    def start(self) -> None:
        import time

        d = self.dir
        for sub in ("ctld-state", *(f"slurmd-spool-{n}" for n in self.nodes)):
            (d / sub).mkdir(mode=0o700)
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={d}/munge.sock",
                               f"--key-file={key}", f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
                               f"--seed-file={d}/munge.seed"])
        self._wait(lambda: (d / "munge.sock").exists(), "munged socket", d / "munged.log")
        self._network()
        hw = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
        fields = dict(f.split("=", 1) for f in hw.split() if "=" in f)
        fields["RealMemory"] = str(min(int(fields.get("RealMemory", "1000")), 4000))
        lines = []
        for name, addr in zip(self.nodes, self.addrs, strict=True):
            fields.update(NodeName=name, NodeAddr=addr)
            lines.append(" ".join(f"{k}={v}" for k, v in fields.items()) + " State=UNKNOWN")
        self.conf.write_text(TWO_NODE_CONF.format(
            head=self.nodes[0], head_addr=self.addrs[0], dir=d, ctld_port=free_port(), slurmd_port=free_port(),
            node_lines="\n".join(lines), nodes=",".join(self.nodes)))
        self._spawn("slurmctld", self.on_node(0, ["slurmctld", "-D", "-i", "-f", str(self.conf)]))
        for i, name in enumerate(self.nodes):
            self._spawn(f"slurmd-{name}", self.on_node(i, ["slurmd", "-D", "-f", str(self.conf), "-N", name]))
        t0 = time.monotonic()
        self._wait(lambda: self.node_states() == ["idle", "idle"], "both nodes idle", d / "slurmctld.log",
                   timeout=90)
        self.start_seconds = time.monotonic() - t0

    def client(self, argv: list[str]) -> list[str]:
        """A Slurm client command, run on the head node (slurmctld listens on its address only)."""
        return ["nsenter", f"--net=/run/netns/{self.nodes[0]}", *argv]

    def node_states(self) -> list[str]:
        r = subprocess.run(self.client(["sinfo", "-h", "-N", "-o", "%T"]), capture_output=True, text=True,
                           env=self.env)
        return sorted(s.rstrip("*") for s in r.stdout.split()) if r.returncode == 0 else []

    def node_state(self) -> str:
        return ",".join(self.node_states())

    def submit(self, script: Path, cwd: Path, *args: str) -> str:
        """sbatch without waiting: the job id."""
        r = subprocess.run(self.client(["sbatch", "--parsable", f"--chdir={cwd}", *args, str(script)]),
                           capture_output=True, text=True, env=self.env, cwd=cwd, timeout=60)
        if r.returncode != 0:
            pytest.fail(f"sbatch failed: {r.stderr}")
        return r.stdout.strip().split(";")[0]

    def wait_job(self, job: str, timeout: float = 900) -> str:
        """Wait until `job` left the queue; its final state (COMPLETED, FAILED, ...)."""
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r = subprocess.run(self.client(["scontrol", "show", "job", job, "-o"]), capture_output=True,
                               text=True, env=self.env)
            state = next((f.split("=", 1)[1] for f in r.stdout.split() if f.startswith("JobState=")), "")
            if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                return state
            time.sleep(1)
        subprocess.run(self.client(["scancel", job]), env=self.env, capture_output=True)
        return "TIMEOUT(test)"

    def sbatch(self, script: Path, cwd: Path, timeout: int = 900, *args: str) -> tuple[int, str]:
        job = self.submit(script, cwd, *args)
        state = self.wait_job(job, timeout)
        return (0 if state == "COMPLETED" else 1), job

    def stop(self) -> None:
        subprocess.run(self.client(["scancel", "--full", "--partition=two"]), capture_output=True, env=self.env)
        for proc in reversed(self.procs):
            stop_process(proc)
        self.procs.clear()
        for ns in self.netns:  # deleting a namespace deletes its end of the veth pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.netns.clear()


def reap_stale_netns() -> None:
    """Namespaces a killed earlier session left (recorded in its fixture dir; its daemons are reaped first)."""
    import glob

    for f in glob.glob(f"/tmp/{DAEMON_MARK}*/*.fixture-netns"):
        d = Path(f).parent
        alive = False
        for pid_file in d.glob("*.fixture-pid"):
            try:
                alive = alive or Path(f"/proc/{int(pid_file.read_text())}").exists()
            except (OSError, ValueError):
                continue
        if not alive:
            subprocess.run(["ip", "netns", "del", Path(f).read_text().strip()], capture_output=True)
            Path(f).unlink(missing_ok=True)


@pytest.fixture(scope="session")
def slurm_two_nodes() -> Iterator[TwoNodeSlurm]:
    import shutil

    if os.geteuid() != 0:
        pytest.skip("the two-node fixture makes network namespaces and runs slurmd as root")
    reap_stale_daemons()
    reap_stale_netns()
    base = Path(tempfile.mkdtemp(prefix=DAEMON_MARK + "two-", dir="/tmp"))
    cluster = TwoNodeSlurm(base)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
