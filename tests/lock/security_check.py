"""Runs inside a venv holding a committed lock's own versions of every package that depends on urllib3 or
cryptography (tests/lock/test_lock_security.py builds it): each one imports and does real work with the
overridden urllib3 >= 2.6.3 and cryptography >= 43. Standard library plus the venv; prints JSON.

    python security_check.py PORT PACKAGE...

PORT is a local HTTP server of the test (it answers GET / with "ok" and GET /s3 with an S3 bucket list).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import sys
from collections.abc import Callable


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in md.version(name).split(".")[:3] if p.isdigit())


def check_urllib3(port: int) -> str:
    import urllib3

    assert _version("urllib3") >= (2, 6, 3), md.version("urllib3")
    r = urllib3.PoolManager().request("GET", f"http://127.0.0.1:{port}/")
    assert r.status == 200 and r.data == b"ok"
    return f"urllib3 {urllib3.__version__} GET 200"


def check_cryptography(port: int) -> str:
    from cryptography.fernet import Fernet
    from cryptography.hazmat.primitives.asymmetric import ec

    f = Fernet(Fernet.generate_key())
    assert f.decrypt(f.encrypt(b"x")) == b"x"
    ec.generate_private_key(ec.SECP256R1()).sign(b"x", ec.ECDSA(__import__(
        "cryptography.hazmat.primitives.hashes", fromlist=["SHA256"]).SHA256()))
    return f"cryptography {md.version('cryptography')} fernet + ecdsa"


def check_requests(port: int) -> str:
    import requests

    r = requests.get(f"http://127.0.0.1:{port}/", timeout=10)
    assert r.status_code == 200 and r.text == "ok"
    return f"requests {requests.__version__} GET 200"


def check_botocore(port: int) -> str:
    import botocore.session

    client = botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}/s3", aws_access_key_id="k",
        aws_secret_access_key="s")
    buckets = [b["Name"] for b in client.list_buckets()["Buckets"]]
    assert buckets == ["envbuilder"], buckets
    return f"botocore {md.version('botocore')} s3 list_buckets"


def check_docker(port: int) -> str:
    import docker

    sock = "/var/run/docker.sock"
    if not os.path.exists(sock):
        docker.DockerClient(base_url=f"tcp://127.0.0.1:{port}")
        return f"docker {docker.__version__} client (no {sock} here)"
    version = docker.DockerClient(base_url=f"unix://{sock}").version()
    assert version.get("ApiVersion"), version
    return f"docker {docker.__version__} -> dockerd {version.get('Version')}"


def check_paramiko(port: int) -> str:
    import io

    import paramiko

    key = paramiko.ECDSAKey.generate()
    out = io.StringIO()
    key.write_private_key(out)
    again = paramiko.ECDSAKey.from_private_key(io.StringIO(out.getvalue()))
    assert again.get_fingerprint() == key.get_fingerprint()
    return f"paramiko {paramiko.__version__} ecdsa key round trip"


def check_torchx(port: int) -> str:
    from torchx.schedulers.docker_scheduler import create_scheduler
    from torchx.specs import AppDef, Resource, Role

    app = AppDef("t", roles=[Role("r", image="busybox", entrypoint="echo", args=["hi"],
                                  resource=Resource(cpu=1, gpu=0, memMB=64))])
    info = create_scheduler("envbuilder-test").submit_dryrun(app, {})
    assert info.request is not None
    return f"torchx {md.version('torchx')} docker dryrun"


def check_nemo_run(port: int) -> str:
    import nemo_run as run

    def f(a: int) -> int:
        return a + 1

    assert run.Partial(f, a=1) is not None and run.LocalExecutor() is not None
    from nemo_run.core.tunnel.client import SSHTunnel

    assert SSHTunnel(host="127.0.0.1", user="u", job_dir="/tmp") is not None
    return f"nemo-run {md.version('nemo-run')} Partial, LocalExecutor, SSHTunnel"


def check_sentry_sdk(port: int) -> str:
    import sentry_sdk

    sentry_sdk.init(dsn=None)
    return f"sentry-sdk {md.version('sentry-sdk')} init"


def check_google_auth(port: int) -> str:
    from google.auth.credentials import AnonymousCredentials
    from google.auth.transport.requests import AuthorizedSession

    r = AuthorizedSession(AnonymousCredentials()).get(f"http://127.0.0.1:{port}/", timeout=10)
    assert r.status_code == 200 and r.text == "ok"
    return f"google-auth {md.version('google-auth')} AuthorizedSession GET 200"


def check_unstructured_client(port: int) -> str:
    import unstructured_client  # noqa: F401

    return f"unstructured-client {md.version('unstructured-client')} import"


def check_kubernetes(port: int) -> str:
    from kubernetes import client

    assert client.ApiClient() is not None
    return f"kubernetes {md.version('kubernetes')} ApiClient"


def check_pyopenssl(port: int) -> str:
    from OpenSSL import crypto

    key = crypto.PKey()
    key.generate_key(crypto.TYPE_RSA, 2048)
    return f"pyopenssl {md.version('pyopenssl')} rsa key"


CHECKS: dict[str, Callable[[int], str]] = {
    "urllib3": check_urllib3, "cryptography": check_cryptography, "requests": check_requests,
    "botocore": check_botocore, "docker": check_docker, "paramiko": check_paramiko, "torchx": check_torchx,
    "nemo-run": check_nemo_run, "sentry-sdk": check_sentry_sdk, "google-auth": check_google_auth,
    "unstructured-client": check_unstructured_client, "kubernetes": check_kubernetes, "pyopenssl": check_pyopenssl,
}


def main() -> int:
    port = int(sys.argv[1])
    results = {}
    for name in sys.argv[2:]:
        if name not in CHECKS:
            results[name] = "NO CHECK: add one to tests/lock/security_check.py"
            continue
        results[name] = CHECKS[name](port)
    print(json.dumps(results, sort_keys=True))
    return 1 if any(v.startswith("NO CHECK") for v in results.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
