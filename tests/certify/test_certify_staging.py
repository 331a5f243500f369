"""certify -o: the directory that gets signed is private, and the host signs the certificate it read itself.

A second local user (uid 65534, through setpriv) tries to replace certificate.json in the staging
directory after the environment wrote it and before the host signed it: the forged certificate must
never be signed or kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from envbuilder.certify.certificate import Artifact
from envbuilder.certify.expect import Expectations

OTHER_UID = 65534


def _envbuilder(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture()
def shared_dir() -> Iterator[Path]:
    """A directory another user can enter (like a project directory on a login node); pytest's are 0700."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as a second user")
    d = Path(tempfile.mkdtemp(prefix="envbuilder-sec-race-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _attacker_venv(base: Path, forged: Path) -> Path:
    """A 'venv' whose python runs the real checks, then, as uid 65534, swaps in a forged certificate.json
    in the directory the environment was told to write (the window between the run and the signing)."""
    venv = base / "venv"
    (venv / "bin").mkdir(parents=True)
    log = base / "attacker.log"
    py = venv / "bin" / "python"
    py.write_text(f"""#!/bin/sh
"{sys.executable}" "$@"
rc=$?
for a in "$@"; do case "$a" in --out=*) out="${{a#--out=}}";; esac; done
for target in "$out" "$out/.."; do
  setpriv --reuid {OTHER_UID} --regid {OTHER_UID} --clear-groups sh -c \\
    'cp "$1" "$2/.forged" && mv -f "$2/.forged" "$2/certificate.json" && echo "forged $2"' \\
    sh "{forged}" "$target" >>"{log}" 2>&1
done
exit $rc
""")
    py.chmod(0o755)
    return venv


def test_another_user_cannot_forge_what_the_owner_signs(shared_dir: Path) -> None:
    keys = shared_dir / "keys"
    assert _envbuilder("keygen", "-o", str(keys), "--name", "k").returncode == 0
    lock = shared_dir / "lock"
    lock.mkdir()
    (lock / "uv.lock").write_text("version = 1\n")
    lock_sha = hashlib.sha256(b"version = 1\n").hexdigest()
    exp = shared_dir / "expect.json"
    exp.write_text(json.dumps({"schema": 1, "lock_sha256": lock_sha, "packages": {"click": version("click")}}))
    exp.chmod(0o644)
    forged = shared_dir / "forged.json"
    forged.write_text(json.dumps({"schema": 1, "status": "pass", "level": 2, "lock_sha256": lock_sha, "row": "forged",
                                  "checks": [{"name": "drift", "level": 0, "status": "pass"}],
                                  "summary": {"pass": 1}, "artifact": {"kind": "venv"}}) + "\n")
    forged.chmod(0o644)
    venv = _attacker_venv(shared_dir, forged)
    out = shared_dir / "cert"
    proc = _envbuilder("certify", "--venv", str(venv), "--expect", str(exp), "--level", "0", "-o", str(out),
                       "--sign", str(keys / "k.key"))
    assert proc.returncode == 0, proc.stderr
    kept = json.loads((out / "certificate.json").read_text())
    assert kept.get("row") != "forged", "the forged certificate was kept"
    assert stat.S_IMODE(out.stat().st_mode) == 0o755  # the output itself is not left private or open
    verified = _envbuilder("verify-cert", str(out / "certificate.json"), "--lock", str(lock), "--key",
                           str(keys / "k.pub"), "--json")
    assert verified.returncode == 0, verified.stderr  # signed, intact, and the owner's own run
    attacker = (shared_dir / "attacker.log").read_text() if (shared_dir / "attacker.log").exists() else ""
    assert not [ln for ln in attacker.splitlines() if ln.startswith("forged ")], attacker
    assert "Permission denied" in attacker  # it tried, and the kernel refused


def test_staging_is_private_while_it_is_written(shared_dir: Path) -> None:
    """While the environment runs, the staging directory beside -o admits no other user, and the environment
    is given no directory to write into at all (the host writes every file from what it printed)."""
    exp = shared_dir / "expect.json"
    exp.write_text(json.dumps({"schema": 1, "lock_sha256": None, "packages": {"click": version("click")}}))
    venv = shared_dir / "venv"
    (venv / "bin").mkdir(parents=True)
    seen = shared_dir / "seen"
    (venv / "bin" / "python").write_text(f"""#!/bin/sh
echo "args: $*" > "{seen}"
stat -c '%a %u %n' "{shared_dir}"/.cert.staging.* >> "{seen}"
exec "{sys.executable}" "$@"
""")
    (venv / "bin" / "python").chmod(0o755)
    proc = _envbuilder("certify", "--venv", str(venv), "--expect", str(exp), "--level", "0", "-o",
                       str(shared_dir / "cert"))
    assert proc.returncode == 0, proc.stderr
    args, *modes = seen.read_text().splitlines()
    assert "--out" not in args, args
    assert modes
    for line in modes:
        mode, uid, _name = line.split(" ", 2)
        assert int(mode, 8) & 0o077 == 0 and int(uid) == os.geteuid(), line


def _printed(**fields: object) -> str:
    """What the environment prints: a certificate in envbuilder's canonical form, with `fields` replaced."""
    from envbuilder.canonical import dumps

    cert = {"schema": 1, "status": "pass", "level": 0, "lock_sha256": "a" * 64, "row": "r",
            "checks": [{"name": "drift", "level": 0, "status": "pass", "measured": None, "threshold": None,
                        "advice": None}], "summary": {"pass": 1},
            "artifact": {"kind": "venv"}, "envbuilder_version": "0", "expectations_sha256": None,
            "host": {"driver": None, "gpus": [], "gpu_count": 0, "python": "3.12", "torch": None},
            "loss_rule": "rule"}
    cert.update(fields)
    return dumps(cert)


EXP = Expectations(lock_sha256="a" * 64, row="r", artifact=Artifact("venv"))


@pytest.mark.parametrize(("rc", "stdout", "needle"), [
    (3, _printed(), "could not run"),
    (0, "", "printed no certificate"),
    (0, "not json\n", "not valid JSON"),
    (0, "[1]\n", "not a JSON object"),
    (0, _printed(lock_sha256="b" * 64), "certified lock_sha256"),
    (0, _printed(row="v2.3.0"), "certified row"),
    (0, _printed(artifact={"kind": "image"}), "certified artifact"),
    (0, _printed(status="great"), "field 'status'"),
    (0, _printed(checks=[{"name": "x", "status": 1}]), "field 'checks[0].status'"),
    (0, _printed().replace("\n", "\r\n"), "canonical form"),
    (0, "[" * 100 + "]" * 100, "nests deeper"),
])
def test_the_printed_certificate_is_checked_before_anything_is_written(rc: int, stdout: str, needle: str) -> None:
    from envbuilder.certify.flow import _certificate_from
    from envbuilder.errors import EnvbuilderError

    with pytest.raises(EnvbuilderError) as exc:
        _certificate_from(rc, stdout, EXP, "venv")
    assert needle in exc.value.cause and exc.value.exit_code in (52, 122), exc.value.cause


def test_the_printed_certificate_is_taken_byte_for_byte() -> None:
    from envbuilder.certify.flow import _certificate_from

    raw, cert = _certificate_from(50, _printed(), EXP, "venv")
    assert raw == _printed().encode() and cert.row == "r"
