"""envbuilder.dsse: the one signer (keygen's ed25519 keys, DSSE envelopes) shared by certificates and the
wheel cache: a round trip verifies, any other key, payload type or payload does not, and envelopes of the
wrong shape are typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.dsse import (
    Envelope,
    canonical_json,
    generate_keypair,
    keyid_of,
    load_private_key,
    load_public_key,
)
from envbuilder.errors import InputTooDeepError, SignatureInvalidError, SigningKeyError


@pytest.fixture()
def keys(tmp_path: Path) -> tuple[object, object, object]:
    a = generate_keypair(tmp_path / "a.key", tmp_path / "a.pub")
    b = generate_keypair(tmp_path / "b.key", tmp_path / "b.pub")
    return load_private_key(a.private), load_public_key(a.public), load_public_key(b.public)


def test_round_trip_and_refusals(keys: tuple[object, object, object]) -> None:
    private, public, other = keys
    env = Envelope.sign("application/x-test", canonical_json({"b": 1, "a": [2]}), private)
    again = Envelope.from_json(env.to_json(), "env.json")
    assert again == env and again.body == b'{"a":[2],"b":1}'
    assert again.verified_by([other, public]) == env.signatures[0][0]
    assert again.verified_by([other]) is None
    assert Envelope("application/x-other", env.body, env.signatures).verified_by([public]) is None
    assert Envelope(env.payload_type, env.body + b" ", env.signatures).verified_by([public]) is None


@pytest.mark.parametrize("text", ['["x"]', '{"payloadType": "t", "payload": "e30=", "signatures": ["AAAA"]}',
                                  '{"payloadType": 1, "payload": "e30=", "signatures": []}',
                                  '{"payloadType": "t", "payload": "%%%", "signatures": []}',
                                  '{"payloadType": "t"}', "not json", '{"payload": "e30=", "payload": "e30="}'])
def test_malformed_envelopes_are_typed_errors(text: str) -> None:
    with pytest.raises(SignatureInvalidError, match=r"env\.json is not a DSSE envelope \(\w"):
        Envelope.from_json(text, "env.json")


def test_deep_envelope_is_refused_without_recursion() -> None:
    with pytest.raises(InputTooDeepError):
        Envelope.from_json("[" * 100000, "env.json")


def test_keys_are_checked(tmp_path: Path) -> None:
    (tmp_path / "big.pem").write_bytes(b"-" * (65 * 1024))
    with pytest.raises(SigningKeyError, match="larger than"):
        load_public_key(tmp_path / "big.pem")
    pair = generate_keypair(tmp_path / "k.key", tmp_path / "k.pub")
    with pytest.raises(SigningKeyError, match="not a PEM public key"):
        load_public_key(pair.private)
    with pytest.raises(SigningKeyError, match="exists"):
        generate_keypair(pair.private, tmp_path / "other.pub")
    assert pair.keyid == keyid_of(load_public_key(pair.public)) and len(pair.keyid) == 64
