"""Signed certificates: keygen, DSSE envelope over an in-toto statement, and verify-cert --key.

Real ed25519 keys from `cryptography`, real CLI subprocesses; every edit to a signed certificate
or its envelope must be rejected.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.certify.sign import ENVELOPE_NAME, sign_certificate, statement, verify_signature
from envbuilder.dsse import generate_keypair, load_private_key, load_public_key
from envbuilder.errors import CertificateUnsignedError, SignatureInvalidError, SigningKeyError

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.fixture()
def certdir(tmp_path: Path) -> tuple[Path, Path]:
    """(lock dir with a bare uv.lock, cert dir with a passing certificate for it on an sqsh artifact)."""
    lock = tmp_path / "lock"
    lock.mkdir()
    (lock / "uv.lock").write_text("version = 1\n")
    lock_sha = hashlib.sha256(b"version = 1\n").hexdigest()
    cert = json.loads((REPO / "bench/results/certify-h100/certificate.json").read_text())
    cert["lock_sha256"] = lock_sha
    cert["artifact"] = {"kind": "sqsh", "ref": "/x/smoke.sqsh", "sha256": "ab" * 32}
    d = tmp_path / "cert"
    d.mkdir()
    (d / "certificate.json").write_text(json.dumps(cert, indent=2, sort_keys=True) + "\n")
    return lock, d


@pytest.fixture()
def keys(tmp_path: Path) -> tuple[Path, Path]:
    pair = generate_keypair(tmp_path / "k" / "s.key", tmp_path / "k" / "s.pub")
    assert oct(pair.private.stat().st_mode & 0o777) == "0o600"
    return pair.private, pair.public


def test_sign_then_verify_binds_subject_and_bytes(certdir: tuple[Path, Path], keys: tuple[Path, Path]) -> None:
    _, d = certdir
    res = sign_certificate(d / "certificate.json", load_private_key(keys[0]))
    env = json.loads((d / ENVELOPE_NAME).read_text())
    assert env["payloadType"] == "application/vnd.in-toto+json"
    stmt = json.loads(base64.b64decode(env["payload"]))
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["subject"] == [{"name": "smoke.sqsh", "digest": {"sha256": "ab" * 32}}] == [res.subject]
    assert stmt["predicate"]["certificate"]["sha256"] == hashlib.sha256((d / "certificate.json").read_bytes()) \
        .hexdigest()
    out = verify_signature(d / "certificate.json", load_public_key(keys[1]))
    assert out["signed"] and out["keyid"] == res.keyid


def test_image_subject_is_the_image_digest() -> None:
    cert = {"artifact": {"kind": "image", "ref": "t:1", "digest": "sha256:" + "c" * 64}, "lock_sha256": "a" * 64,
            "status": "pass", "checks": []}
    assert statement(json.dumps(cert).encode())["subject"] == [{"name": "t:1", "digest": {"sha256": "c" * 64}}]


def test_every_edit_is_rejected(certdir: tuple[Path, Path], keys: tuple[Path, Path], tmp_path: Path) -> None:
    _, d = certdir
    cert_path = d / "certificate.json"
    sign_certificate(cert_path, load_private_key(keys[0]))
    pub = load_public_key(keys[1])
    original, env_text = cert_path.read_text(), (d / ENVELOPE_NAME).read_text()

    cert = json.loads(original)  # forge a number: the statement's sha256 no longer matches
    cert["checks"][-3]["measured"]["probe_tflops"] = 9999.0
    cert_path.write_text(json.dumps(cert, indent=2, sort_keys=True) + "\n")
    with pytest.raises(SignatureInvalidError, match="changed after signing"):
        verify_signature(cert_path, pub)
    cert_path.write_text(original + " ")  # whitespace counts too: the signed object is the bytes
    with pytest.raises(SignatureInvalidError):
        verify_signature(cert_path, pub)
    cert_path.write_text(original)

    env = json.loads(env_text)  # re-point the statement at the edited certificate: signature breaks
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["predicate"]["status"] = "pass"
    stmt["subject"][0]["digest"]["sha256"] = "ee" * 32
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    (d / ENVELOPE_NAME).write_text(json.dumps(env))
    with pytest.raises(SignatureInvalidError, match="no longer verifies: the envelope's payload was changed"):
        verify_signature(cert_path, pub)
    env = json.loads(env_text)  # an edited payloadType is named as such, not as "no signature verifies"
    env["payloadType"] = "application/json"
    (d / ENVELOPE_NAME).write_text(json.dumps(env))
    with pytest.raises(SignatureInvalidError, match="payloadType 'application/json'"):
        verify_signature(cert_path, pub)
    (d / ENVELOPE_NAME).write_text("{not json")
    with pytest.raises(SignatureInvalidError, match="not a DSSE envelope"):
        verify_signature(cert_path, pub)
    (d / ENVELOPE_NAME).write_text(env_text)
    other = generate_keypair(tmp_path / "o" / "o.key", tmp_path / "o" / "o.pub")
    with pytest.raises(SignatureInvalidError) as e:
        verify_signature(cert_path, load_public_key(other.public))
    assert e.value.exit_code == 91
    assert verify_signature(cert_path, pub)["signed"]
    (d / ENVELOPE_NAME).unlink()
    with pytest.raises(CertificateUnsignedError):
        verify_signature(cert_path, pub)


def test_keys_are_checked(tmp_path: Path, keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SigningKeyError, match="exists"):
        generate_keypair(keys[0], tmp_path / "new.pub")
    with pytest.raises(SigningKeyError, match="not a PEM public key"):
        load_public_key(keys[0])
    with pytest.raises(SigningKeyError, match="not an unencrypted PEM private key"):
        load_private_key(keys[1])
    monkeypatch.delenv("ENVBUILDER_SIGNING_KEY", raising=False)
    with pytest.raises(SigningKeyError, match="ENVBUILDER_SIGNING_KEY"):
        load_private_key(None)
    monkeypatch.setenv("ENVBUILDER_SIGNING_KEY", keys[0].read_text())
    assert load_private_key(None).public_key() is not None


def test_cli_keygen_and_verify_cert(certdir: tuple[Path, Path], tmp_path: Path) -> None:
    lock, d = certdir
    made = _cli("keygen", "-o", str(tmp_path / "kk"), "--json")
    assert made.returncode == 0, made.stderr
    pair = json.loads(made.stdout)
    assert "PRIVATE KEY" not in made.stdout + made.stderr  # the secret never reaches a log
    again = _cli("keygen", "-o", str(tmp_path / "kk"))
    assert again.returncode == 90 and "exists" in again.stderr

    unsigned = _cli("verify-cert", str(d / "certificate.json"), "--lock", str(lock))
    assert unsigned.returncode == 0 and "unsigned" in unsigned.stderr
    refused = _cli("verify-cert", str(d / "certificate.json"), "--lock", str(lock), "--key", pair["public"])
    assert refused.returncode == 92, refused.stderr

    sign_certificate(d / "certificate.json", load_private_key(Path(pair["private"])))
    ok = _cli("verify-cert", str(d / "certificate.json"), "--lock", str(lock), "--key", pair["public"], "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["signature"]["keyid"] == pair["keyid"]
    cert = json.loads((d / "certificate.json").read_text())
    cert["status"] = "pass"
    cert["host"]["gpus"][0]["name"] = "NVIDIA B200"  # a forged host keeps status consistent, but not the bytes
    (d / "certificate.json").write_text(json.dumps(cert, indent=2, sort_keys=True) + "\n")
    forged = _cli("verify-cert", str(d / "certificate.json"), "--lock", str(lock), "--key", pair["public"])
    assert forged.returncode == 91 and "changed after signing" in forged.stderr
    assert "Traceback" not in forged.stderr


def test_certify_signs_with_the_key_from_the_ci_secret_variable(tmp_path: Path) -> None:
    """certify -o with $ENVBUILDER_SIGNING_KEY (no --sign): envelope beside the certificate, key in no output."""
    from importlib.metadata import version

    pair = generate_keypair(tmp_path / "k" / "s.key", tmp_path / "k" / "s.pub")
    pem = pair.private.read_text()
    exp = tmp_path / "expect.json"
    exp.write_text(json.dumps({"schema": 1, "lock_sha256": "cd" * 32, "packages": {"click": version("click")}}))
    out = tmp_path / "cert"
    proc = _cli("certify", "--in-place", "--expect", str(exp), "--level", "0", "-o", str(out),
                env={"ENVBUILDER_SIGNING_KEY": pem})
    assert proc.returncode == 0, proc.stderr
    assert "signed by key" in proc.stderr
    got = verify_signature(out / "certificate.json", load_public_key(pair.public))
    assert got["subject"] == {"name": "uv.lock", "digest": {"sha256": "cd" * 32}}
    body = pem.split("-----")[2].strip()
    assert body not in proc.stdout + proc.stderr
    assert all(body not in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
