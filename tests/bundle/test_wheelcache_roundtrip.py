"""The shared wheel cache end to end on the smoke row, with the real CLI and real servers.

A publisher runs `wheels --publish` to the registry (Debian's docker-registry: TLS from the test CA,
htpasswd) and to a directory that a plain HTTP server serves as a PEP 503 index. A second machine is
a fresh local cache and a new venv: `install BUNDLE --cache URL` takes causal-conv1d from each cache
with zero compiles. Then every fault is refused with its own exit code and nothing installed: an
unsigned entry, a signature by another key, refused credentials, a tampered blob, a wheel holding other
archs than its key says; and an unreachable cache builds instead, and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from runtime_fixtures import HttpServer, RegistryServer, free_port

from envbuilder.dsse import generate_keypair

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _cli(args: list[str], env: dict[str, str] | None = None, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})


class Team:
    """What the publisher made: keys, the two caches, the bundle, and a reader's environment."""

    def __init__(self, base: Path, reg: RegistryServer, http: HttpServer) -> None:
        self.base, self.reg, self.http = base, reg, http
        self.key = generate_keypair(base / "keys" / "team.key", base / "keys" / "team.pub")
        self.other = generate_keypair(base / "keys" / "other.key", base / "keys" / "other.pub")
        self.oci = reg.oci("team/smoke-wheels")
        self.dir = http.root / "team"
        self.http_url = f"{http.url}/team/"
        self.publisher_cache = base / "publisher-cache"
        self.env = {"ENVBUILDER_REGISTRY_USER": reg.username, "ENVBUILDER_REGISTRY_PASSWORD": reg.password,
                    "ENVBUILDER_WHEEL_CACHE": "", "ENVBUILDER_WHEEL_CACHE_TRUSTED_KEY": ""}

    def reader_cache(self, name: str) -> Path:
        """A fresh local cache that shares only the publisher's stage-1 venv (no wheel in it)."""
        cache = self.base / name
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir()
        (cache / "venvs").symlink_to(self.publisher_cache / "venvs")  # a link: a copy is ~1 GB of CPU torch
        return cache

    def trust(self, pub: Path | None = None) -> list[str]:
        return ["--trusted-key", str(pub or self.key.public), "--ca-bundle", str(self.reg.ca_bundle)]


@pytest.fixture(scope="module")
def team(smoke_lockdir: Path, registry_server: RegistryServer, http_server: HttpServer,
         tmp_path_factory: pytest.TempPathFactory) -> Team:
    t = Team(tmp_path_factory.mktemp("team"), registry_server, http_server)
    for i, target in enumerate([t.oci, str(t.dir)]):
        proc = _cli(["wheels", str(smoke_lockdir), "-o", str(t.base / f"wh{i}"), "--cache-dir", str(t.publisher_cache),
                     "--publish", target, "--sign", str(t.key.private), "--ca-bundle", str(t.reg.ca_bundle), "--json"],
                    env=t.env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        made = json.loads(proc.stdout)
        assert [p["status"] for p in made["published"]] == ["published"]
        assert [p["cache"] for p in made["packages"]] == (["miss"] if i == 0 else ["hit"])
    proc = _cli(["bundle", str(smoke_lockdir), "-o", str(t.base / "bundle"), "--cache-dir", str(t.publisher_cache)],
                env=t.env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return t


def _install(team: Team, cache_url: str, venv: Path, extra: list[str], cache: str = "reader") -> \
        subprocess.CompletedProcess[str]:
    return _cli(["install", str(team.base / "bundle"), "--venv", str(venv), "--cache", cache_url,
                 "--cache-dir", str(team.reader_cache(cache)), "--json", *extra], env=team.env)


@pytest.mark.parametrize("where", ["registry", "http-index"])
def test_install_from_the_shared_cache_compiles_nothing(team: Team, tmp_path: Path, where: str) -> None:
    url = team.oci if where == "registry" else team.http_url
    venv = tmp_path / "venv"
    proc = _install(team, url, venv, team.trust())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["stage2"] == ["causal-conv1d"] and result["stage2_missing"] == []
    assert [(w["name"], w["cache"]) for w in result["stage2_wheels"]] == [("causal-conv1d", "shared")]
    assert "building against" in proc.stderr and "compiling" not in proc.stderr  # no setup.py ran
    check = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import importlib.metadata as m; print(m.version('causal-conv1d'))"],  # built without CUDA
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and check.stdout.strip().endswith("+cputorch2.13cxx11abiTRUE"), check.stderr
    record = json.loads((venv / "envbuilder-install.json").read_text())
    assert record["stage2_from"] == url


def test_bundle_carries_the_cache_wheels(team: Team, smoke_lockdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    proc = _cli(["bundle", str(smoke_lockdir), "-o", str(out), "--cache-dir", str(team.reader_cache("bundler")),
                 "--cache", team.http_url, "--trusted-key", str(team.key.public)], env=team.env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "causal-conv1d (shared)" in proc.stderr
    manifest = json.loads((out / "envbuilder-bundle.json").read_text())
    wheels = manifest["wheelhouse"]["wheels"]
    assert len(wheels) == 1 and wheels[0].endswith("+cputorch2.13cxx11abiTRUE-py3-none-any.whl")


# --- every fault refused, nothing installed --------------------------------------------------------------------

def _wheels(team: Team, smoke_lockdir: Path, out: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return _cli(["wheels", str(smoke_lockdir), "-o", str(out), "--cache-dir", str(team.reader_cache("faults")),
                 "--json", *args], env=team.env)


def _refused(team: Team, proc: subprocess.CompletedProcess[str], code: int, out: Path) -> dict[str, object]:
    """The run failed with `code`, one cause and a fix, no traceback; no wheelhouse, nothing in the local cache."""
    assert proc.returncode == code, proc.stderr[-3000:]
    err = json.loads(proc.stdout)
    assert err["exit_code"] == code and err["fix"] and "Traceback" not in proc.stderr
    assert not out.exists()
    assert not list((team.base / "faults" / "wheels").glob("*/entry.json"))
    return err


def test_unsigned_entry_refused_then_accepted_on_request(team: Team, smoke_lockdir: Path, tmp_path: Path) -> None:
    unsigned = str(tmp_path / "unsigned-cache")
    proc = _cli(["wheels", str(smoke_lockdir), "-o", str(tmp_path / "p"), "--cache-dir", str(team.publisher_cache),
                 "--publish", unsigned, "--no-sign"], env=team.env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    venv = tmp_path / "venv"
    proc = _install(team, unsigned, venv, team.trust())
    assert proc.returncode == 113 and json.loads(proc.stdout)["error"] == "wheel-cache-unsigned", proc.stderr
    assert not venv.exists()
    ok = _wheels(team, smoke_lockdir, tmp_path / "wh", ["--cache", unsigned, "--trust-unsigned"])
    assert ok.returncode == 0 and [p["cache"] for p in json.loads(ok.stdout)["packages"]] == ["shared"]


def test_signature_by_another_key_refused(team: Team, smoke_lockdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "wh"
    proc = _wheels(team, smoke_lockdir, out, ["--cache", team.oci, *team.trust(team.other.public)])
    err = _refused(team, proc, 114, out)
    assert "no signature verifies" in str(err["cause"])


def test_refused_credentials(team: Team, smoke_lockdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "wh"
    proc = _cli(["wheels", str(smoke_lockdir), "-o", str(out), "--cache-dir", str(team.reader_cache("faults")),
                 "--json", "--cache", team.oci, *team.trust()],
                env={**team.env, "ENVBUILDER_REGISTRY_PASSWORD": "wrong"})
    err = _refused(team, proc, 115, out)
    assert "refused the credentials" in str(err["cause"]) and team.reg.password not in proc.stdout + proc.stderr


def test_tampered_blob_refused_and_nothing_installed(team: Team, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(team.dir, copy)
    (wheel,) = copy.glob("files/*/*.whl")
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    venv = tmp_path / "venv"
    proc = _install(team, f"file://{copy}", venv, team.trust())
    assert proc.returncode == 65 and "signed entry names" in json.loads(proc.stdout)["cause"], proc.stderr[-2000:]
    assert not venv.exists() and not list(tmp_path.glob(".venv*"))


def test_wheel_with_other_archs_than_its_key_refused(team: Team, smoke_lockdir: Path, tmp_path: Path,
                                                     cuda_home: Path) -> None:
    """The trusted publisher signed the smoke key (built without GPU code) for a wheel that holds an sm_80
    fat binary: the signature and sha256 hold, the arch check refuses it."""
    from envbuilder.dsse import load_private_key
    from envbuilder.kernels.cache import CachedWheel
    from envbuilder.kernels.wheelcache.entry import Trust, open_entry
    from envbuilder.kernels.wheelcache.shared import PublishTarget, publish
    from envbuilder.kernels.wheelcache.url import CacheUrl

    d = tmp_path / "k"
    d.mkdir()
    (d / "k.cu").write_text("__global__ void k(float* x) { x[0] += 1.0f; }\nvoid go(float* x) { k<<<1, 1>>>(x); }\n")
    subprocess.run([str(cuda_home / "bin" / "nvcc"), "-c", "-Xcompiler", "-fPIC", str(d / "k.cu"), "-o",
                    str(d / "k.o"), "-gencode", "arch=compute_80,code=sm_80"], check=True, timeout=600)
    subprocess.run(["g++", "-shared", str(d / "k.o"), "-o", str(d / "libk.so")], check=True)
    (entry_file,) = team.dir.glob("entries/*.dsse.json")
    key = entry_file.name.split(".")[0]
    from envbuilder.dsse import load_public_key

    good = open_entry(entry_file.read_bytes(), key, Trust((load_public_key(team.key.public),)), "e").cached
    (orig,) = team.dir.glob(f"files/{good.sha256}/*.whl")
    bad = tmp_path / "bad" / orig.name
    bad.parent.mkdir()
    shutil.copy(orig, bad)
    with zipfile.ZipFile(bad, "a") as zf:
        zf.write(d / "libk.so", "causal_conv1d/_gpu.so")
    from dataclasses import replace

    from envbuilder.canonical import sha256_file

    forged: CachedWheel = replace(good, sha256=sha256_file(bad))
    target = tmp_path / "arch-cache"
    publish(PublishTarget(CacheUrl.parse(str(target))), load_private_key(team.key.private), [(forged, bad)], None,
            lambda _: None)
    out = tmp_path / "wh"
    err = _refused(team, _wheels(team, smoke_lockdir, out, ["--cache", str(target), *team.trust()]), 61, out)
    assert "hold CUDA fat binaries" in str(err["cause"]) and "_gpu.so" in str(err["cause"])


def test_unreachable_cache_builds_and_says_so(team: Team, smoke_lockdir: Path, tmp_path: Path) -> None:
    dead = f"oci://127.0.0.1:{free_port()}/team/smoke-wheels"
    proc = _wheels(team, smoke_lockdir, tmp_path / "wh", ["--cache", dead, "--trusted-key", str(team.key.public)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning: the shared wheel cache is unreachable" in proc.stderr and "building instead" in proc.stderr
    made = json.loads(proc.stdout)
    assert [p["cache"] for p in made["packages"]] == ["miss"] and made["cache"]["gave_up"]
    # publishing to it is an error, not a fallback
    proc = _cli(["wheels", str(smoke_lockdir), "-o", str(tmp_path / "wh2"), "--cache-dir", str(team.publisher_cache),
                 "--publish", dead, "--sign", str(team.key.private), "--json"], env=team.env)
    assert proc.returncode == 116 and "cannot be reached" in json.loads(proc.stdout)["cause"], proc.stderr[-2000:]


def test_cache_without_a_trusted_key_is_refused_before_work(team: Team, smoke_lockdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "wh"
    proc = _wheels(team, smoke_lockdir, out, ["--cache", team.oci])
    assert proc.returncode == 90 and "--trusted-key" in json.loads(proc.stdout)["fix"], proc.stderr[-2000:]
    assert not out.exists()


@pytest.mark.docker
def test_build_takes_stage2_from_the_cache(team: Team, smoke_lockdir: Path, debian_base_image: str,
                                           tmp_path: Path) -> None:
    """`build --cache`: the image installs the cache's causal-conv1d wheel instead of compiling it (stage 1
    comes from BuildKit's cache of the smoke image)."""
    tag = "envbuilder-test/smoke:wheel-cache"
    proc = _cli(["build", str(smoke_lockdir), "--tag", tag, "--base", debian_base_image, "--no-scan",
                 "--cache", team.http_url, "--trusted-key", str(team.key.public), "--json"],
                env={**team.env, "ENVBUILDER_CACHE_DIR": str(team.reader_cache("builder"))}, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "causal-conv1d 1.6.2.post1: shared cache hit" in proc.stderr
    try:
        out = subprocess.run(["docker", "run", "--rm", tag, "/opt/venv/bin/python", "-c",
                              "import importlib.metadata as m; print(m.version('causal-conv1d'))"],
                             capture_output=True, text=True, timeout=600)
        assert out.stdout.strip() == "1.6.2.post1+cputorch2.13cxx11abiTRUE", out.stderr
    finally:
        subprocess.run(["docker", "image", "rm", tag], capture_output=True)
