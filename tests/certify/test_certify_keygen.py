"""keygen: two runs at once never leave one run's private key beside the other's public key."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from envbuilder.errors import InvalidOptionError, SigningKeyError


def _one(directory: str, barrier: object, results: object) -> None:
    from envbuilder.dsse import generate_keypair

    barrier.wait()  # type: ignore[attr-defined]
    try:
        generate_keypair(Path(directory) / "k.key", Path(directory) / "k.pub")
        results.put("ok")  # type: ignore[attr-defined]
    except SigningKeyError:
        results.put("exists")  # type: ignore[attr-defined]
    except Exception as exc:
        results.put(f"error: {exc!r}")  # type: ignore[attr-defined]


def _pair_matches(d: Path) -> bool:
    from cryptography.hazmat.primitives import serialization

    from envbuilder.dsse import load_private_key, load_public_key

    priv = load_private_key(d / "k.key").public_key().public_bytes(serialization.Encoding.Raw,
                                                                    serialization.PublicFormat.Raw)
    pub = load_public_key(d / "k.pub").public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return bool(priv == pub)


def test_concurrent_keygen_runs_leave_one_whole_pair(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    for round_ in range(30):
        d = tmp_path / f"r{round_}"
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_one, args=(str(d), barrier, results)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        outcome = sorted(results.get(timeout=10) for _ in procs)
        assert outcome == ["exists", "ok"], (round_, outcome)
        assert _pair_matches(d), f"round {round_}: the .key and .pub are from different runs"
        assert sorted(p.name for p in d.iterdir()) == ["k.key", "k.pub"]  # no temp files left
        assert (d / "k.key").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("name", ["", ".k", "..", "a/b", "a\nb", "-rf"])
def test_names_are_plain(tmp_path: Path, name: str) -> None:
    from envbuilder.dsse import key_paths

    with pytest.raises(InvalidOptionError):
        key_paths(tmp_path, name)
    assert not list(tmp_path.iterdir())


def test_a_failed_keygen_leaves_no_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from envbuilder import dsse as sign

    def full(*a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(sign, "_write_new", full)
    with pytest.raises(OSError):
        sign.generate_keypair(tmp_path / "new" / "k.key", tmp_path / "new" / "k.pub")
    assert not (tmp_path / "new").exists()
