"""The shared wheel cache against real servers (tests/runtime_fixtures.py): Debian's docker-registry with TLS
from a test CA and htpasswd auth, and a plain HTTP server over a published directory, which pip's and uv's
own clients read as a PEP 503 index.

Fault cases: a tampered blob (in the registry's storage and in the served directory), an upload cut off
in flight (a TCP relay in front of the real registry closes the connection part-way through the wheel),
two publishers at once, wrong and missing credentials, an unreachable registry, and a wheel whose fat
binaries hold other archs than its signed key says (compiled by nvcc from NVIDIA's PyPI wheels).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_fixtures import HttpServer, RegistryServer, free_port
from wheelkit import build_key, cached_wheel, make_wheel

from envbuilder.canonical import sha256_file
from envbuilder.dsse import generate_keypair, load_private_key
from envbuilder.errors import (
    ArchMismatchError,
    HashMismatchError,
    WheelCacheAuthError,
    WheelCachePublishError,
)
from envbuilder.kernels.archs import ArchList
from envbuilder.kernels.pipeline import check_downloaded_archs
from envbuilder.kernels.wheelcache.oci import (
    ARTIFACT_TYPE,
    ENTRY_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    WHEEL_MEDIA_TYPE,
    OciTransport,
)
from envbuilder.kernels.wheelcache.shared import CacheSource, PublishTarget, SharedCache, publish
from envbuilder.kernels.wheelcache.url import CacheUrl

pytestmark = pytest.mark.integration


@pytest.fixture()
def keys(tmp_path: Path) -> dict[str, Path]:
    pair = generate_keypair(tmp_path / "keys" / "team.key", tmp_path / "keys" / "team.pub")
    return {"key": pair.private, "pub": pair.public}


@pytest.fixture()
def registry_login(registry_server: RegistryServer, monkeypatch: pytest.MonkeyPatch) -> RegistryServer:
    monkeypatch.setenv("ENVBUILDER_REGISTRY_USER", registry_server.username)
    monkeypatch.setenv("ENVBUILDER_REGISTRY_PASSWORD", registry_server.password)
    return registry_server


def _repo(request: pytest.FixtureRequest) -> str:
    return "wheels/" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower()).strip("-")[:60]


def _blob_path(reg: RegistryServer, sha256: str) -> Path:
    return reg.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / sha256[:2] / sha256 / "data"


# --- the registry ---------------------------------------------------------------------------------------------

def test_registry_round_trip(registry_login: RegistryServer, keys: dict[str, Path], tmp_path: Path,
                             request: pytest.FixtureRequest) -> None:
    reg = registry_login
    url = CacheUrl.parse(reg.oci(_repo(request)))
    wheel = make_wheel(tmp_path / "w", filler=300_000)
    cached = cached_wheel(wheel)
    target = PublishTarget(url, keys["key"])
    assert [p.status for p in publish(target, load_private_key(keys["key"]), [(cached, wheel)], reg.ca_file,
                                      lambda _: None)] == ["published"]
    # an OCI artifact: the wheel stored by its sha256, the signed entry beside it, tagged with the key
    doc = json.loads(OciTransport(url, reg.ca_file).manifest(cached.key) or b"null")
    assert doc["artifactType"] == ARTIFACT_TYPE and doc["mediaType"] == MANIFEST_MEDIA_TYPE
    wheel_layer, entry_layer = doc["layers"]
    assert (wheel_layer["mediaType"], wheel_layer["digest"]) == (WHEEL_MEDIA_TYPE, f"sha256:{cached.sha256}")
    assert wheel_layer["annotations"]["org.opencontainers.image.title"] == wheel.name
    assert entry_layer["mediaType"] == ENTRY_MEDIA_TYPE
    assert _blob_path(reg, cached.sha256).read_bytes() == wheel.read_bytes()
    # a republish is a no-op; a reader with the team's key gets the verified wheel
    assert [p.status for p in publish(target, load_private_key(keys["key"]), [(cached, wheel)], reg.ca_file,
                                      lambda _: None)] == ["present"]
    shared = SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None)
    got = shared.fetch(cached.key, "demo-kernels", tmp_path / "r")
    assert got is not None and got[0].signer and sha256_file(got[1]) == cached.sha256
    assert shared.fetch(build_key(version="9.9").key, "demo-kernels", tmp_path / "r2") is None


def test_registry_publishers_at_once(registry_login: RegistryServer, keys: dict[str, Path], tmp_path: Path,
                                     request: pytest.FixtureRequest) -> None:
    """Six threads publish at once, three keys twice each: every key ends with one whole, verifiable entry."""
    reg = registry_login
    url = CacheUrl.parse(reg.oci(_repo(request)))
    jobs = []
    for i in range(6):
        version = f"{i // 2 + 1}.0"
        wheel = make_wheel(tmp_path / f"w{i}", version=version, filler=200_000)
        jobs.append((cached_wheel(wheel, build_key(version=version)), wheel))
    barrier, errors = threading.Barrier(len(jobs)), []

    def one(job: tuple) -> None:
        try:
            barrier.wait()
            publish(PublishTarget(url, keys["key"]), load_private_key(keys["key"]), [job], reg.ca_file,
                    lambda _: None)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, [f"{type(e).__name__}: {e}" for e in errors]
    shared = SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None)
    for key in sorted({c.key for c, _ in jobs}):
        got = shared.fetch(key, "demo-kernels", tmp_path / key[:8])
        assert got is not None and sha256_file(got[1]) == got[0].cached.sha256
        assert got[0].cached.sha256 in {c.sha256 for c, _ in jobs if c.key == key}


def test_registry_credentials_refused(registry_server: RegistryServer, keys: dict[str, Path], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    reg = registry_server
    url = CacheUrl.parse(reg.oci(_repo(request)))
    wheel = make_wheel(tmp_path / "w")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-login"))
    monkeypatch.delenv("ENVBUILDER_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ENVBUILDER_REGISTRY_PASSWORD", raising=False)
    with pytest.raises(WheelCacheAuthError, match="asks for credentials and none are set"):
        SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None).fetch(build_key().key, "d",
                                                                                          tmp_path / "r")
    monkeypatch.setenv("ENVBUILDER_REGISTRY_USER", reg.username)
    monkeypatch.setenv("ENVBUILDER_REGISTRY_PASSWORD", "not-" + reg.password)
    for attempt in ("read", "publish"):
        with pytest.raises(WheelCacheAuthError, match="refused the credentials of 'envbuilder'") as exc:
            if attempt == "read":
                SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None).fetch(
                    build_key().key, "d", tmp_path / "r")
            else:
                publish(PublishTarget(url, keys["key"]), load_private_key(keys["key"]),
                        [(cached_wheel(wheel), wheel)], reg.ca_file, lambda _: None)
        assert reg.password not in str(exc.value.to_dict())
    # `docker login`'s file works as well as the variables
    monkeypatch.delenv("ENVBUILDER_REGISTRY_USER")
    monkeypatch.delenv("ENVBUILDER_REGISTRY_PASSWORD")
    monkeypatch.setenv("DOCKER_CONFIG", str(reg.docker_config(tmp_path / "docker")))
    assert SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None).fetch(
        build_key().key, "d", tmp_path / "r") is None


def test_registry_tls_needs_the_ca(registry_login: RegistryServer, keys: dict[str, Path], tmp_path: Path) -> None:
    lines: list[str] = []
    shared = SharedCache(CacheSource(CacheUrl.parse(registry_login.oci("wheels/tls")), (keys["pub"],)), None,
                         lines.append)
    assert shared.fetch(build_key().key, "d", tmp_path / "r") is None
    assert shared.gave_up is not None and "TLS certificate is not trusted" in shared.gave_up
    assert any("--ca-bundle" in ln for ln in lines)


def test_registry_tampered_blobs(registry_login: RegistryServer, keys: dict[str, Path], tmp_path: Path,
                                 request: pytest.FixtureRequest) -> None:
    """Bytes changed in the registry's own storage: the wheel (its sha256 is in the signed entry) and the entry
    (its digest is in the manifest) are both refused, and nothing lands in the work directory."""
    reg = registry_login
    url = CacheUrl.parse(reg.oci(_repo(request)))
    wheel = make_wheel(tmp_path / "w", filler=100_000)
    cached = cached_wheel(wheel)
    publish(PublishTarget(url, keys["key"]), load_private_key(keys["key"]), [(cached, wheel)], reg.ca_file,
            lambda _: None)
    blob = _blob_path(reg, cached.sha256)
    good = blob.read_bytes()
    blob.write_bytes(good[:1000] + b"X" + good[1001:])
    shared = SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None)
    with pytest.raises(HashMismatchError, match=r"not the .* its signed entry names"):
        shared.fetch(cached.key, "demo-kernels", tmp_path / "r")
    assert not any((tmp_path / "r").glob("*.whl"))
    blob.write_bytes(good)
    manifest = json.loads(OciTransport(url, reg.ca_file).manifest(cached.key) or b"null")
    entry_blob = _blob_path(reg, manifest["layers"][1]["digest"][7:])
    entry_blob.write_bytes(entry_blob.read_bytes().replace(b'"payloadType"', b'"payloadType" '))
    with pytest.raises(HashMismatchError, match="not its digest"):
        shared.fetch(cached.key, "demo-kernels", tmp_path / "r")


class CuttingRelay:
    """A TCP relay to the registry that closes a connection once the client has sent `limit` bytes on it:
    small requests pass, a large upload is cut off in flight (TLS passes through untouched)."""

    def __init__(self, target_port: int, limit: int) -> None:
        self.port, self.target, self.limit = free_port(), target_port, limit
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.cut = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, counted: bool) -> None:
        sent = 0
        try:
            while data := src.recv(65536):
                sent += len(data)
                if counted and sent > self.limit:
                    self.cut += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.server.close()


def test_registry_upload_cut_off(registry_login: RegistryServer, keys: dict[str, Path], tmp_path: Path,
                                 request: pytest.FixtureRequest) -> None:
    """The connection dies part-way through the wheel's upload: a typed error, no entry (a reader misses), and
    the next publish over a working link completes it."""
    reg = registry_login
    repo = _repo(request)
    relay = CuttingRelay(reg.port, limit=600_000)
    try:
        cut_url = CacheUrl.parse(f"oci://localhost:{relay.port}/{repo}")
        wheel = make_wheel(tmp_path / "w", filler=3_000_000)
        cached = cached_wheel(wheel)
        with pytest.raises(WheelCachePublishError, match="cut off") as exc:
            publish(PublishTarget(cut_url, keys["key"]), load_private_key(keys["key"]), [(cached, wheel)],
                    reg.ca_file, lambda _: None)
        assert relay.cut >= 1 and "publish again" in str(exc.value.fix)
    finally:
        relay.close()
    url = CacheUrl.parse(reg.oci(repo))
    shared = SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None)
    assert shared.fetch(cached.key, "demo-kernels", tmp_path / "r1") is None
    assert not _blob_path(reg, cached.sha256).exists()
    publish(PublishTarget(url, keys["key"]), load_private_key(keys["key"]), [(cached, wheel)], reg.ca_file,
            lambda _: None)
    got = shared.fetch(cached.key, "demo-kernels", tmp_path / "r2")
    assert got is not None and sha256_file(got[1]) == cached.sha256


def test_unreachable_registry_falls_back(keys: dict[str, Path], tmp_path: Path) -> None:
    lines: list[str] = []
    dead = CacheUrl.parse(f"oci://127.0.0.1:{free_port()}/team/wheels")
    shared = SharedCache(CacheSource(dead, (keys["pub"],)), None, lines.append)
    assert shared.fetch(build_key().key, "demo-kernels", tmp_path / "r") is None
    assert [ln for ln in lines if ln.startswith("warning:")] == [
        f"warning: the shared wheel cache is unreachable: the registry at {dead.registry} cannot be reached "
        "([Errno 111] Connection refused); building instead (check the URL, that the server runs, and the "
        "network/proxy)"]


# --- the HTTP index -----------------------------------------------------------------------------------------

def _published_index(http_server: HttpServer, keys: dict[str, Path], tmp_path: Path, name: str
                     ) -> tuple[Path, str, object, Path]:
    root = http_server.root / name
    wheel = make_wheel(tmp_path / "w", filler=50_000)
    cached = cached_wheel(wheel)
    publish(PublishTarget(CacheUrl.parse(f"file://{root}")), load_private_key(keys["key"]), [(cached, wheel)], None,
            lambda _: None)
    return root, f"{http_server.url}/{name}/", cached, wheel


def test_http_index_round_trip_and_tamper(http_server: HttpServer, keys: dict[str, Path], tmp_path: Path) -> None:
    root, url, cached, wheel = _published_index(http_server, keys, tmp_path, "idx-rt")
    shared = SharedCache(CacheSource(CacheUrl.parse(url), (keys["pub"],)), None, lambda _: None)
    got = shared.fetch(cached.key, "demo-kernels", tmp_path / "r")  # type: ignore[attr-defined]
    assert got is not None and got[1].read_bytes() == wheel.read_bytes()
    assert shared.fetch(build_key(version="7.0").key, "demo-kernels", tmp_path / "r2") is None
    blob = root / "files" / cached.sha256 / wheel.name  # type: ignore[attr-defined]
    blob.write_bytes(blob.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(HashMismatchError):
        shared.fetch(cached.key, "demo-kernels", tmp_path / "r3")  # type: ignore[attr-defined]
    with pytest.raises(WheelCachePublishError, match="read-only"):
        publish(PublishTarget(CacheUrl.parse(url)), None, [(cached, wheel)], None, lambda _: None)


@pytest.mark.parametrize("how", ["index-url", "find-links"])
def test_pip_and_uv_install_from_the_published_directory(http_server: HttpServer, keys: dict[str, Path],
                                                         tmp_path: Path, uv_bin: str, how: str) -> None:
    """The directory a publish writes is a PEP 503 index: uv and pip install the wheel with their own clients,
    checking its sha256 from the page."""
    _root, url, cached, _wheel = _published_index(http_server, keys, tmp_path, f"idx-{how}")
    venv = tmp_path / "venv"
    subprocess.run([uv_bin, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    py = str(venv / "bin" / "python")
    source = ["--index-url", f"{url}simple/"] if how == "index-url" else \
        ["--no-index", "--find-links", f"{url}simple/demo-kernels/"]
    proc = subprocess.run([uv_bin, "pip", "install", "--python", py, *source, "demo-kernels==1.0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([py, "-c", "import demo_kernels, importlib.metadata as m; "
                          "print(demo_kernels.VALUE, m.version('demo-kernels'))"], capture_output=True, text=True)
    assert out.stdout.split() == ["1", "1.0+cputorch2.13"]
    pip_venv = tmp_path / "pipvenv"
    subprocess.run([sys.executable, "-m", "venv", str(pip_venv)], check=True)
    proc = subprocess.run([str(pip_venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                           *source, "demo-kernels==1.0"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert cached.sha256 in (http_server.root / f"idx-{how}" / "simple" / "demo-kernels" / "index.html").read_text()  # type: ignore[attr-defined]


# --- a wheel built for other archs than its key says --------------------------------------------------------------

KERNEL = "__global__ void k(float* x) { x[0] += 1.0f; }\nvoid launch(float* x) { k<<<1, 1>>>(x); }\n"


def _fat_so(cuda_home: Path, arch: str, d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "k.cu").write_text(KERNEL)
    subprocess.run([str(cuda_home / "bin" / "nvcc"), "-c", "-Xcompiler", "-fPIC", str(d / "k.cu"), "-o",
                    str(d / "k.o"), "-gencode", f"arch=compute_{arch},code=sm_{arch}"], check=True, timeout=600)
    subprocess.run(["g++", "-shared", str(d / "k.o"), "-o", str(d / "libk.so")], check=True, timeout=120)
    return d / "libk.so"


def test_wrong_arch_wheel_is_refused(registry_login: RegistryServer, keys: dict[str, Path], tmp_path: Path,
                                     cuda_home: Path, request: pytest.FixtureRequest) -> None:
    """A trusted publisher signed an entry for arch list 9.0 whose wheel holds sm_80 code: it downloads and
    verifies (the signature and sha256 are right), and the fat-binary check refuses it."""
    reg = registry_login
    url = CacheUrl.parse(reg.oci(_repo(request)))
    wheel = make_wheel(tmp_path / "w", local="cu130torch2.13sm90", so=_fat_so(cuda_home, "80", tmp_path / "k"))
    cached = cached_wheel(wheel, build_key(arch_list="9.0", torch="2.13.0+cu130"))
    publish(PublishTarget(url, keys["key"]), load_private_key(keys["key"]), [(cached, wheel)], reg.ca_file,
            lambda _: None)
    got = SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None).fetch(
        cached.key, "demo-kernels", tmp_path / "r")
    assert got is not None
    with pytest.raises(ArchMismatchError, match=r"SASS \['80'\]") as exc:
        check_downloaded_archs("demo-kernels", got[1], ArchList.parse("9.0"), tmp_path / "x", lambda: cuda_home,
                               str(url))
    assert str(url) in exc.value.cause and "nothing was installed" in str(exc.value.fix)
    with pytest.raises(ArchMismatchError, match="built without GPU code"):
        check_downloaded_archs("demo-kernels", got[1], None, tmp_path / "y", lambda: cuda_home, str(url))
    check_downloaded_archs("demo-kernels", got[1], ArchList.parse("8.0"), tmp_path / "z", lambda: cuda_home, str(url))


# --- token (Bearer) auth: the same registry configured with `auth: token` ------------------------------------------

class TokenServer:
    """The registry's token service: answers GET /token?service=&scope= with a JWT (ES256, the signing certificate in
    its x5c header) when the request carries the right basic credentials, 401 otherwise. A stand-in for a site's
    token server (Docker's docker_auth, a cloud registry's), which Debian does not package; the registry that
    verifies its tokens is the real one."""

    def __init__(self, d: Path, username: str, password: str) -> None:
        import datetime
        import http.server

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "envbuilder test token issuer")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=1)).sign(self.key, hashes.SHA256()))
        self.cert_file = d / "token.crt"
        self.cert_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.der = self.cert.public_bytes(serialization.Encoding.DER)
        self.username, self.password, self.issued = username, password, 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                import base64
                import urllib.parse

                want = "Basic " + base64.b64encode(f"{server.username}:{server.password}".encode()).decode()
                if self.headers.get("Authorization") != want:
                    self.send_response(401)
                    self.end_headers()
                    return
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                token = server.token(q.get("service", [""])[0], q.get("scope", []))
                body = json.dumps({"token": token, "access_token": token}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def token(self, service: str, scopes: list[str]) -> str:
        import base64
        import time

        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        access = []
        for scope in scopes:
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        head = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(self.der).decode()]}
        claims = {"iss": "envbuilder-test-issuer", "sub": self.username, "aud": service, "exp": now + 300,
                  "nbf": now - 10, "iat": now, "jti": str(now) + str(self.issued), "access": access}
        signing = f"{b64(json.dumps(head).encode())}.{b64(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing.encode(), ec.ECDSA(hashes.SHA256())))
        self.issued += 1
        return f"{signing}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def close(self) -> None:
        self.httpd.shutdown()


class TokenRegistry(RegistryServer):
    """Debian's docker-registry with `auth: token` (realm: the TokenServer) instead of htpasswd."""

    def __init__(self, d: Path) -> None:
        super().__init__(d)
        self.tokens = TokenServer(d, self.username, self.password)

    def auth_config(self) -> str:
        return (f"  token:\n    realm: {self.tokens.url}\n    service: envbuilder-test-registry\n"
                f"    issuer: envbuilder-test-issuer\n    rootcertbundle: {self.tokens.cert_file}\n")

    def stop(self) -> None:
        super().stop()
        self.tokens.close()


@pytest.fixture(scope="module")
def token_registry() -> Iterator[TokenRegistry]:
    from runtime_fixtures import server_dir

    base = server_dir("token-registry")
    reg = TokenRegistry(base)
    try:
        reg.start()
        yield reg
    finally:
        reg.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_registry_token_auth(token_registry: TokenRegistry, keys: dict[str, Path], tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry with token auth answers 401 with a Bearer challenge; the client fetches a token from the realm
    with the credentials, for pull or pull,push on the repository, and the registry accepts it."""
    reg = token_registry
    url = CacheUrl.parse(reg.oci("team/token-wheels"))
    wheel = make_wheel(tmp_path / "w", filler=20_000)
    cached = cached_wheel(wheel)
    monkeypatch.setenv("ENVBUILDER_REGISTRY_USER", reg.username)
    monkeypatch.setenv("ENVBUILDER_REGISTRY_PASSWORD", reg.password)
    publish(PublishTarget(url, keys["key"]), load_private_key(keys["key"]), [(cached, wheel)], reg.ca_file,
            lambda _: None)
    got = SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None).fetch(
        cached.key, "demo-kernels", tmp_path / "r")
    assert got is not None and sha256_file(got[1]) == cached.sha256 and reg.tokens.issued >= 2
    monkeypatch.setenv("ENVBUILDER_REGISTRY_PASSWORD", "wrong")
    with pytest.raises(WheelCacheAuthError, match="refused the credentials"):
        SharedCache(CacheSource(url, (keys["pub"],)), reg.ca_file, lambda _: None).fetch(
            cached.key, "demo-kernels", tmp_path / "r2")
