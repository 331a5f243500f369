"""Export cache and compression presets without an engine: real files, real hashing."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.choices import EXPORT_COMPRESSIONS
from envbuilder.errors import InvalidOptionError
from envbuilder.export import squashfs
from envbuilder.export.cache import ExportCache, export_key


def _key(**over: object) -> str:
    base: dict[str, object] = dict(image_id="sha256:" + "a" * 64, fmt="sqsh", squash_args=["-comp", "zstd"],
                                   source_date_epoch=1, lock_sha256="b" * 64, row="smoke", image_ref="x:1",
                                   mksquashfs="mksquashfs version 4.5.1")
    base.update(over)
    return export_key(**base)  # type: ignore[arg-type]


def test_presets_match_the_cli_choices() -> None:
    assert tuple(squashfs.COMPRESSIONS) == EXPORT_COMPRESSIONS
    assert squashfs.compression_options("sqsh", None).startswith("-comp zstd")
    assert squashfs.compression_options("sif", None) == "-comp gzip"
    with pytest.raises(InvalidOptionError):
        squashfs.compression_options("sqsh", "brotli")


def test_key_covers_what_the_bytes_depend_on() -> None:
    k = _key()
    assert len(k) == 64 and k == _key()
    for change in (dict(image_id="sha256:" + "c" * 64), dict(squash_args=["-comp", "lz4"]), dict(row="v2"),
                   dict(source_date_epoch=2), dict(lock_sha256="d" * 64), dict(fmt="sif"),
                   dict(mksquashfs="mksquashfs version 4.6"), dict(feed="mount")):
        assert _key(**change) != k, change
    # the reference is inside a SIF (its definition file) but not inside a sqsh
    assert _key(image_ref="y:2") == k
    assert _key(fmt="sif", image_ref="y:2") != _key(fmt="sif")


def test_store_fetch_and_tamper(tmp_path: Path) -> None:
    cache = ExportCache(tmp_path / "cache")
    art = tmp_path / "a.sqsh"
    art.write_bytes(b"squashfs bytes" * 1000)
    import hashlib

    meta = {"sha256": hashlib.sha256(art.read_bytes()).hexdigest(), "size": art.stat().st_size}
    assert cache.fetch("ab" * 32, "sqsh", tmp_path / "miss.tmp") is None
    assert cache.store("ab" * 32, "sqsh", art, meta) is not None
    got = cache.fetch("ab" * 32, "sqsh", tmp_path / "hit.tmp")
    assert got is not None and (tmp_path / "hit.tmp").read_bytes() == art.read_bytes()
    # same size, other bytes: detected by the sha256, dropped, never served
    entry = cache.entry("ab" * 32, "sqsh").artifact
    data = bytearray(entry.read_bytes())
    data[0] ^= 0xFF
    entry.unlink()
    entry.write_bytes(bytes(data))
    assert cache.fetch("ab" * 32, "sqsh", tmp_path / "bad.tmp") is None
    assert not (tmp_path / "bad.tmp").exists() and not entry.exists()


def test_store_never_fails_the_export(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    art = tmp_path / "a.sqsh"
    art.write_bytes(b"x")
    assert ExportCache(blocker).store("cd" * 32, "sqsh", art, {"sha256": "0", "size": 1}) is None


def test_prune_drops_least_recently_used_first(tmp_path: Path) -> None:
    import os

    cache = ExportCache(tmp_path / "cache", max_bytes=250)
    keys = ["a1" * 32, "b2" * 32, "c3" * 32]
    for i, key in enumerate(keys):
        art = tmp_path / f"{i}.sqsh"
        art.write_bytes(bytes([i]) * 100)
        import hashlib

        assert cache.store(key, "sqsh", art, {"sha256": hashlib.sha256(art.read_bytes()).hexdigest(),
                                              "size": 100}) is not None
        os.utime(cache.entry(key, "sqsh").meta, (1000 + i, 1000 + i))
    # the third store pruned: 300 bytes > 250, the oldest entry (a1) went first
    assert not cache.entry(keys[0], "sqsh").artifact.exists()
    assert cache.entry(keys[1], "sqsh").artifact.exists() and cache.entry(keys[2], "sqsh").artifact.exists()
