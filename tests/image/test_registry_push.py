"""`build --push`, `push` and `export REGISTRY/NAME` against the real registry of tests/runtime_fixtures.py
(Debian's docker-registry: TLS from a test CA, htpasswd auth).

Each push is checked against the registry itself (the manifest digest it serves for the tag), and the
password is looked for, in plain and in its base64 `user:password` form, in everything envbuilder wrote or
printed: stdout, stderr, the build log, the --json reports, the push record, the lock directory, the
exported artifact and its launch snippets, and the pushed image's own layers (`docker save`).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from runtime_fixtures import RegistryServer

from envbuilder.image import engine

pytestmark = [pytest.mark.integration, pytest.mark.docker]

REPO = "envbuilder-test/launch-smoke"


def _cli(args: list[str], env: dict[str, str], timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _registry_digest(reg: RegistryServer, repo: str, tag: str) -> str:
    """What the registry itself serves for REPO:TAG (Docker-Content-Digest of the manifest)."""
    auth = base64.b64encode(f"{reg.username}:{reg.password}".encode()).decode()
    accept = ", ".join(["application/vnd.docker.distribution.manifest.v2+json",
                        "application/vnd.oci.image.manifest.v1+json",
                        "application/vnd.docker.distribution.manifest.list.v2+json",
                        "application/vnd.oci.image.index.v1+json"])
    req = urllib.request.Request(f"{reg.url}/v2/{repo}/manifests/{tag}", method="HEAD",
                                 headers={"Authorization": f"Basic {auth}", "Accept": accept})
    ctx = ssl.create_default_context(cafile=str(reg.ca_file))
    with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
        return str(resp.headers["Docker-Content-Digest"])


def _needles(reg: RegistryServer) -> list[bytes]:
    return [reg.password.encode(), base64.b64encode(f"{reg.username}:{reg.password}".encode())]


def _assert_absent(needles: list[bytes], where: str, chunks: Iterable[bytes]) -> None:
    tail = b""
    for chunk in chunks:
        window = tail + chunk
        for n in needles:
            assert n not in window, f"a credential is in {where}"
        tail = window[-64:]


def _files(*roots: Path) -> Iterable[tuple[str, bytes]]:
    for root in roots:
        for p in [root] if root.is_file() else sorted(root.rglob("*")):
            if p.is_file():
                yield str(p), p.read_bytes()


@pytest.fixture(scope="module")
def pushed(registry_server: RegistryServer, smoke_lockdir: Path, smoke_image: str, debian_base_image: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """`build --push` of the smoke image (BuildKit-cached: the build is the fixture's), with credentials
    only in a Docker config the engine client reads. The registry's tags on the local image are removed after."""
    reg = registry_server
    d = tmp_path_factory.mktemp("push")
    env = {**os.environ, "DOCKER_CONFIG": str(reg.docker_config(d / "docker"))}
    log = d / "build.log"
    ref = reg.ref(REPO, "pushed")
    proc = _cli(["build", str(smoke_lockdir), "--tag", smoke_image, "--base", debian_base_image, "--no-scan",
                 "--push", ref, "--log", str(log), "--json"], env)
    try:
        assert proc.returncode == 0, proc.stderr[-4000:]
        yield {"proc": proc, "log": log, "ref": ref, "env": env, "dir": d, "report": json.loads(proc.stdout)}
    finally:
        tags = engine.inspect(engine.client(), smoke_image).get("RepoTags") or []
        for t in tags:
            if t.startswith(reg.host + "/"):
                subprocess.run(["docker", "image", "rm", t], capture_output=True)


def test_build_push_records_the_registry_digest(pushed: dict[str, object], registry_server: RegistryServer,
                                                smoke_image: str) -> None:
    report = pushed["report"]
    assert isinstance(report, dict)
    push = report["push"]
    digest = _registry_digest(registry_server, REPO, "pushed")
    assert push["reference"] == pushed["ref"] and push["digest"] == digest
    assert push["by_digest"] == f"{registry_server.host}/{REPO}@{digest}"
    assert push["image_id"] == report["image_id"]
    # the engine's record of the image names the pushed digest
    attrs = engine.inspect(engine.client(), smoke_image)
    assert push["by_digest"] in attrs["RepoDigests"]
    proc = pushed["proc"]
    assert isinstance(proc, subprocess.CompletedProcess)
    assert f"pushed {push['by_digest']}" in proc.stderr


def test_no_credential_in_outputs_logs_lock_or_image_layers(pushed: dict[str, object], registry_server: RegistryServer,
                                                            smoke_lockdir: Path, smoke_image: str) -> None:
    needles = _needles(registry_server)
    proc = pushed["proc"]
    assert isinstance(proc, subprocess.CompletedProcess)
    _assert_absent(needles, "build's stdout (--json)", [proc.stdout.encode()])
    _assert_absent(needles, "build's stderr", [proc.stderr.encode()])
    log = pushed["log"]
    assert isinstance(log, Path)
    for name, data in _files(log, smoke_lockdir):
        _assert_absent(needles, name, [data])
    # the image as pushed: every layer and its config
    _assert_absent(needles, f"the layers of {smoke_image}", engine.save_stream(engine.client(), smoke_image))
    # the control: the needle search finds the password where it is (the Docker config the test wrote)
    d = pushed["dir"]
    assert isinstance(d, Path)
    with pytest.raises(AssertionError, match="a credential is in"):
        _assert_absent(needles, "config.json", [(d / "docker" / "config.json").read_bytes()])


def test_push_command_and_export_from_the_registry_by_digest(pushed: dict[str, object],
                                                            registry_server: RegistryServer, smoke_image: str,
                                                            tmp_path: Path) -> None:
    reg = registry_server
    env = pushed["env"]
    assert isinstance(env, dict)
    record = tmp_path / "push.json"
    proc = _cli(["push", smoke_image, reg.ref(REPO, "again"), "-o", str(record), "--json"], env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digest = _registry_digest(reg, REPO, "again")
    assert json.loads(record.read_text())["digest"] == digest == json.loads(proc.stdout)["digest"]
    by_digest = f"{reg.host}/{REPO}@{digest}"

    out = tmp_path / "from-registry.sqsh"
    exp = _cli(["export", reg.ref(REPO, "again"), "-o", str(out), "--gpus-per-node", "0", "--no-cache",
                "--json"], env)
    assert exp.returncode == 0, exp.stderr[-3000:]
    result = json.loads(exp.stdout)
    assert result["registry_image"] == by_digest  # the tag, resolved by the registry, named by its digest
    assert result["image_id"] == engine.inspect(engine.client(), smoke_image)["Id"]
    pyxis = Path(str(out) + ".slurm-pyxis.sh").read_text()
    assert f"ENVBUILDER_IMAGE='{reg.host}#{REPO}@{digest}' sbatch" in pyxis  # enroot's spelling, quoted
    needles = _needles(reg)
    for name, data in _files(record, *(tmp_path.glob("from-registry.sqsh*"))):
        _assert_absent(needles, name, [data])
    for stream in (proc.stdout, proc.stderr, exp.stdout, exp.stderr):
        _assert_absent(needles, "push/export output", [stream.encode()])


def test_push_without_credentials_is_a_typed_auth_error(pushed: dict[str, object], registry_server: RegistryServer,
                                                       smoke_image: str, tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER_CONFIG": str(tmp_path / "empty")}
    proc = _cli(["push", smoke_image, registry_server.ref(REPO, "anonymous")], env, timeout=600)
    assert proc.returncode == 36, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-2].startswith("error:") and "refused the credentials" in lines[-2]
    assert lines[-1].strip().startswith("fix:") and "docker login" in lines[-1]
    assert "Traceback" not in proc.stderr
    wrong = {**os.environ, "DOCKER_CONFIG": str(tmp_path / "wrong")}
    (tmp_path / "wrong").mkdir()
    auth = base64.b64encode(f"{registry_server.username}:not-the-password".encode()).decode()
    (tmp_path / "wrong" / "config.json").write_text(json.dumps({"auths": {registry_server.host: {"auth": auth}}}))
    exp = _cli(["export", registry_server.ref(REPO, "no-such-tag"), "-o", str(tmp_path / "x.sqsh")], wrong)
    assert exp.returncode == 36, exp.stderr
    assert not (tmp_path / "x.sqsh").exists() and "not-the-password" not in exp.stderr


def test_nightly_push_step_records_the_digest(pushed: dict[str, object], registry_server: RegistryServer,
                                              smoke_lockdir: Path, smoke_image: str, tmp_path: Path) -> None:
    """`nightly step push` (the workflow's last step): NAMESPACE/<tag's name>:<tag>, recorded in <row>/push.json."""
    reg = registry_server
    env = pushed["env"]
    assert isinstance(env, dict)
    proc = _cli(["nightly", "step", "push", "--row", smoke_lockdir.name, "--locks", str(smoke_lockdir.parent),
                 "--tag", smoke_image, "-o", str(tmp_path), "--push", f"{reg.host}/nightly"], env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    name, _, tag = smoke_image.rsplit("/", 1)[-1].partition(":")
    record = json.loads((tmp_path / smoke_lockdir.name / "push.json").read_text())
    assert record["reference"] == f"{reg.host}/nightly/{name}:{tag}"
    assert record["digest"] == _registry_digest(reg, f"nightly/{name}", tag)
    for where, data in _files(tmp_path):
        _assert_absent(_needles(reg), where, [data])
    _assert_absent(_needles(reg), "nightly step output", [proc.stdout.encode(), proc.stderr.encode()])
