"""The session's real servers (tests/runtime_fixtures.py): the OCI registry speaks TLS from the test CA and
refuses anyone without the htpasswd credentials; Docker's engine pushes to it; the HTTP server serves files."""

from __future__ import annotations

import base64
import io
import json
import ssl
import subprocess
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from runtime_fixtures import HttpServer, RegistryServer

pytestmark = pytest.mark.integration


def _get(url: str, ctx: ssl.SSLContext | None = None, auth: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_registry_tls_and_htpasswd(registry_server: RegistryServer) -> None:
    reg = registry_server
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(reg.url + "/v2/", context=ssl.create_default_context(), timeout=10)
    ctx = ssl.create_default_context(cafile=str(reg.ca_file))
    assert _get(reg.url + "/v2/", ctx) == 401
    assert _get(reg.url + "/v2/", ctx, _basic(reg.username, "wrong")) == 401
    assert _get(reg.url + "/v2/", ctx, _basic(reg.username, reg.password)) == 200
    assert reg.oci("team/wheels") == f"oci://localhost:{reg.port}/team/wheels"


@pytest.mark.docker
def test_docker_pushes_to_the_registry(registry_server: RegistryServer, tmp_path: Path) -> None:
    """The engine trusts the test CA (certs.d) and logs in with the fixture's credentials."""
    reg = registry_server
    tag = reg.ref("envbuilder-test/servers", "one-file")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"hello\n"))
    subprocess.run(["docker", "import", "-", tag], input=buf.getvalue(), check=True, capture_output=True)
    env = {"DOCKER_CONFIG": str(reg.docker_config(tmp_path / "docker")), "PATH": "/usr/bin:/bin"}
    try:
        push = subprocess.run(["docker", "push", tag], capture_output=True, text=True, env=env, timeout=120)
        assert push.returncode == 0, push.stderr
        ctx = ssl.create_default_context(cafile=str(reg.ca_file))
        assert _get(f"{reg.url}/v2/envbuilder-test/servers/manifests/one-file", ctx,
                    _basic(reg.username, reg.password)) == 200
        anon = subprocess.run(["docker", "push", tag], capture_output=True, text=True, timeout=120,
                              env={"DOCKER_CONFIG": str(tmp_path / "empty"), "PATH": "/usr/bin:/bin"})
        assert anon.returncode != 0 and "no basic auth credentials" in anon.stderr
    finally:
        subprocess.run(["docker", "image", "rm", tag], capture_output=True)


def test_http_server_serves_its_root(http_server: HttpServer) -> None:
    (http_server.root / "probe").mkdir()
    (http_server.root / "probe" / "x.json").write_text(json.dumps({"ok": True}))
    with urllib.request.urlopen(http_server.url + "/probe/x.json", timeout=10) as resp:
        assert json.loads(resp.read()) == {"ok": True}
    assert _get(http_server.url + "/probe/missing.json") == 404
