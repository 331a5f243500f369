"""The on-disk TOML parse cache: same data as tomllib, corrupt entries re-parsed, dates not cached."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from envbuilder import toml_cache
from envbuilder.matrix import load_matrix

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVBUILDER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_every_matrix_file_comes_back_exactly_as_tomllib_parses_it() -> None:
    for path in sorted((REPO / "matrices").glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        first = toml_cache.loads(text)
        assert toml_cache.entry_path(text).is_file(), path.name
        again = toml_cache.loads(text)  # from the cache
        assert first == again == tomllib.loads(text), path.name
        # types too: 1 and 1.0 and True compare equal in Python, so compare their JSON-free repr
        assert repr(again) == repr(tomllib.loads(text)), path.name


def test_a_corrupt_or_foreign_entry_is_parsed_again() -> None:
    text = 'a = 1\nb = [1.5, "x", true]\n[t]\nc = { d = 2 }\n'
    entry = toml_cache.entry_path(text)
    entry.parent.mkdir(parents=True)
    for junk in (b"{not json", b"[1, 2]", b"\xff\xfe"):
        entry.write_bytes(junk)
        assert toml_cache.loads(text) == tomllib.loads(text)
        assert toml_cache.loads(text) == tomllib.loads(text)  # and the entry was rewritten


def test_dates_are_not_cached_and_bad_toml_still_raises() -> None:
    text = "when = 2025-06-15\n"
    assert toml_cache.loads(text) == tomllib.loads(text)
    assert not toml_cache.entry_path(text).exists()
    with pytest.raises(toml_cache.TOMLDecodeError):
        toml_cache.loads("a = = 1\n")


def test_an_unwritable_cache_does_not_fail(_own_cache: Path) -> None:
    _own_cache.parent.mkdir(exist_ok=True)
    _own_cache.write_text("a file where the cache directory should be")
    assert toml_cache.loads("a = 1\n") == {"a": 1}


def test_only_the_newest_entries_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toml_cache, "MAX_ENTRIES", 3)
    for i in range(5):
        toml_cache.loads(f"a = {i}\n")
        os.utime(toml_cache.entry_path(f"a = {i}\n"), (1000 + i, 1000 + i))
    kept = sorted(p.name for p in toml_cache.entry_path("a = 0\n").parent.iterdir())
    assert len(kept) == 3 and not toml_cache.entry_path("a = 0\n").exists()


def test_a_matrix_edit_is_seen_at_once(tmp_path: Path) -> None:
    mdir = tmp_path / "matrices"
    mdir.mkdir()
    for p in (REPO / "matrices").glob("*.toml"):
        (mdir / p.name).write_bytes(p.read_bytes())
    shutil.copytree(REPO / "matrices" / "upstream", mdir / "upstream")
    before = load_matrix(mdir).find_row(name="smoke")
    assert before is not None
    smoke = mdir / "smoke.toml"
    text = smoke.read_text()
    old = f'value = "{before.exclude_newer.value}"'
    assert old in text
    smoke.write_text(text.replace(old, 'value = "2025-01-02T00:00:00Z"', 1))
    after = load_matrix(mdir).find_row(name="smoke")
    assert after is not None and after.exclude_newer.value == "2025-01-02T00:00:00Z"
