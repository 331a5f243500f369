"""The shared wheel cache without servers: URLs, signed entries, the directory transport and its PEP 503
pages, publishers at once, a killed publish, tampered and oversized blobs, credentials, and the fat-binary
check of a downloaded wheel. The registry and HTTP-index transports run against real servers in
tests/kernels/test_wheelcache_servers.py."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wheelkit import build_key, cached_wheel, make_wheel

from envbuilder.canonical import sha256_file
from envbuilder.dsse import Envelope, generate_keypair, load_private_key
from envbuilder.errors import (
    ArchMismatchError,
    HashMismatchError,
    InvalidOptionError,
    SigningKeyError,
    WheelCacheAuthError,
    WheelCachePublishError,
    WheelCacheSignatureError,
    WheelCacheUnreachableError,
    WheelCacheUnsignedError,
)
from envbuilder.kernels.archs import elf_has_fatbin
from envbuilder.kernels.pipeline import check_downloaded_archs
from envbuilder.kernels.wheelcache.auth import credentials_for
from envbuilder.kernels.wheelcache.entry import Trust, open_entry, seal_entry
from envbuilder.kernels.wheelcache.pep503 import projects
from envbuilder.kernels.wheelcache.shared import CacheSource, PublishTarget, SharedCache, publish
from envbuilder.kernels.wheelcache.transport import DirectoryTransport, Layout, WheelRef, open_transport
from envbuilder.kernels.wheelcache.url import CacheUrl

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def keys(tmp_path: Path) -> dict[str, Path]:
    a = generate_keypair(tmp_path / "keys" / "team.key", tmp_path / "keys" / "team.pub")
    b = generate_keypair(tmp_path / "keys" / "other.key", tmp_path / "keys" / "other.pub")
    return {"key": a.private, "pub": a.public, "other_key": b.private, "other_pub": b.public}


def _dir(path: Path) -> DirectoryTransport:
    t = open_transport(CacheUrl.parse(str(path)))
    assert isinstance(t, DirectoryTransport)
    return t


# --- URLs ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "kind", "canonical"), [
    ("/srv/wheels", "directory", "/srv/wheels"),
    ("file:///srv/wheels/", "directory", "/srv/wheels"),
    ("oci://registry.example.com:5000/team/kernel-wheels", "oci", "oci://registry.example.com:5000/team/kernel-wheels"),
    ("oci+http://localhost:5000/w", "oci", "oci+http://localhost:5000/w"),
    ("https://wheels.example.com/cache", "http", "https://wheels.example.com/cache/"),
    ("HTTP://127.0.0.1:8000/", "http", "http://127.0.0.1:8000/"),
])
def test_cache_url_forms(text: str, kind: str, canonical: str) -> None:
    url = CacheUrl.parse(text)
    assert (url.kind, url.text) == (kind, canonical)


@pytest.mark.parametrize(("text", "says"), [
    ("oci://user:secret@registry/team/w", "credentials in the URL"),
    ("oci://registry/Team", "not an OCI repository name"),
    ("oci://registry/team/w:latest", "names a tag or digest"),
    ("file://relative/dir", "absolute path"),
    ("s3://bucket/w", "unknown scheme"),
    ("https://host/w?token=x", r"no \?query"),
    ("", "empty URL"),
])
def test_cache_url_refusals(text: str, says: str) -> None:
    with pytest.raises(InvalidOptionError, match=says) as exc:
        CacheUrl.parse(text, "--publish")
    assert "secret" not in exc.value.cause and exc.value.fix


# --- entries: signature and binding -----------------------------------------------------------------------------

def test_entry_trust_rules(tmp_path: Path, keys: dict[str, Path]) -> None:
    from envbuilder.dsse import load_public_key

    wheel = make_wheel(tmp_path / "w")
    cached = cached_wheel(wheel)
    size = wheel.stat().st_size
    signed = seal_entry(cached, size, load_private_key(keys["key"]))
    by_other = seal_entry(cached, size, load_private_key(keys["other_key"]))
    unsigned = seal_entry(cached, size, None)
    team = Trust((load_public_key(keys["pub"]),))
    lax = Trust((load_public_key(keys["pub"]),), unsigned_ok=True)
    assert open_entry(signed, cached.key, team, "e").cached == cached
    assert open_entry(signed, cached.key, team, "e").signer is not None
    with pytest.raises(WheelCacheUnsignedError, match="unsigned"):
        open_entry(unsigned, cached.key, team, "e")
    assert open_entry(unsigned, cached.key, lax, "e").signer is None
    for trust in (team, lax):  # a signature by another key is refused even with --trust-unsigned
        with pytest.raises(WheelCacheSignatureError, match="no signature verifies"):
            open_entry(by_other, cached.key, trust, "e")
    assert open_entry(by_other, cached.key, Trust((), unsigned_ok=True), "e").signer is None
    with pytest.raises(SigningKeyError, match="public key") as exc:
        Trust.load([], unsigned_ok=False)
    assert "--trusted-key" in str(exc.value.fix) and "--trust-unsigned" in str(exc.value.fix)


def test_entry_is_bound_to_its_key(tmp_path: Path, keys: dict[str, Path]) -> None:
    """A validly signed entry copied under another key, an edited statement, or facts that do not hash to the
    key are all refused."""
    from dataclasses import replace

    from envbuilder.dsse import load_public_key

    priv, trust = load_private_key(keys["key"]), Trust((load_public_key(keys["pub"]),))
    wheel = make_wheel(tmp_path / "w")
    cached = cached_wheel(wheel)
    other = build_key(arch_list="9.0")
    signed = seal_entry(cached, wheel.stat().st_size, priv)
    with pytest.raises(WheelCacheSignatureError, match="moved to another key"):
        open_entry(signed, other.key, trust, "e")
    forged = seal_entry(replace(cached, key=other.key), wheel.stat().st_size, priv)  # facts still hash to the old key
    with pytest.raises(WheelCacheSignatureError, match="moved to another key"):
        open_entry(forged, other.key, trust, "e")
    env = Envelope.from_json(signed, "e")
    edited = Envelope(env.payload_type, env.body.replace(b'"size":', b'"size":1'), env.signatures)
    with pytest.raises(WheelCacheSignatureError, match="no signature verifies"):
        open_entry(edited.to_json().encode(), cached.key, trust, "e")
    foreign = make_wheel(tmp_path / "f", package="other-pkg")
    wrong_pkg = replace(cached, wheel=foreign.name)
    with pytest.raises(WheelCacheSignatureError, match="not a wheel of demo-kernels"):
        open_entry(seal_entry(wrong_pkg, 10, priv), cached.key, trust, "e")


# --- the directory transport ---------------------------------------------------------------------------------

def test_directory_round_trip_and_pages(tmp_path: Path, keys: dict[str, Path]) -> None:
    root = tmp_path / "cache"
    wheel = make_wheel(tmp_path / "w")
    cached = cached_wheel(wheel)
    target = PublishTarget(CacheUrl.parse(str(root)), keys["key"])
    lines: list[str] = []
    out = publish(target, load_private_key(keys["key"]), [(cached, wheel)], None, lines.append)
    assert [p.status for p in out] == ["published"]
    assert (root / Layout.MARKER).is_file() and (root / Layout.entry(cached.key)).is_file()
    assert sha256_file(root / "files" / cached.sha256 / wheel.name) == cached.sha256
    page = (root / "simple" / "demo-kernels" / "index.html").read_text()
    assert f'href="../../files/{cached.sha256}/{wheel.name}#sha256={cached.sha256}"' in page
    assert '<a href="demo-kernels/">' in (root / "simple" / "index.html").read_text()
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    again = publish(target, load_private_key(keys["key"]), [(cached, wheel)], None, lines.append)
    assert [p.status for p in again] == ["present"]  # deterministic signature: a republish is a no-op
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    shared = SharedCache(CacheSource(CacheUrl.parse(f"file://{root}"), (keys["pub"],)), None, lines.append)
    got = shared.fetch(cached.key, "demo-kernels", tmp_path / "work")
    assert got is not None and got[0].cached == cached and sha256_file(got[1]) == cached.sha256
    assert shared.fetch(build_key(arch_list="9.0").key, "demo-kernels", tmp_path / "work2") is None  # a miss


def test_directory_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("keep me")
    wheel = make_wheel(tmp_path / "w")
    with pytest.raises(WheelCachePublishError, match="not an envbuilder wheel cache"):
        publish(PublishTarget(CacheUrl.parse(str(tmp_path / "mine")), unsigned=True), None,
                [(cached_wheel(wheel), wheel)], None, lambda _: None)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["thesis.tex"]


def test_tampered_or_oversized_blob_is_refused(tmp_path: Path, keys: dict[str, Path]) -> None:
    root = tmp_path / "cache"
    wheel = make_wheel(tmp_path / "w")
    cached = cached_wheel(wheel)
    publish(PublishTarget(CacheUrl.parse(str(root))), load_private_key(keys["key"]), [(cached, wheel)], None,
            lambda _: None)
    blob = root / "files" / cached.sha256 / wheel.name
    good = blob.read_bytes()
    shared = SharedCache(CacheSource(CacheUrl.parse(str(root)), (keys["pub"],)), None, lambda _: None)
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(HashMismatchError, match="sha256"):
        shared.fetch(cached.key, "demo-kernels", tmp_path / "a")
    assert not (tmp_path / "a" / wheel.name).exists()
    blob.write_bytes(good + b"\0" * 4096)
    with pytest.raises(HashMismatchError, match="more than"):
        shared.fetch(cached.key, "demo-kernels", tmp_path / "b")
    assert not (tmp_path / "b" / wheel.name).exists()
    blob.unlink()  # an entry whose wheel is gone: a miss, said so
    lines: list[str] = []
    shared.progress = lines.append
    assert shared.fetch(cached.key, "demo-kernels", tmp_path / "c") is None
    assert any("does not hold" in ln for ln in lines)


def test_unreachable_cache_is_given_up_once(tmp_path: Path, keys: dict[str, Path]) -> None:
    lines: list[str] = []
    shared = SharedCache(CacheSource(CacheUrl.parse(str(tmp_path / "not-mounted")), (keys["pub"],)), None,
                         lines.append)
    assert shared.fetch(build_key().key, "demo-kernels", tmp_path / "w") is None
    assert shared.fetch(build_key(version="2.0").key, "demo-kernels", tmp_path / "w") is None
    warnings = [ln for ln in lines if ln.startswith("warning:")]
    assert len(warnings) == 1 and "unreachable" in warnings[0] and "building instead" in warnings[0]
    assert shared.gave_up is not None


_PUBLISHER = r"""
import sys, time
sys.path.insert(0, {tests!r})
from pathlib import Path
from wheelkit import build_key, cached_wheel, make_wheel
from envbuilder.dsse import load_private_key
from envbuilder.kernels.wheelcache.shared import PublishTarget, publish
from envbuilder.kernels.wheelcache.url import CacheUrl
root, work, version, start = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], float(sys.argv[4])
wheel = make_wheel(work, version=version, filler=200_000)
cached = cached_wheel(wheel, build_key(version=version))
while time.time() < start:
    time.sleep(0.001)
publish(PublishTarget(CacheUrl.parse(str(root))), load_private_key(Path({key!r})), [(cached, wheel)], None,
        lambda _: None)
print(cached.key)
"""


def test_publishers_at_once_leave_whole_entries_and_pages(tmp_path: Path, keys: dict[str, Path]) -> None:
    """Four processes publish at the same instant (two of them the same key, with different wheels): every entry
    verifies and its wheel is whole (the last publisher of a key wins), and the pages list every key's wheel,
    whichever publisher rewrote them last."""
    from envbuilder.dsse import load_public_key

    root = tmp_path / "cache"
    code = _PUBLISHER.format(tests=str(REPO / "tests"), key=str(keys["key"]))
    start = time.time() + 1.5
    procs = [subprocess.Popen([sys.executable, "-c", code, str(root), str(tmp_path / f"w{i}"), version, str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, version in enumerate(["1.0", "2.0", "3.0", "3.0"])]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [r[1][-800:] for r in results]
    trust = Trust((load_public_key(keys["pub"]),))
    for key in {r[0].strip() for r in results}:
        entry = open_entry((root / Layout.entry(key)).read_bytes(), key, trust, key)
        assert sha256_file(root / "files" / entry.cached.sha256 / entry.cached.wheel) == entry.cached.sha256
    listed = projects(root)["demo-kernels"]
    assert sorted(w.split("-")[1].split("+")[0] for w, _ in listed) == ["1.0", "2.0", "3.0"]
    assert len(list(root.glob("files/*/*.whl"))) == 4  # the losing 3.0 wheel stays, unlisted
    on_page = (root / "simple" / "demo-kernels" / "index.html").read_text().count("<a href=")
    assert on_page == len(listed) and not list(root.rglob(".*.tmp"))


_SLOW_PUBLISHER = r"""
import shutil, sys, time
sys.path.insert(0, {tests!r})
from pathlib import Path
from wheelkit import cached_wheel, make_wheel
from envbuilder.kernels.wheelcache.shared import PublishTarget, publish
from envbuilder.kernels.wheelcache.url import CacheUrl
def slow(src, dst, length=0):
    while chunk := src.read(65536):
        dst.write(chunk)
        dst.flush()
        time.sleep(0.05)
shutil.copyfileobj = slow
wheel = make_wheel(Path(sys.argv[2]), filler=4_000_000)
publish(PublishTarget(CacheUrl.parse(sys.argv[1]), unsigned=True), None, [(cached_wheel(wheel), wheel)], None,
        lambda _: None)
"""


def test_killed_publish_leaves_no_entry(tmp_path: Path) -> None:
    """SIGKILL in the middle of copying the wheel: no entry appears (a reader misses), the hidden temp file is
    the only trace, and the next publish sweeps it once stale and completes the entry."""
    root = tmp_path / "cache"
    code = _SLOW_PUBLISHER.format(tests=str(REPO / "tests"))
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), str(tmp_path / "w")], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(root.glob("files/*/.*.tmp")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    partial = list(root.glob("files/*/.*.tmp"))
    assert len(partial) == 1 and partial[0].stat().st_size > 0
    assert not list(root.glob("entries/*.dsse.json")) and not list(root.glob("files/*/*.whl"))
    wheel = next((tmp_path / "w").glob("*.whl"))
    cached = cached_wheel(wheel)
    shared = SharedCache(CacheSource(CacheUrl.parse(str(root)), (), trust_unsigned=True), None, lambda _: None)
    assert shared.fetch(cached.key, "demo-kernels", tmp_path / "r1") is None
    old = time.time() - 2 * DirectoryTransport.STALE_SECONDS
    os.utime(partial[0], (old, old))
    publish(PublishTarget(CacheUrl.parse(str(root)), unsigned=True), None, [(cached, wheel)], None, lambda _: None)
    assert not partial[0].exists()
    got = shared.fetch(cached.key, "demo-kernels", tmp_path / "r2")
    assert got is not None and sha256_file(got[1]) == cached.sha256


# --- credentials --------------------------------------------------------------------------------------------

def test_credentials_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVBUILDER_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ENVBUILDER_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    assert credentials_for("reg:5000") is None
    (tmp_path / "docker").mkdir()
    auth = base64.b64encode(b"alice:s3cret").decode()
    (tmp_path / "docker" / "config.json").write_text(json.dumps({"auths": {"reg:5000": {"auth": auth}}}))
    creds = credentials_for("reg:5000")
    assert creds is not None and (creds.username, creds.password) == ("alice", "s3cret")
    assert "s3cret" not in repr(creds)
    assert credentials_for("other:5000") is None
    (tmp_path / "docker" / "config.json").write_text(json.dumps({"credHelpers": {"reg:5000": "nonexistent-helper"}}))
    with pytest.raises(WheelCacheAuthError, match="not installed"):
        credentials_for("reg:5000")
    (tmp_path / "docker" / "config.json").write_text('{"auths": {"reg:5000": {"auth": "%%%"}}}')
    with pytest.raises(WheelCacheAuthError, match="not base64"):
        credentials_for("reg:5000")
    monkeypatch.setenv("ENVBUILDER_REGISTRY_USER", "ci")
    with pytest.raises(WheelCacheAuthError, match="only one of"):
        credentials_for("reg:5000")
    monkeypatch.setenv("ENVBUILDER_REGISTRY_PASSWORD", "token")
    creds = credentials_for("reg:5000")
    assert creds is not None and creds.username == "ci" and creds.source == "$ENVBUILDER_REGISTRY_USER"


# --- the arch check of a downloaded wheel ----------------------------------------------------------------------

def test_fat_binary_detection_without_cuda_tools(tmp_path: Path) -> None:
    plain = tmp_path / "libplain.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-x", "c++", "-", "-o", str(plain)], input="int f(){return 1;}",
                   text=True, check=True)
    assert not elf_has_fatbin(plain)
    (tmp_path / "junk.so").write_bytes(b"\x7fELF" + b"\xff" * 60)
    assert not elf_has_fatbin(tmp_path / "junk.so")
    (tmp_path / "empty.so").write_bytes(b"")
    assert not elf_has_fatbin(tmp_path / "empty.so")
    wheel = make_wheel(tmp_path / "w", so=plain)
    never = pytest.fail  # a wheel without device code needs no cuobjdump
    check_downloaded_archs("demo-kernels", wheel, None, tmp_path / "x", never, "cache")  # type: ignore[arg-type]
    with pytest.raises(ArchMismatchError):
        from envbuilder.kernels.archs import ArchList

        check_downloaded_archs("demo-kernels", wheel, ArchList.parse("9.0"), tmp_path / "y",
                               lambda: None, "cache")


def test_publish_to_an_http_index_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w")
    with pytest.raises(WheelCachePublishError, match="read-only"):
        publish(PublishTarget(CacheUrl.parse("http://127.0.0.1:9/x"), unsigned=True), None,
                [(cached_wheel(wheel), wheel)], None, lambda _: None)


def test_http_index_unreachable_is_typed(tmp_path: Path) -> None:
    t = open_transport(CacheUrl.parse("http://127.0.0.1:9/x"))
    with pytest.raises(WheelCacheUnreachableError, match="cannot be reached"):
        t.entry("a" * 64)
    with pytest.raises(ValueError):
        t.entry("../../etc/passwd")
    assert WheelRef("a", "b", 1).size == 1
