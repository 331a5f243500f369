"""Export speed paths against the real Docker engine and the real mksquashfs: layers read from the
engine's storage (byte-identical to the `docker save` path), --compression presets, -processors,
and the content-addressed export cache (hit, miss, tamper, option change).

The image is built here from the whiteout test image's recipe (tests/export/test_export_docker.py) under
this module's own tag, so whiteouts, an opaque directory and a hard link pair are all exercised.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import test_export_docker as shared

from envbuilder.errors import InvalidOptionError, OverlayFeedError
from envbuilder.export import overlay, squashfs
from envbuilder.export.formats import get_format
from envbuilder.export.inspect import inspect_artifact
from envbuilder.export.pipeline import ExportOptions, ExportResult, export_image

pytestmark = [pytest.mark.integration, pytest.mark.docker]
REPO = Path(__file__).resolve().parents[2]


# the shared test images (built once per session, content-tagged)
tiny_image = shared.tiny_image
whiteout_image = shared.whiteout_image


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("whiteout_image"))


def _export(image: str, out: Path, **kw: Any) -> ExportResult:
    kw.setdefault("snippets", False)
    return export_image(ExportOptions(image=image, fmt=kw.pop("fmt", out.suffix[1:]), output=out, **kw))


@pytest.mark.parametrize("fmt", ["sqsh", "sif"])
def test_storage_layers_give_the_same_bytes_as_docker_save(image: str, fmt: str, tmp_path: Path) -> None:
    # the tar feed: the same tar stream whichever way the layers were read
    direct = _export(image, tmp_path / f"direct.{fmt}", layers="storage", feed="tar", cache=False)
    saved = _export(image, tmp_path / f"saved.{fmt}", layers="save", cache=False)
    assert (direct.layers_from, saved.layers_from) == ("storage", "docker-save")
    assert (direct.feed, saved.feed) == ("tar", "tar")
    assert direct.stats["whiteouts"] >= 1 and direct.stats["opaque_dirs"] >= 1 and direct.stats["hardlinks"] >= 1
    assert direct.stats == saved.stats
    assert direct.path.read_bytes() == saved.path.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no work dirs or temp files left


@pytest.mark.parametrize("name", sorted(squashfs.COMPRESSIONS))
def test_compression_presets_reach_mksquashfs(image: str, name: str, tmp_path: Path) -> None:
    r = _export(image, tmp_path / "c.sqsh", compression=name, cache=False, processors=2)
    sb = inspect_artifact(r.path)["squashfs"]
    assert r.squash_options == squashfs.COMPRESSIONS[name].split()
    assert r.processors == 2
    if name == "none":
        # nothing compressed: mksquashfs records its default compressor, with all NO_* flags set
        assert sb["flags"] & 0x0B == 0x0B  # NOI | NOD | NOF
    else:
        assert sb["compression"] == name
    assert sb["block_size"] == (1 << 20 if name in ("zstd", "lz4") else 128 * 1024)


def test_default_compression_per_format_and_all_cores(image: str, tmp_path: Path) -> None:
    sq = _export(image, tmp_path / "d.sqsh", cache=False)
    sif = _export(image, tmp_path / "d.sif", cache=False)
    assert inspect_artifact(sq.path)["squashfs"]["compression"] == "zstd"
    assert inspect_artifact(sif.path)["squashfs"]["compression"] == "gzip"
    assert sq.processors == len(os.sched_getaffinity(0))


def test_compression_and_squash_options_conflict(image: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError):
        _export(image, tmp_path / "x.sqsh", compression="zstd", squash_options="-comp xz")
    with pytest.raises(InvalidOptionError):
        _export(image, tmp_path / "x.sqsh", compression="brotli")


def test_export_cache_hit_miss_and_tamper(image: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _export(image, tmp_path / "a.sqsh", cache_dir=cache)
    assert first.cache == "miss" and len(first.cache_key) == 64
    stored = cache / first.cache_key[:2] / f"{first.cache_key}.sqsh"
    assert stored.read_bytes() == first.path.read_bytes()

    again = _export(image, tmp_path / "b.sqsh", cache_dir=cache)
    assert again.cache == "hit" and again.layers_from == "cache" and again.cache_key == first.cache_key
    assert again.sha256 == first.sha256 and again.path.read_bytes() == first.path.read_bytes()
    assert again.stats == first.stats
    assert again.seconds < first.seconds

    # other options: another key, a fresh build
    other = _export(image, tmp_path / "c.sqsh", cache_dir=cache, compression="lz4")
    assert other.cache == "miss" and other.cache_key != first.cache_key
    # the same bytes whatever the thread count: -processors is not part of the key
    one_core = _export(image, tmp_path / "d.sqsh", cache_dir=cache, processors=1)
    assert one_core.cache == "hit"

    # a tampered entry is never served: dropped, rebuilt, and the rebuild is correct. (The entry
    # is a hard link of the first export's output, so that file changes too: checked by hash.)
    with open(stored, "r+b") as fh:
        fh.seek(100)
        fh.write(b"\xff" * 8)
    rebuilt = _export(image, tmp_path / "e.sqsh", cache_dir=cache)
    assert rebuilt.cache == "miss" and rebuilt.sha256 == first.sha256
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == first.sha256


def test_cli_compression_and_cache_json(image: str, tmp_path: Path) -> None:
    env = {**os.environ, "ENVBUILDER_EXPORT_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "envbuilder", "export", image, "--compression", "lz4", "--no-snippets", "--json"]
    a = subprocess.run([*cmd, "-o", str(tmp_path / "a.sqsh")], capture_output=True, text=True, env=env,
                       cwd=REPO, check=False)
    assert a.returncode == 0, a.stderr
    b = subprocess.run([*cmd, "-o", str(tmp_path / "b.sqsh")], capture_output=True, text=True, env=env,
                       cwd=REPO, check=False)
    ra, rb = json.loads(a.stdout), json.loads(b.stdout)
    assert (ra["cache"], rb["cache"]) == ("miss", "hit") and ra["sha256"] == rb["sha256"]
    assert ra["squash_options"][:2] == ["-comp", "lz4"]
    off = subprocess.run([*cmd, "-o", str(tmp_path / "c.sqsh"), "--no-cache"], capture_output=True, text=True,
                         env=env, cwd=REPO, check=False)
    assert json.loads(off.stdout)["cache"] == "off"


# --- the directory feed: mksquashfs reads a read-only overlay mount of the layer directories ---------

needs_mount = pytest.mark.skipif(overlay.unavailable_reason() is not None,
                                 reason=f"overlay feed unavailable: {overlay.unavailable_reason()}")


def _listing(path: Path, offset: int = 0) -> list[str]:
    """Every path with its type, mode, owner, size and link target (unsquashfs -lln), dir sizes left out
    (a directory's size in squashfs is its index's, which depends on the layout, not on the contents)."""
    cmd = ["unsquashfs", "-lln", "-d", ""] + (["-o", str(offset)] if offset else []) + [str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[0][:1] in "-dlcbps":
            if parts[0].startswith("d"):
                parts[2] = "-"
            rows.append(" ".join(parts))
    return rows


def _contents(path: Path, dest: Path, offset: int = 0) -> dict[str, tuple[str, int]]:
    """path -> (sha256 of a regular file's bytes, its hard-link group size)."""
    cmd = ["unsquashfs", "-f", "-no-xattrs", "-d", str(dest)] + (["-o", str(offset)] if offset else []) + [str(path)]
    subprocess.run(cmd, capture_output=True, check=True)
    found = {}
    for root, _, files in os.walk(dest):
        for f in files:
            full = Path(root, f)
            if full.is_file() and not full.is_symlink():
                found[str(full.relative_to(dest))] = (hashlib.sha256(full.read_bytes()).hexdigest(),
                                                      full.stat().st_nlink)
    return found


@needs_mount
@pytest.mark.parametrize("fmt", ["sqsh", "sif"])
def test_mount_feed_is_deterministic_and_holds_what_the_tar_feed_holds(image: str, fmt: str, tmp_path: Path) -> None:
    a = _export(image, tmp_path / f"a.{fmt}", feed="mount", cache=False)
    b = _export(image, tmp_path / f"b.{fmt}", feed="mount", cache=False)
    tar = _export(image, tmp_path / f"t.{fmt}", feed="tar", cache=False)
    assert (a.feed, b.feed, tar.feed) == ("mount", "mount", "tar")
    assert a.sha256 == b.sha256 and a.path.read_bytes() == b.path.read_bytes()  # same bytes on every run
    assert a.stats == tar.stats and a.stats["whiteouts"] >= 1 and a.stats["opaque_dirs"] >= 1
    assert a.stats["hardlinks"] >= 1
    offset, t_offset = (get_format(fmt).partition_offset(r.path) for r in (a, tar))
    assert _listing(a.path, offset) == _listing(tar.path, t_offset)
    assert _contents(a.path, tmp_path / "xa", offset) == _contents(tar.path, tmp_path / "xt", t_offset)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no work dirs or temp files left
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()  # the mount never reached us


@needs_mount
def test_refused_mount_falls_back_to_the_tar_feed(image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    # what `unshare` says in a container without CAP_SYS_ADMIN (this host has it, so it is played here)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    (fake / "unshare").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    said: list[str] = []
    out = tmp_path / "out"
    out.mkdir()
    cache = tmp_path / "cache"
    r = export_image(ExportOptions(image=image, fmt="sqsh", output=out / "f.sqsh", snippets=False, cache_dir=cache),
                     progress=said.append)
    assert r.feed == "tar" and any("cannot be mounted here" in m and "Operation not permitted" in m for m in said)
    monkeypatch.undo()
    tar = _export(image, out / "t.sqsh", feed="tar", cache=False)
    assert r.sha256 == tar.sha256
    assert sorted(p.name for p in out.iterdir()) == ["f.sqsh", "t.sqsh"]
    # filed under the tar feed's key: a tar-feed export finds it, a mount-feed one does not
    assert _export(image, out / "h.sqsh", feed="tar", cache_dir=cache).cache == "hit"
    assert _export(image, out / "m.sqsh", feed="mount", cache_dir=cache).cache == "miss"


def test_feed_options(image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidOptionError):
        _export(image, tmp_path / "x.sqsh", feed="mount", layers="save")
    with pytest.raises(InvalidOptionError):
        _export(image, tmp_path / "x.sqsh", feed="pipe")
    monkeypatch.setattr(overlay, "unavailable_reason", lambda: "mounting needs root")  # as a non-root user
    with pytest.raises(OverlayFeedError) as exc:
        _export(image, tmp_path / "x.sqsh", feed="mount", cache=False)
    assert exc.value.exit_code == 112 and "mounting needs root" in exc.value.cause
    assert _export(image, tmp_path / "y.sqsh", cache=False).feed == "tar"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
