"""The bad-input and fault corpus: every case ends in its own exit code, one `error:` line, one
`fix:` line (click's `Try ...` line for usage errors), no traceback, and leaves every file the user
had byte-identical (sha256 and mode of each file, before and after).

Cases run in-process through `envbuilder.cli.main` (what the `envbuilder` script calls) and stay
offline: they fail before the network, or lock against a local index of tiny wheels (faultkit).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from faultkit import OFFLINE_LOCK_ARGS, offline_env, offline_index, snapshot

from envbuilder.cli import main

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(args: list[str]) -> Result:
    """`envbuilder ARGS` in this process; the CLI's signal handlers are restored afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    return Result(code, out.getvalue(), err.getvalue())


@dataclass
class Kit:
    tmp: Path
    lock: Path  # a real lock directory (uv lock against the offline index), the user's copy
    env: dict[str, str]
    request: pytest.FixtureRequest | None = None
    mounts: list[Path] = field(default_factory=list)

    def bundle(self, split: bool = False) -> Path:
        """A copy of a real bundle (`envbuilder bundle` of a lock with hashed URLs), unsplit or split."""
        assert self.request is not None
        masters: dict[str, Path] = self.request.getfixturevalue("bundle_master")
        dest = self.tmp / ("split-bundle" if split else "bundle")
        if not dest.exists():
            shutil.copytree(masters["split" if split else "unsplit"], dest)
        return dest

    def venv_beside(self) -> tuple[Path, Path]:
        """(the venv path an install writes, a user file beside it that must survive)."""
        victim = self.tmp / "victim.txt"
        victim.write_text("the user's file beside the venv\n")
        return self.tmp / "venv", victim


@dataclass
class Case:
    args: list[str]
    watch: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="session")
def offline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("offline-index")
    return offline_env(offline_index(root / "wheels"), root / "uv-cache")


@pytest.fixture(scope="session")
def built_lock(tmp_path_factory: pytest.TempPathFactory, offline: dict[str, str]) -> Path:
    out = tmp_path_factory.mktemp("lock-master") / "lk"
    proc = subprocess.run([sys.executable, "-m", "envbuilder", *OFFLINE_LOCK_ARGS, "-o", str(out)],
                          env={**os.environ, **offline}, capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture()
def kit(tmp_path: Path, built_lock: Path, offline: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> Iterator[Kit]:
    for k, v in offline.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    lock = tmp_path / "lk"
    shutil.copytree(built_lock, lock)
    (lock / "NOTES.md").write_text("my notes\n")
    k = Kit(tmp_path, lock, offline, request)
    yield k
    for m in reversed(k.mounts):
        subprocess.run(["umount", "-l", str(m)], check=False)


# --- helpers that damage a copy of the lock the way a user (or a disk) might ----------------------


def _rehash(lock: Path) -> None:
    """Make the record agree with the files again, as someone covering an edit would."""
    rec = json.loads((lock / "envbuilder.lock.json").read_text())
    for name in rec["files"]:
        rec["files"][name] = hashlib.sha256((lock / name).read_bytes()).hexdigest()
    rec["lock_sha256"] = rec["files"]["uv.lock"]
    (lock / "envbuilder.lock.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")


def _truncate_uv_lock(lock: Path) -> None:
    text = (lock / "uv.lock").read_text()
    (lock / "uv.lock").write_text(text[: len(text) * 2 // 3].rsplit("\n[[package]]", 1)[0] + "\n")
    _rehash(lock)


def _record(lock: Path, data: object) -> None:
    (lock / "envbuilder.lock.json").write_text(json.dumps(data))


def _edit_record(lock: Path, **fields: object) -> None:
    rec = json.loads((lock / "envbuilder.lock.json").read_text())
    rec.update(fields)
    (lock / "envbuilder.lock.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")


def _cert(k: Kit, **fields: object) -> Path:
    rec = json.loads((k.lock / "envbuilder.lock.json").read_text())
    checks = [{"name": "drift", "status": "pass"}, {"name": "imports", "status": "pass"}]
    cert = {"schema": 1, "status": "pass", "level": 0, "lock_sha256": rec["lock_sha256"], "row": "smoke",
            "checks": checks, "summary": {"pass": 2, "fail": 0}, "artifact": {"kind": "venv"}}
    cert.update(fields)
    path = k.tmp / "certificate.json"
    path.write_text(json.dumps(cert))
    return path


def _pem(k: Kit) -> Path:
    p = k.tmp / "ca.txt"
    p.write_text("this is not a certificate\n")
    return p


def _foreign(k: Kit) -> Path:
    d = k.tmp / "mine"
    d.mkdir()
    (d / "thesis.tex").write_text("years of work\n")
    return d


def _squashfs(k: Kit, comp: str = "gzip") -> Path:
    src = k.tmp / "rootfs"
    (src / "etc").mkdir(parents=True, exist_ok=True)
    (src / "etc" / "hello").write_text("hello\n")
    out = k.tmp / f"img-{comp}.sqsh"
    subprocess.run(["mksquashfs", str(src), str(out), "-comp", comp, "-quiet", "-noappend", "-no-progress"],
                   check=True, capture_output=True)
    return out


_SB = struct.Struct("<4sIIIIHHHHHHQQQQQQQQ")


def _damage_sb(k: Kit, comp: str, index: int, value: int) -> Path:
    img = _squashfs(k, comp)
    raw = bytearray(img.read_bytes())
    fields = list(_SB.unpack(raw[:96]))
    fields[index] = value
    raw[:96] = _SB.pack(*fields)
    img.write_bytes(bytes(raw))
    return img


def _damage_inodes(k: Kit, comp: str, at: int, data: bytes) -> Path:
    img = _squashfs(k, comp)
    raw = bytearray(img.read_bytes())
    start = _SB.unpack(raw[:96])[15]
    raw[start + at: start + at + len(data)] = data
    img.write_bytes(bytes(raw))
    return img


def _manifest(bundle: Path, edit: Callable[[dict[str, Any]], object], *, resum: bool = True) -> None:
    """Edit a bundle's manifest the way an attacker covering their tracks would: SHA256SUMS follows."""
    path = bundle / "envbuilder-bundle.json"
    doc = json.loads(path.read_text())
    edit(doc)
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    path.write_text(text)
    sums = bundle / "SHA256SUMS"
    if resum and sums.is_file():
        digest = hashlib.sha256(text.encode()).hexdigest()
        lines = [ln for ln in sums.read_text().splitlines() if not ln.endswith("  envbuilder-bundle.json")]
        sums.write_text("".join(f"{ln}\n" for ln in lines) + f"{digest}  envbuilder-bundle.json\n")


def _sdist_entry(doc: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in doc["packages"] if p["kind"] == "sdist")


def _install(k: Kit, bundle: Path, *extra: str) -> Case:
    venv, _victim = k.venv_beside()
    return Case(["install", str(bundle), "--venv", str(venv), *extra], [k.tmp])


def _install_edited(k: Kit, edit: Callable[[dict[str, Any]], object], *, resum: bool = True) -> Case:
    bundle = k.bundle()
    _manifest(bundle, edit, resum=resum)
    return _install(k, bundle)


def _index(bundle: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    path = bundle / "envbuilder-bundle.parts.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def _install_split(k: Kit, edit: Callable[[dict[str, Any]], object]) -> Case:
    bundle = k.bundle(split=True)
    _index(bundle, edit)
    return _install(k, bundle)


def _retar(k: Kit, members: dict[str, bytes]) -> Case:
    """A split bundle whose one part is a tar of `members`, with the index rehashed to match."""
    import io
    import tarfile

    bundle = k.bundle(split=True)
    for p in bundle.glob("bundle.tar.*"):
        p.unlink()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    _raw_part(bundle, raw)
    return _install(k, bundle)


def _raw_part(bundle: Path, raw: bytes) -> None:
    (bundle / "bundle.tar.000").write_bytes(raw)
    digest = hashlib.sha256(raw).hexdigest()
    _index(bundle, lambda d: d.update(parts=[{"name": "bundle.tar.000", "size": len(raw), "sha256": digest}],
                                      tar_sha256=digest, tar_size=len(raw)))


def _not_tar(k: Kit) -> Case:
    bundle = k.bundle(split=True)
    for p in bundle.glob("bundle.tar.*"):
        p.unlink()
    _raw_part(bundle, b"this hashes correctly but is no tar\n" * 100)
    return _install(k, bundle)


def _lock(*extra: str) -> list[str]:
    return [*OFFLINE_LOCK_ARGS, *extra]


# --- the corpus ---------------------------------------------------------------------------------
# id -> (setup returning the case, exit code, a piece of the cause)

CASES: dict[str, tuple[Callable[[Kit], Case], int, str]] = {
    # lock: inputs checked before any uv lock
    "lock-glibc-garbage": (lambda k: Case(_lock("--glibc", "xyz", "-o", str(k.lock)), [k.lock]), 18, "--glibc 'xyz'"),
    "lock-glibc-1.0": (lambda k: Case(_lock("--glibc", "1.0", "-o", str(k.lock)), [k.lock]), 18, "--glibc '1.0'"),
    "lock-find-links-missing": (lambda k: Case(_lock("--find-links", "/nonexistent", "-o", str(k.lock)), [k.lock]),
                                18, "--find-links /nonexistent"),
    "lock-ca-bundle-not-pem": (lambda k: Case(_lock("--ca-bundle", str(_pem(k)), "-o", str(k.lock)), [k.lock]),
                               33, "no PEM certificate"),
    "lock-ca-bundle-endless": (lambda k: Case(_lock("--ca-bundle", "/dev/zero", "-o", str(k.lock)), [k.lock]), 121,
                               "larger than"),
    "build-ca-bundle-endless": (lambda k: Case(["build", str(k.lock), "--ca-bundle", "/dev/zero"], [k.lock]), 121,
                                "larger than"),
    "certify-sign-key-endless": (lambda k: Case(["certify", "--venv", sys.prefix, "--level", "0", "-o",
                                                 str(k.tmp / "c"), "--sign", "/dev/zero"], [k.tmp]), 90, "larger than"),
    "verify-cert-key-endless": (lambda k: Case(["verify-cert", str(_cert(k)), "--lock", str(k.lock), "--key",
                                                "/dev/zero"], [k.tmp]), 90, "larger than"),
    "lock-ca-bundle-missing": (lambda k: Case(_lock("--ca-bundle", "/nonexistent.pem")), 2, "does not exist"),
    "lock-o-proc": (lambda k: Case(_lock("-o", "/proc/x")), 76, "/proc/x"),
    "lock-o-is-file": (lambda k: Case(_lock("-o", str(k.lock / "NOTES.md")), [k.lock]), 41, "not a directory"),
    "lock-o-foreign-dir": (lambda k: Case(_lock("-o", str(_foreign(k))), [k.tmp / "mine"]), 72,
                           "not an envbuilder lock directory"),
    "lock-o-dangling-symlink": (lambda k: Case(_lock("-o", str(_dangling(k)))), 41, "dangling symlink"),
    "lock-o-root": (lambda k: Case(_lock("-o", "/")), 41, "filesystem root"),
    "lock-set-twice": (lambda k: Case(["lock", "--nemo", "smoke", "--no-detect", "--set", "torch==2.7.0",
                                       "--set", "torch==2.6.0"]), 12, "disagree"),
    "lock-set-twice-normalised": (lambda k: Case(["lock", "--nemo", "smoke", "--no-detect", "--set",
                                                  "Causal_Conv1d==1", "--set", "causal-conv1d==2"]), 12, "disagree"),
    "lock-sm-nonexistent": (lambda k: Case(["lock", "--nemo", "smoke", "--sm", "12.5"]), 75, "--sm 12.5"),
    "lock-sm-too-new-for-cuda": (lambda k: Case(["lock", "--nemo", "v2.3.0", "--sm", "10.3", "-o",
                                                 str(k.tmp / "new")]), 75, "cannot compile for sm_103"),
    "lock-sm-syntax": (lambda k: Case(["lock", "--nemo", "smoke", "--sm", "nine"]), 18, "not a compute capability"),
    "lock-unknown-tag": (lambda k: Case(["lock", "--nemo", "v9.9.9", "--no-detect"]), 10, "unknown NeMo tag"),
    "lock-unmanaged-package": (lambda k: Case(["lock", "--nemo", "smoke", "--no-detect", "--set", "numpy==2"]), 13,
                               "does not manage"),
    "lock-set-syntax": (lambda k: Case(["lock", "--nemo", "smoke", "--no-detect", "--set", "flash-attn>2"]), 18,
                        "not NAME==VERSION"),
    "lock-python-outside": (lambda k: Case(["lock", "--nemo", "smoke", "--no-detect", "--python", "3.10"]), 12,
                            "Python 3.10 is outside"),
    "lock-driver-syntax": (lambda k: Case(["lock", "--nemo", "smoke", "--driver", "abc"]), 18,
                           "not a driver version"),
    "lock-check-stale": (lambda k: Case(_lock("--glibc", "2.36", "--check", "-o", str(k.lock)), [k.lock]), 16,
                         "files that would change: envbuilder.lock.json"),
    "lock-uv-unsatisfiable": (lambda k: Case(["lock", "--nemo", "smoke", "--no-detect", "--set",
                                              "causal-conv1d==none", "--set", "torch==2.12.0", "-o", str(k.lock)],
                                             [k.lock]), 14, "uv lock failed"),
    "lock-no-wait-busy": (lambda k: Case(_lock("--no-wait", "-o", str(_held(k))), [k.lock]), 71,
                          "another envbuilder run is writing"),
    # build: every flag before the engine is asked for anything
    "build-jobs-zero": (lambda k: Case(["build", str(k.lock), "--jobs", "0"], [k.lock]), 18, "--jobs 0"),
    "build-jobs-negative": (lambda k: Case(["build", str(k.lock), "--jobs", "-3"], [k.lock]), 18, "--jobs -3"),
    "build-arch-junk": (lambda k: Case(["build", str(k.lock), "--arch-list", "junk"], [k.lock]), 18,
                        "not a CUDA arch"),
    "build-ca-not-pem": (lambda k: Case(["build", str(k.lock), "--ca-bundle", str(_pem(k))], [k.lock]), 33,
                         "no PEM certificate"),
    "build-push-bad-ref": (lambda k: Case(["build", str(k.lock), "--push", "Reg.example/Team Nemo:v1"], [k.lock]), 18,
                           "--push 'Reg.example/Team Nemo:v1' is not REGISTRY/NAME"),
    "build-push-digest": (lambda k: Case(["build", str(k.lock), "--push", "reg.example/nemo@sha256:" + "a" * 64],
                                         [k.lock]), 18, "a push names a tag, not a digest"),
    "build-secret-syntax": (lambda k: Case(["build", str(k.lock), "--secret", "nonsense"], [k.lock]), 33, "secret"),
    "build-lock-sha-zero": (lambda k: _with(k, lambda: _edit_record(k.lock, lock_sha256="0" * 64),
                                            ["build", str(k.lock)]), 19, "lock_sha256 000000000000"),
    "build-record-files-traversal": (lambda k: _with(k, lambda: _edit_record(k.lock, files={
        "pyproject.toml": "0" * 64, "uv.lock": "0" * 64, "../../../etc/hostname": "0" * 64}),
        ["build", str(k.lock)]), 19, "../../../etc/hostname"),
    "bundle-record-local-wheel-traversal": (lambda k: _with(k, lambda: _edit_record(
        k.lock, local_wheels={"torch": "../../outside.whl"}), ["bundle", str(k.lock), "-o", str(k.tmp / "b")]), 19,
        "../../outside.whl"),
    "build-record-array": (lambda k: _with(k, lambda: _record(k.lock, []), ["build", str(k.lock)]), 19,
                           "not a JSON object"),
    "build-record-empty-object": (lambda k: _with(k, lambda: _record(k.lock, {}), ["build", str(k.lock)]), 120,
                                  "schema None"),
    "build-record-not-json": (lambda k: _with(k, lambda: (k.lock / "envbuilder.lock.json").write_text("{oops"),
                                              ["build", str(k.lock)]), 19, "not valid JSON"),
    "build-record-binary": (lambda k: _with(k, lambda: (k.lock / "envbuilder.lock.json").write_bytes(b"\xff\xfe\x00"),
                                            ["build", str(k.lock)]), 73, "not UTF-8"),
    "build-uv-lock-truncated-rehashed": (lambda k: _with(k, lambda: _truncate_uv_lock(k.lock),
                                                         ["build", str(k.lock)]), 73, "uv.lock"),
    "build-uv-lock-edited": (lambda k: _with(k, lambda: (k.lock / "uv.lock").write_text("edited\n"),
                                             ["build", str(k.lock)]), 19, "changed after locking"),
    "build-missing-dir": (lambda k: Case(["build", str(k.tmp / "nowhere")]), 19, "is not a directory"),
    "build-mode-mismatch": (lambda k: Case(["build", str(k.lock), "--mode", "ngc-base"], [k.lock]), 18,
                            "--mode ngc-base"),
    # verify-cert: every binding recomputed, every field schema-checked
    "verify-random-bytes": (lambda k: _with(k, lambda: (k.tmp / "c.json").write_bytes(os.urandom(256)),
                                            ["verify-cert", str(k.tmp / "c.json"), "--lock", str(k.lock)]),
                            73, "not a JSON certificate"),
    "verify-checks-not-list": (lambda k: Case(["verify-cert", str(_cert(k, checks={"a": 1})), "--lock",
                                               str(k.lock)], [k.lock]), 73, "'checks' is not a list"),
    "verify-cert-array": (lambda k: _with(k, lambda: (k.tmp / "c.json").write_text("[1, 2]"),
                                          ["verify-cert", str(k.tmp / "c.json"), "--lock", str(k.lock)]),
                          73, "not a certificate object"),
    "verify-cert-missing-field": (lambda k: Case(["verify-cert", str(_cert(k, lock_sha256=None)), "--lock",
                                                  str(k.lock)], [k.lock]), 73, "'lock_sha256'"),
    "verify-other-lock": (lambda k: Case(["verify-cert", str(_cert(k, lock_sha256="a" * 64)), "--lock",
                                          str(k.lock)], [k.lock]), 51, "certificate is for lock aaaaaaaaaaaa"),
    "verify-record-hash-forged": (lambda k: _forged(k), 19, "is not the sha256 of uv.lock"),
    "verify-status-disagrees": (lambda k: Case(["verify-cert", str(_cert(k, checks=[
        {"name": "drift", "status": "fail"}])), "--lock", str(k.lock)], [k.lock]), 51, "status does not agree"),
    "verify-summary-forged": (lambda k: Case(["verify-cert", str(_cert(k, summary={"pass": 9, "fail": 0})),
                                              "--lock", str(k.lock)], [k.lock]), 51, "summary does not agree"),
    "verify-failed-cert": (lambda k: Case(["verify-cert", str(_cert(k, status="fail", checks=[
        {"name": "drift", "status": "fail"}], summary={"fail": 1})), "--lock", str(k.lock)], [k.lock]), 50,
        "records failed checks"),
    "verify-cert-missing": (lambda k: Case(["verify-cert", str(k.tmp / "none.json"), "--lock", str(k.lock)]), 41,
                            "cannot read"),
    "verify-record-array": (lambda k: _with(k, lambda: _record(k.lock, [1]), ["verify-cert", str(_cert(k)),
                                                                               "--lock", str(k.lock)]), 19,
                            "not a JSON object"),
    "verify-uv-lock-truncated": (lambda k: _with(k, lambda: _truncate_uv_lock(k.lock),
                                                 ["verify-cert", str(_cert(k)), "--lock", str(k.lock)]), 73,
                                 "uv.lock"),
    # certify: refused before anything runs
    "certify-only-bogus": (lambda k: Case(["certify", "--venv", sys.prefix, "--only", "bogus"]), 2, "bogus"),
    "certify-o-foreign": (lambda k: Case(["certify", "--venv", sys.prefix, "--lock", str(k.lock), "-o",
                                          str(_foreign(k))], [k.tmp / "mine", k.lock]), 72,
                          "not a certificate directory"),
    "certify-o-lock-dir": (lambda k: Case(["certify", "--venv", sys.prefix, "--level", "0", "-o", str(k.lock)],
                                          [k.lock]), 72, "not a certificate directory"),
    "certify-lock-and-expect": (lambda k: Case(["certify", "--venv", sys.prefix, "--lock", str(k.lock),
                                                "--expect", str(_pem(k))], [k.lock]), 18, "alternatives"),
    "certify-two-targets": (lambda k: Case(["certify", "--venv", sys.prefix, "--in-place"]), 18, "exactly one"),
    "certify-expect-not-json": (lambda k: Case(["certify", "--venv", sys.prefix, "--level", "0", "--expect",
                                                str(_pem(k))]), 73, "not valid JSON"),
    "certify-expect-array": (lambda k: _with(k, lambda: (k.tmp / "e.json").write_text("[]"),
                                             ["certify", "--venv", sys.prefix, "--level", "0", "--expect",
                                              str(k.tmp / "e.json")]), 73, "not a JSON object"),
    "certify-expect-schema": (lambda k: _with(k, lambda: (k.tmp / "e.json").write_text('{"schema": 99}'),
                                              ["certify", "--venv", sys.prefix, "--level", "0", "--expect",
                                               str(k.tmp / "e.json")]), 73, "'schema' is 99"),
    "certify-record-empty-object": (lambda k: _with(k, lambda: _record(k.lock, {}),
                                                    ["certify", "--venv", sys.prefix, "--level", "0", "--lock",
                                                     str(k.lock)]), 120, "schema None"),
    "certify-record-array": (lambda k: _with(k, lambda: _record(k.lock, []),
                                             ["certify", "--venv", sys.prefix, "--level", "0", "--lock",
                                              str(k.lock)]), 19, "not a JSON object"),
    "certify-uv-lock-truncated": (lambda k: _with(k, lambda: _truncate_uv_lock(k.lock),
                                                  ["certify", "--venv", sys.prefix, "--level", "0", "--lock",
                                                   str(k.lock)]), 73, "uv.lock"),
    "certify-zero-checks": (lambda k: Case(["certify", "--venv", sys.prefix, "--level", "0"]), 50, "no check ran"),
    # export / inspect
    "export-squash-options-quote": (lambda k: Case(["export", "img", "-o", str(k.tmp / "x.sqsh"),
                                                    "--squash-options", "'x"]), 18, "No closing quotation"),
    "export-squash-options-refused": (lambda k: Case(["export", "img", "-o", str(k.tmp / "x.sqsh"),
                                                      "--squash-options", "-append"]), 18, "may not contain"),
    "export-squash-options-pseudo-file": (lambda k: Case(["export", "img", "-o", str(k.tmp / "x.sqsh"),
                                                          "--squash-options", "-p 'etc/owned f 644 0 0 id'"]), 18,
                                          "'-p'"),
    "export-squash-options-pseudo-env": (lambda k: Case(["export", "img", "-o", str(k.tmp / "x.sqsh")], [k.tmp],
                                                        {"ENVBUILDER_EXPORT_SQUASH_OPTIONS": "-pf /tmp/pseudo"}), 18,
                                         "'-pf'"),
    "export-squash-options-action": (lambda k: Case(["export", "img", "-o", str(k.tmp / "x.sqsh"),
                                                     "--squash-options", "-action 'prune@name(lib)'"]), 18,
                                     "'-action'"),
    "export-squash-options-exclude": (lambda k: Case(["export", "img", "-o", str(k.tmp / "x.sqsh"),
                                                      "--squash-options", "-e etc"]), 18, "'-e'"),
    "export-empty-image": (lambda k: Case(["export", "", "-o", str(k.tmp / "x.sqsh")]), 18, "IMAGE is empty"),
    "export-o-is-dir": (lambda k: Case(["export", "img", "--format", "sqsh", "-o", str(k.lock)], [k.lock]), 41,
                        "is a directory"),
    "export-o-parent-missing": (lambda k: Case(["export", "img", "-o", str(k.tmp / "no" / "x.sqsh")]), 41,
                                "does not exist"),
    "export-o-unknown-suffix": (lambda k: Case(["export", "img", "-o", str(k.tmp / "x.bin")]), 18,
                                "cannot tell the format"),
    "inspect-random-bytes": (lambda k: _with(k, lambda: (k.tmp / "r.sqsh").write_bytes(os.urandom(4096)),
                                             ["inspect", str(k.tmp / "r.sqsh")]), 44, "neither a SIF"),
    "inspect-empty": (lambda k: _with(k, lambda: (k.tmp / "e.sqsh").write_bytes(b""),
                                      ["inspect", str(k.tmp / "e.sqsh")]), 44, "truncated"),
    "inspect-missing": (lambda k: Case(["inspect", str(k.tmp / "none.sqsh")]), 41, "is not a file"),
    "inspect-inode-table-past-end": (lambda k: Case(["inspect", str(_damage_sb(k, "gzip", 15, 10**9))]), 44,
                                     "inode_table_start 1000000000 lies outside"),
    "inspect-directory-table-past-end": (lambda k: Case(["inspect", str(_damage_sb(k, "lzo", 16, 1 << 40))]), 44,
                                         "directory_table_start"),
    "inspect-bad-block-size": (lambda k: Case(["inspect", str(_damage_sb(k, "gzip", 3, 12345))]), 44,
                               "block size 12345"),
    "inspect-unknown-compressor": (lambda k: Case(["inspect", str(_damage_sb(k, "gzip", 5, 77))]), 44,
                                   "unknown compressor id 77"),
    "inspect-zero-inodes": (lambda k: Case(["inspect", str(_damage_sb(k, "gzip", 1, 0))]), 44, "0 inodes"),
    "inspect-inode-header-overwritten": (lambda k: Case(["inspect", str(_damage_inodes(k, "lzo", 0, b"\xff" * 8))]),
                                         44, "first block header"),
    "inspect-inode-body-overwritten-gzip": (lambda k: Case(["inspect", str(_damage_inodes(k, "gzip", 2,
                                                                                          b"\x00" * 30))]),
                                            44, "does not decompress"),
    "inspect-inode-body-overwritten-lzo": (lambda k: Case(["inspect", str(_damage_inodes(k, "lzo", 2,
                                                                                        b"\x00" * 30))]),
                                           44, "cannot read the filesystem"),
    # doctor / check-parallel
    "doctor-sm-nonexistent": (lambda k: Case(["doctor", "--sm", "12.5"]), 75, "--sm 12.5"),
    "doctor-sm-syntax": (lambda k: Case(["doctor", "--sm", "abc"]), 18, "not a compute capability"),
    "doctor-gpus-zero": (lambda k: Case(["doctor", "--gpus", "0"]), 18, "at least one GPU"),
    "doctor-unknown-gpu": (lambda k: Case(["doctor", "--gpu", "NOPE-9000"]), 24, "NOPE-9000"),
    "parallel-memory-nan": (lambda k: Case(["check-parallel", "--from-nemo-recipe", "llama3_8b", "--gpus-per-node",
                                            "8", "--gpu-memory-gib", "nan", "--json"]), 22, "not a finite number"),
    "parallel-memory-inf": (lambda k: Case(["check-parallel", "--from-nemo-recipe", "llama3_8b", "--gpus-per-node",
                                            "8", "--gpu-memory-gib", "inf"]), 22, "not a finite number"),
    "parallel-memory-negative": (lambda k: Case(["check-parallel", "--from-nemo-recipe", "llama3_8b",
                                                 "--gpus-per-node", "8", "--gpu-memory-gib", "-1"]), 22,
                                 "must be positive"),
    "parallel-unknown-recipe": (lambda k: Case(["check-parallel", "--from-nemo-recipe", "nope"]), 23, "nope"),
    # install: every name from the manifest is a plain name, and the manifest is bound to the lock it installs
    "install-manifest-sdist-traversal": (lambda k: _install_edited(
        k, lambda d: _sdist_entry(d).update(file="../../../victim.txt")), 67, "not a plain name"),
    "install-manifest-sdist-absolute": (lambda k: _install_edited(
        k, lambda d: _sdist_entry(d).update(file="/etc/passwd")), 67, "not a plain name"),
    "install-manifest-files-key-traversal": (lambda k: _install_edited(
        k, lambda d: d["files"].update({"../escape.whl": {"sha256": "a" * 64, "size": 1}})), 67, "../escape.whl"),
    "install-manifest-prebuilt-traversal": (lambda k: _install_edited(
        k, lambda d: d.update(prebuilt=[{"package": "x", "version": "1", "sdist": "x-1.tar.gz",
                                         "sdist_sha256": "a" * 64, "wheel": "../../victim.txt", "sha256": "b" * 64}])),
        67, "not a plain name"),
    "install-manifest-lock-mismatch": (lambda k: _install_edited(k, lambda d: d.update(lock_sha256="f" * 64)), 67,
                                       "names lock ffffffffffff"),
    "install-manifest-row-mismatch": (lambda k: _install_edited(k, lambda d: d.update(row="v2.3.0")), 67,
                                      "row 'v2.3.0'"),
    "install-manifest-python-path": (lambda k: _install_edited(k, lambda d: d.update(python="/tmp/evil/python")),
                                     67, "python"),
    "install-manifest-stage2-added": (lambda k: _install_edited(
        k, lambda d: d.update(stage2_packages=["causal-conv1d", "evil"])), 67, "stage2_packages"),
    "install-manifest-unsummed-edit": (lambda k: _install_edited(k, lambda d: d.update(glibc="2.99"), resum=False),
                                       65, "SHA256SUMS"),
    "install-manifest-files-list": (lambda k: _install_edited(k, lambda d: d.update(files=[])), 67,
                                    "field 'files' is a list of 0, not an object"),
    "install-manifest-schema-string": (lambda k: _install_edited(k, lambda d: d.update(schema="1")), 67,
                                       "field 'schema'"),
    "install-manifest-size-string": (lambda k: _install_edited(
        k, lambda d: next(iter(d["files"].values())).update(size="12")), 67, ".size' is the string"),
    "install-manifest-packages-not-list": (lambda k: _install_edited(k, lambda d: d.update(packages={"a": 1})), 67,
                                           "field 'packages'"),
    "install-manifest-not-json": (lambda k: _with_bundle(k, lambda b: (b / "envbuilder-bundle.json").write_text("{x")),
                                  67, "not valid JSON"),
    "install-manifest-array": (lambda k: _with_bundle(k, lambda b: (b / "envbuilder-bundle.json").write_text("[]")),
                               67, "not a JSON object"),
    "install-manifest-deep": (lambda k: _with_bundle(k, lambda b: (b / "envbuilder-bundle.json").write_text(
        "[" * 50000 + "]" * 50000)), 122, "nests deeper"),
    "install-manifest-endless": (lambda k: _with_bundle(k, lambda b: _replace_with_link(
        b / "envbuilder-bundle.json", "/dev/zero")), 121, "larger than"),
    "install-manifest-duplicate-key": (lambda k: _with_bundle(k, lambda b: (b / "envbuilder-bundle.json").write_text(
        '{"schema": 1, "schema": 1}')), 67, "twice"),
    "install-split-part-name-traversal": (lambda k: _install_split(
        k, lambda d: d["parts"][0].update(name="../../victim.txt")), 67, "not a bundle part name"),
    "install-split-manifest-sha": (lambda k: _install_split(k, lambda d: d.update(manifest_sha256="c" * 64)), 65,
                                   "manifest_sha256"),
    "install-split-tar-sha": (lambda k: _install_split(k, lambda d: d.update(tar_sha256="d" * 64)), 65,
                              "tar_sha256"),
    "install-split-lock-mismatch": (lambda k: _install_split(k, lambda d: d.update(lock_sha256="e" * 64)), 67,
                                    "eeeeeeeeeeee"),
    "install-split-index-parts-string": (lambda k: _install_split(k, lambda d: d.update(parts="bundle.tar.000")),
                                         67, "field 'parts'"),
    "install-split-size-negative": (lambda k: _install_split(k, lambda d: d["parts"][0].update(size=-1)), 67,
                                    "outside >= 0"),
    "install-split-not-tar": (lambda k: _not_tar(k), 67, "not a tar"),
    "install-split-member-traversal": (lambda k: _retar(k, {"../../victim.txt": b"owned\n"}), 67,
                                       "not a plain relative file"),
    "install-split-member-absolute": (lambda k: _retar(k, {"/tmp/owned.txt": b"owned\n"}), 67,
                                      "not a plain relative file"),
    "install-split-member-twice": (lambda k: _retar(k, {"lock/uv.lock": b"a", "./lock/uv.lock": b"b"}), 67,
                                   "twice"),
    # report: the dashboard's inputs are typed before anything is rendered; every float is finite
    "report-history-metric-script": (lambda k: _report(k, history=_history(**{
        "tokens_per_s:pretrain": "<script>alert(1)</script>"})), 93, "not a finite number"),
    "report-history-metric-nan": (lambda k: _report(k, history=_history(**{"tokens_per_s:pretrain": float("nan")})),
                                  93, "NaN"),
    "report-history-entries-object": (lambda k: _report(k, history={"schema": 1, "entries": {}}), 93,
                                      "field 'entries'"),
    "report-history-schema-string": (lambda k: _report(k, history={"schema": "1", "entries": []}), 93,
                                     "field 'schema'"),
    "report-history-row-list": (lambda k: _report(k, history={"schema": 1, "entries": [{"row": ["x"]}]}), 93,
                                "entries[0].row"),
    "report-history-deep": (lambda k: _report(k, history="[" * 100_000 + "]" * 100_000), 122, "nests deeper"),
    "report-history-endless": (lambda k: Case(["report", str(_cert(k)), "-o", str(k.tmp / "site"), "--history",
                                               str(_linked(k, "h.json", "/dev/zero"))], [k.tmp]), 121, "larger than"),
    "report-history-binary": (lambda k: _report(k, history=b"\xff\xfe\x00"), 93, "not UTF-8"),
    "report-cert-level-string": (lambda k: _report(k, cert=_cert(k, level="2")), 93, "field 'level'"),
    "report-cert-host-list": (lambda k: _report(k, cert=_cert(k, host=["gpu"])), 93, "field 'host'"),
    "report-cert-gpu-count-string": (lambda k: _report(k, cert=_cert(k, host={"gpu_count": "2"})), 93,
                                     "host.gpu_count"),
    "report-cert-losses-strings": (lambda k: _report(k, cert=_cert(k, checks=[
        {"name": "pretrain", "status": "pass", "losses": ["a", "b"]}])), 93, "losses[0]"),
    "report-cert-status-number": (lambda k: _report(k, cert=_cert(k, status=1)), 93, "field 'status'"),
    "report-cert-deep": (lambda k: Case(["report", str(_deep(k, "certificate.json")), "-o", str(k.tmp / "site")],
                                        [k.tmp]), 122, "nests deeper"),
    "report-cert-endless": (lambda k: Case(["report", str(_linked(k, "certificate.json", "/dev/zero")), "-o",
                                            str(k.tmp / "site")], [k.tmp]), 93, "not a regular file"),
    "report-threshold-nan": (lambda k: _report(k, "--gate", "--threshold", "nan"), 2, "finite"),
    "report-threshold-inf": (lambda k: _report(k, "--gate", "--threshold", "inf"), 2, "--threshold"),
    "report-threshold-env-nan": (lambda k: _report(k, "--gate", env={"ENVBUILDER_REPORT_THRESHOLD": "nan"}), 2,
                                 "finite"),
    "nightly-run-threshold-nan": (lambda k: Case(["nightly", "run", "--threshold", "nan", "--rows", "smoke", "-o",
                                                  str(k.tmp / "n")], [k.tmp]), 2, "finite"),
    "check-parallel-memory-env-nan": (lambda k: Case(["check-parallel", "--from-nemo-recipe", "llama3_8b",
                                                      "--gpus-per-node", "8"], [k.tmp],
                                                     {"ENVBUILDER_CHECK_PARALLEL_GPU_MEMORY_GIB": "nan"}), 22,
                                      "not a finite number"),
    # keygen: a plain, visible name
    "keygen-name-empty": (lambda k: _keygen(k, ""), 18, "--name"),
    "keygen-name-hidden": (lambda k: _keygen(k, ".signing"), 18, "hidden"),
    "keygen-name-slash": (lambda k: _keygen(k, "a/b"), 18, "separator"),
    "keygen-name-dotdot": (lambda k: _keygen(k, ".."), 18, "--name"),
    "keygen-name-newline": (lambda k: _keygen(k, "a\nb"), 18, "--name"),
    # nightly step: the row is checked before anything is created
    "nightly-step-row-traversal": (lambda k: _nightly_step(k, "../../x"), 18, "--row"),
    "nightly-step-row-absolute": (lambda k: _nightly_step(k, "/tmp/x"), 18, "--row"),
    "nightly-step-row-unknown": (lambda k: _nightly_step(k, "v9.9.9"), 10, "v9.9.9"),
    # lock --host-torch-facts: every field of the file typed; the file is blamed, never --python
    "lock-facts-python-banana": (lambda k: _host_torch(k, _facts(k, python="banana")), 63, "field 'python'"),
    "lock-facts-cxx11abi-string": (lambda k: _host_torch(k, _facts(k, cxx11abi="yes")), 63, "field 'cxx11abi'"),
    "lock-facts-present-string": (lambda k: _host_torch(k, _facts(k, present="torch")), 63, "field 'present'"),
    "lock-facts-present-traversal": (lambda k: _host_torch(k, _facts(k, present=["../x"])), 63, "present[0]"),
    "lock-facts-modules-list": (lambda k: _host_torch(k, _facts(k, build_modules=[])), 63, "field 'build_modules'"),
    "lock-facts-torch-number": (lambda k: _host_torch(k, _facts(k, torch=2.7)), 63, "field 'torch'"),
    "lock-facts-cuda-words": (lambda k: _host_torch(k, _facts(k, cuda="twelve")), 63, "field 'cuda'"),
    "lock-facts-array": (lambda k: _host_torch(k, _linked_text(k, "facts.json", "[]")), 63, "not a JSON object"),
    "lock-facts-deep": (lambda k: _host_torch(k, _deep(k, "facts.json")), 122, "nests deeper"),
    "lock-facts-endless": (lambda k: _host_torch(k, _linked(k, "facts.json", "/dev/zero")), 121, "larger than"),
    "doctor-interpreter-true": (lambda k: Case(["doctor", "--interpreter", "/bin/true"], [k.tmp]), 63,
                                "printed nothing"),
    "doctor-interpreter-false": (lambda k: Case(["doctor", "--interpreter", "/bin/false"], [k.tmp]), 63,
                                 "exited with 1"),
    "wheels-interpreter-true": (lambda k: Case(["wheels", str(k.lock), "-o", str(k.tmp / "wh"), "--torch-from",
                                                "host", "--interpreter", "/bin/true"], [k.tmp, k.lock]), 63,
                                "printed nothing"),
    "lock-check-pyproject-is-a-directory": (lambda k: _pyproject_dir(k), 41, "pyproject.toml"),
    # matrix refresh --snapshot
    "refresh-snapshot-array": (lambda k: _snapshot(k, []), 84, "not a JSON object"),
    "refresh-snapshot-packages-list": (lambda k: _snapshot(k, {"packages": ["torch"]}), 84, "field 'packages'"),
    "refresh-snapshot-time-number": (lambda k: _snapshot(k, {"packages": {"torch": {"9.9.9": 1}}}), 84,
                                     "packages.torch"),
    "refresh-snapshot-versions-list": (lambda k: _snapshot(k, {"packages": {"torch": ["9.9"]}}), 84,
                                       "packages.torch"),
    "refresh-snapshot-not-json": (lambda k: _snapshot(k, "{oops"), 84, "not valid JSON"),
    "refresh-snapshot-deep": (lambda k: _snapshot(k, "[" * 100_000 + "]" * 100_000), 122, "nests deeper"),
    # nightly locks-status
    "locks-status-rows-string": (lambda k: _locks_status(k, {"rows": "v2.3.0"}), 93, "field 'rows'"),
    "locks-status-row-traversal": (lambda k: _locks_status(k, {"rows": [{"row": "../../etc", "lock_sha256": ""}]}),
                                   93, "not a plain name"),
    "locks-status-exit-string": (lambda k: _locks_status(k, {"rows": [{"row": "v2.3.0", "lock_sha256": "", "error": {
        "cause": "x", "fix": "y", "exit_code": "14"}}]}), 93, "exit_code"),
    "locks-status-sha-short": (lambda k: _locks_status(k, {"rows": [{"row": "v2.3.0", "lock_sha256": "abc"}]}), 93,
                               "not a sha256"),
    "locks-status-no-rows": (lambda k: _locks_status(k, {"summary": 1}), 93, "lists no rows"),
    "locks-status-deep": (lambda k: _locks_status(k, "[" * 100_000 + "]" * 100_000), 122, "nests deeper"),
    # verify-cert --key: the DSSE envelope
    "verify-envelope-signatures-strings": (lambda k: _envelope(k, lambda d: d.update(signatures=["AAAA"])), 91,
                                           "signatures[0]"),
    "verify-envelope-payload-type-edited": (lambda k: _envelope(k, lambda d: d.update(payloadType="text/plain")),
                                            91, "payloadType 'text/plain'"),
    "verify-envelope-payload-not-base64": (lambda k: _envelope(k, lambda d: d.update(payload="!!!")), 91,
                                           "not base64"),
    "verify-envelope-array": (lambda k: _envelope(k, text="[]"), 91, "not a DSSE envelope"),
    "verify-envelope-deep": (lambda k: _envelope(k, text="[" * 100_000 + "]" * 100_000), 122, "nests deeper"),
    "verify-envelope-endless": (lambda k: _envelope(k, link="/dev/zero"), 121, "larger than"),
    "verify-cert-endless": (lambda k: Case(["verify-cert", str(_linked(k, "c.json", "/dev/zero")), "--lock",
                                            str(k.lock)], [k.tmp]), 121, "larger than"),
    "verify-cert-deep": (lambda k: Case(["verify-cert", str(_deep(k, "c.json")), "--lock", str(k.lock)], [k.tmp]),
                         122, "nests deeper"),
    "verify-cert-sbom-string": (lambda k: Case(["verify-cert", str(_cert(k, artifact={"kind": "venv",
                                                                                       "sbom": "x.json"})),
                                                "--lock", str(k.lock)], [k.tmp]), 73, "artifact.sbom"),
    "verify-cert-sbom-traversal": (lambda k: Case(["verify-cert", str(_cert(k, artifact={"kind": "venv", "sbom": {
        "name": "../../etc/passwd", "sha256": "a" * 64}})), "--lock", str(k.lock)], [k.tmp]), 73, "plain name"),
    "certify-expect-deep": (lambda k: Case(["certify", "--venv", sys.prefix, "--level", "0", "--expect",
                                            str(_deep(k, "e.json"))], [k.tmp]), 122, "nests deeper"),
    "certify-expect-endless": (lambda k: Case(["certify", "--venv", sys.prefix, "--level", "0", "--expect",
                                               str(_linked(k, "e.json", "/dev/zero"))], [k.tmp]), 121, "larger than"),
    # a full or read-only filesystem under every command that writes: typed, nothing half-written
    "lock-o-full": (lambda k: Case(_lock("-o", str(_full(k) / "lk")), [k.tmp]), 74, "is full"),
    "lock-o-readonly": (lambda k: Case(_lock("-o", str(_ro(k) / "lk")), [k.tmp]), 78, "read-only"),
    "lock-all-o-readonly": (lambda k: Case(["lock", "--all", "--no-detect", "-o", str(_ro(k) / "locks")], [k.tmp]),
                            78, "read-only"),
    "lock-all-o-file": (lambda k: Case(["lock", "--all", "--no-detect", "-o", str(k.lock / "NOTES.md")], [k.tmp]),
                        41, "is a file"),
    "bundle-o-full": (lambda k: Case(["bundle", str(_bundle_lock(k)), "-o", str(_full(k) / "b"), "--cache-dir",
                                      str(_bundle_cache(k))], [k.tmp]), 74, "is full"),
    "bundle-o-readonly": (lambda k: Case(["bundle", str(_bundle_lock(k)), "-o", str(_ro(k) / "b"), "--cache-dir",
                                          str(_bundle_cache(k))], [k.tmp]), 78, "read-only"),
    "bundle-cache-full": (lambda k: Case(["bundle", str(_bundle_lock(k)), "-o", str(k.tmp / "b"), "--cache-dir",
                                          str(_made(_full(k) / "cache"))], [k.tmp]), 74, "is full"),
    "bundle-cache-readonly": (lambda k: Case(["bundle", str(_bundle_lock(k)), "-o", str(k.tmp / "b"), "--cache-dir",
                                              str(_ro(k) / "cache")], [k.tmp]), 78, "--cache-dir"),
    "bundle-cache-env-proc": (lambda k: Case(["bundle", str(_bundle_lock(k)), "-o", str(k.tmp / "b")], [k.tmp],
                                             {"ENVBUILDER_CACHE_DIR": "/proc/envbuilder-cache"}), 76,
                              "/proc/envbuilder-cache"),
    "install-venv-full": (lambda k: Case(["install", str(k.bundle(split=True)), "--venv", str(_full(k) / "venv")],
                                         [k.tmp]), 74, "is full"),
    "install-venv-readonly": (lambda k: Case(["install", str(k.bundle()), "--venv", str(_ro(k) / "venv")], [k.tmp]),
                              78, "read-only"),
    "report-o-full": (lambda k: Case(["report", str(_cert(k)), "-o", str(_full(k) / "site")], [k.tmp]), 74,
                      "is full"),
    "report-o-readonly": (lambda k: Case(["report", str(_cert(k)), "-o", str(_ro(k) / "site")], [k.tmp]), 78,
                          "read-only"),
    "report-history-readonly": (lambda k: Case(["report", str(_cert(k)), "-o", str(k.tmp / "site"), "--history",
                                                str(_ro(k) / "history.json")], [k.tmp]), 78, "read-only"),
    "sbom-o-full": (lambda k: Case(["sbom", str(k.lock), "-o", str(_full(k) / "s.cdx.json")], [k.tmp]), 74,
                    "is full"),
    "sbom-o-readonly": (lambda k: Case(["sbom", str(k.lock), "-o", str(_ro(k) / "s.cdx.json")], [k.tmp]), 78,
                        "read-only"),
    "keygen-o-full": (lambda k: Case(["keygen", "-o", str(_full(k) / "keys")], [k.tmp]), 74, "is full"),
    "keygen-o-readonly": (lambda k: Case(["keygen", "-o", str(_ro(k) / "keys")], [k.tmp]), 78, "read-only"),
    "certify-o-full": (lambda k: _certify_to(k, _full(k) / "cert"), 74, "is full"),
    "certify-o-readonly": (lambda k: _certify_to(k, _ro(k) / "cert"), 78, "read-only"),
    "export-o-full": (lambda k: Case(["export", "img", "-o", str(_full(k) / "x.sqsh")], [k.tmp]), 74, "is full"),
    "export-o-readonly": (lambda k: Case(["export", "img", "-o", str(_ro(k) / "x.sqsh")], [k.tmp]), 78, "read-only"),
    "nightly-locks-status-readonly": (lambda k: Case(["nightly", "locks-status", str(_lock_all_json(k)), "-o",
                                                      str(_ro(k) / "STATUS.md")], [k.tmp]), 78, "read-only"),
    "install-split-index-deep": (lambda k: _with_bundle(k, lambda b: (b / "envbuilder-bundle.parts.json").write_text(
        "[" * 100_000 + "]" * 100_000), split=True), 122, "nests deeper"),
    "install-wheelhouse-deep": (lambda k: _install(k, k.bundle(), "--wheelhouse", str(_wheelhouse(k, "[" * 100_000 +
                                                                                                 "]" * 100_000))),
                                122, "nests deeper"),
    "install-wheelhouse-endless": (lambda k: _install(k, k.bundle(), "--wheelhouse", str(_wheelhouse(k, None))),
                                   121, "larger than"),
    "install-wheelhouse-wheel-traversal": (lambda k: _install(k, k.bundle(), "--wheelhouse", str(_wheelhouse(
        k, json.dumps({"schema": 1, "lock_sha256": "a" * 64, "arch_list": "9.0", "packages": [
            {"name": "causal-conv1d", "version": "1", "wheel": "../../victim.txt", "sha256": "b" * 64}]})))), 73,
        "wheel"),
    "refresh-snapshot-endless": (lambda k: Case(["matrix", "refresh", "--snapshot",
                                                 str(_linked(k, "snap.json", "/dev/zero"))], [k.tmp]), 121,
                                 "larger than"),
    "locks-status-endless": (lambda k: Case(["nightly", "locks-status", str(_linked(k, "all.json", "/dev/zero")),
                                             "-o", str(k.tmp / "STATUS.md")], [k.tmp]), 121, "larger than"),
    "report-history-duplicate-key": (lambda k: _report(k, history='{"schema": 1, "schema": 1, "entries": []}'), 93,
                                     "twice"),
    "certify-expect-nan": (lambda k: Case(["certify", "--venv", sys.prefix, "--level", "0", "--expect",
                                           str(_linked_text(k, "e.json", '{"schema": 1, "datasheet": [{"names": '
                                                            '["H100"], "bf16_dense_tflops": NaN}]}'))], [k.tmp]),
                           73, "NaN"),
    "install-split-index-endless": (lambda k: _with_bundle(k, lambda b: _replace_with_link(
        b / "envbuilder-bundle.parts.json", "/dev/zero"), split=True), 121, "larger than"),
}


def _report(k: Kit, *extra: str, history: object = None, env: dict[str, str] | None = None,
            cert: Path | None = None) -> Case:
    """`report CERT -o site [--history H] EXTRA`, with a history file written first when given."""
    args = ["report", str(cert or _cert(k)), "-o", str(k.tmp / "site")]
    if history is not None:
        h = k.tmp / "history.json"
        if isinstance(history, (bytes, str)):
            h.write_bytes(history if isinstance(history, bytes) else history.encode())
        else:
            h.write_text(json.dumps(history))
        args += ["--history", str(h)]
    return Case([*args, *extra], [k.tmp], env or {})


def _history(**metrics: object) -> dict[str, object]:
    return {"schema": 1, "entries": [{"row": "smoke", "gpu_model": "cpu", "gpu_count": 0, "level": 0,
                                      "status": "pass", "certificate_sha256": "0" * 64, "lock_sha256": None,
                                      "created": "2026-01-01T00:00:00Z", "metrics": metrics}]}


def _linked(k: Kit, name: str, target: str) -> Path:
    p = k.tmp / name
    p.symlink_to(target)
    return p


def _made(d: Path) -> Path:
    d.mkdir()
    return d


def _wheelhouse(k: Kit, text: str | None) -> Path:
    """A wheelhouse directory whose wheelhouse.json is `text` (None: endless, a link to /dev/zero)."""
    d = k.tmp / "wh"
    d.mkdir()
    if text is None:
        (d / "wheelhouse.json").symlink_to("/dev/zero")
    else:
        (d / "wheelhouse.json").write_text(text)
    return d


def _lock_all_json(k: Kit) -> Path:
    p = k.tmp / "all.json"
    p.write_text(json.dumps({"rows": [{"row": "v2.3.0", "lock_sha256": "a" * 64}]}))
    return p


def _linked_text(k: Kit, name: str, text: str) -> Path:
    p = k.tmp / name
    p.write_text(text)
    return p


def _deep(k: Kit, name: str, n: int = 100_000) -> Path:
    p = k.tmp / name
    p.write_text('{"a":' * n + "1" + "}" * n)
    return p


def _keygen(k: Kit, name: str) -> Case:
    return Case(["keygen", "-o", str(k.tmp / "keys"), "--name", name], [k.tmp])


def _nightly_step(k: Kit, row: str) -> Case:
    return Case(["nightly", "step", "lock-check", "--row", row, "-o", str(k.tmp / "out" / "nightly"), "--locks",
                 str(k.tmp / "locks")], [k.tmp])


def _facts(k: Kit, **fields: object) -> Path:
    """A torch facts file as `python -m envbuilder.host.torchprobe` writes it, with `fields` changed."""
    data: dict[str, object] = {"python": "3.11", "py_tag": "cp311", "torch": "2.7.1+cu128", "cuda": "12.8",
                               "cxx11abi": True, "present": ["torch"], "executable": "/opt/py/bin/python3",
                               "build_modules": {"setuptools": True, "wheel": True, "packaging": True,
                                                 "ninja": False}}
    data.update(fields)
    p = k.tmp / "facts.json"
    p.write_text(json.dumps(data))
    return p


def _host_torch(k: Kit, facts: Path) -> Case:
    return Case(["lock", "--nemo", "v2.3.0", "--mode", "host-torch", "--host-torch-facts", str(facts), "--no-detect",
                 "-o", str(k.tmp / "ht")], [k.tmp])


def _snapshot(k: Kit, doc: object) -> Case:
    p = k.tmp / "snap.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return Case(["matrix", "refresh", "--snapshot", str(p)], [k.tmp])


def _locks_status(k: Kit, doc: object) -> Case:
    p = k.tmp / "all.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return Case(["nightly", "locks-status", str(p), "-o", str(k.tmp / "STATUS.md")], [k.tmp])


def _signed(k: Kit) -> tuple[Path, Path]:
    """A signed certificate of the kit's lock in k.tmp/signed/, and the public key."""
    from envbuilder.certify.sign import sign_certificate
    from envbuilder.dsse import generate_keypair, load_private_key

    d = k.tmp / "signed"
    d.mkdir()
    cert = _cert(k)
    (d / "certificate.json").write_bytes(cert.read_bytes())
    pair = generate_keypair(k.tmp / "keys" / "k.key", k.tmp / "keys" / "k.pub")
    sign_certificate(d / "certificate.json", load_private_key(pair.private))
    return d / "certificate.json", pair.public


def _envelope(k: Kit, edit: Callable[[dict[str, Any]], object] | None = None, text: str | None = None,
              link: str | None = None) -> Case:
    cert, pub = _signed(k)
    env = cert.with_name("certificate.dsse.json")
    if link is not None:
        env.unlink()
        env.symlink_to(link)
    elif text is not None:
        env.write_text(text)
    elif edit is not None:
        doc = json.loads(env.read_text())
        edit(doc)
        env.write_text(json.dumps(doc))
    return Case(["verify-cert", str(cert), "--lock", str(k.lock), "--key", str(pub)], [k.tmp])


def _pyproject_dir(k: Kit) -> Case:
    (k.lock / "pyproject.toml").unlink()
    (k.lock / "pyproject.toml").mkdir()
    return Case(_lock("--check", "-o", str(k.lock)), [k.tmp])


def _mount(k: Kit, name: str, options: str) -> Path:
    """A small tmpfs of its own (root only): a real full or read-only filesystem, not a mocked errno."""
    d = k.tmp / name
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    k.mounts.append(d)
    return d


def _full(k: Kit) -> Path:
    """A filesystem with no byte left (a filler file took the rest)."""
    d = _mount(k, "full", "size=256k")
    with contextlib.suppress(OSError), open(d / "filler", "wb", buffering=0) as fh:
        while True:
            fh.write(b"\0" * 65536)
    return d


def _ro(k: Kit) -> Path:
    d = _mount(k, "ro", "size=1m")
    (d / "kept.txt").write_text("was here before\n")
    subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
    return d


def _expect_click(k: Kit) -> Path:
    from importlib.metadata import version

    p = k.tmp / "expect.json"
    p.write_text(json.dumps({"schema": 1, "lock_sha256": None, "packages": {"click": version("click")}}))
    return p


def _certify_to(k: Kit, out: Path) -> Case:
    return Case(["certify", "--venv", sys.prefix, "--level", "0", "--expect", str(_expect_click(k)), "-o", str(out)],
                [k.tmp])


def _bundle_lock(k: Kit) -> Path:
    return k.request.getfixturevalue("bundle_master")["lock"]  # type: ignore[union-attr,no-any-return]


def _bundle_cache(k: Kit) -> Path:
    return k.request.getfixturevalue("bundle_master")["cache"]  # type: ignore[union-attr,no-any-return]


def _with_bundle(k: Kit, damage: Callable[[Path], object], split: bool = False) -> Case:
    bundle = k.bundle(split=split)
    damage(bundle)
    return _install(k, bundle)


def _replace_with_link(path: Path, target: str) -> None:
    path.unlink()
    path.symlink_to(target)


def _with(k: Kit, damage: Callable[[], object], args: list[str]) -> Case:
    """Damage first, then snapshot: the damaged state is what must survive the failed run."""
    damage()
    return Case(args, [k.lock, k.tmp])


def _dangling(k: Kit) -> Path:
    link = k.tmp / "dangling"
    link.symlink_to(k.tmp / "gone")
    return link


_HELD: list[int] = []


def _held(k: Kit) -> Path:
    """The lock directory, locked by 'another run' (this test process holds its flock)."""
    fd = os.open(k.lock, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _HELD.append(fd)
    return k.lock


def _forged(k: Kit) -> Case:
    """Point the record's lock_sha256 at another lock's hash, and certify for that hash."""
    other = "b" * 64
    _edit_record(k.lock, lock_sha256=other)
    cert = _cert(k, lock_sha256=other)
    return Case(["verify-cert", str(cert), "--lock", str(k.lock)], [k.lock, k.tmp])


@pytest.fixture(autouse=True)
def _release_held() -> Iterator[None]:
    yield
    while _HELD:
        os.close(_HELD.pop())


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_fault(case_id: str, kit: Kit) -> None:
    setup, code, needle = CASES[case_id]
    case = setup(kit)
    watched = case.watch or [kit.lock]
    before = snapshot(*watched)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in case.env.items():
            mp.setenv(k, v)
        res = run_cli(case.args)
    assert res.code == code, f"exit {res.code}, want {code}\n{res.err}"
    assert "Traceback" not in res.err + res.out
    lines = [ln for ln in res.err.splitlines() if ln.strip() and not ln.startswith("  | ")]
    if code == 2:  # click's usage error: "Error: ..." and a "Try ... for help." line
        assert any(ln.startswith("Error:") and needle in ln for ln in lines), res.err
        assert any(ln.startswith("Try ") for ln in lines), res.err
    else:
        errors = [ln for ln in lines if ln.startswith("error: ")]
        assert len(errors) == 1 and needle in errors[0], res.err
        idx = lines.index(errors[0])
        assert lines[idx + 1].startswith("  fix: ") and len(lines[idx + 1]) > len("  fix: ") + 5, res.err
    after = snapshot(*watched)
    assert after == before, "a failed run changed the user's files"


def test_uv_failure_shows_the_log_and_where_it_is(kit: Kit) -> None:
    res = run_cli(["lock", "--nemo", "smoke", "--no-detect", "--set", "causal-conv1d==none", "--set",
                   "torch==2.12.0", "-o", str(kit.tmp / "new")])
    assert res.code == 14
    tail = [ln for ln in res.err.splitlines() if ln.startswith("  | ")]
    assert 0 < len(tail) <= 20 and any("torch" in ln for ln in tail)
    fix = next(ln for ln in res.err.splitlines() if ln.startswith("  fix: "))
    log = fix.split("whole log is in ", 1)[1].split(";", 1)[0] if "whole log is in" in fix else None
    if log is not None:
        assert Path(log).is_file() and "torch" in Path(log).read_text()
        os.unlink(log)
    assert not (kit.tmp / "new").exists(), "a failed first lock leaves no empty directory behind"


def test_network_error_names_the_index_and_proxy(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("UV_NO_INDEX", "UV_FIND_LINKS", "UV_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("UV_CACHE_DIR", str(kit.tmp / "empty-cache"))
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.invalid:3128")
    before = snapshot(kit.lock)
    res = run_cli(_lock("-o", str(kit.lock)))
    assert res.code == 15, res.err
    err = next(ln for ln in res.err.splitlines() if ln.startswith("error: "))
    assert "http://127.0.0.1:9/simple" in err and "via proxy http://***@proxy.invalid:3128" in err
    assert "secret" not in res.err
    assert snapshot(kit.lock) == before


def test_disk_full_while_writing_the_record(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk cannot be made here without root: the one write is made to fail with ENOSPC."""
    from envbuilder.lock import pipeline

    real = pipeline.write_atomic

    def full(path: Path, data: bytes | str, mode: int = 0o644) -> None:
        if Path(path).name == "envbuilder.lock.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data, mode)

    monkeypatch.setattr(pipeline, "write_atomic", full)
    before = snapshot(kit.lock)
    res = run_cli(_lock("--glibc", "2.36", "-o", str(kit.lock)))
    assert res.code == 74, res.err
    assert "is full" in res.err and "fix:" in res.err and "Traceback" not in res.err
    assert snapshot(kit.lock) == before
    assert not [p for p in kit.tmp.iterdir() if ".staging." in p.name]


def test_stale_check_keeps_the_users_flags_in_its_fix(kit: Kit) -> None:
    res = run_cli(_lock("--glibc", "2.36", "--check", "-o", str(kit.lock)))
    assert res.code == 16
    fix = next(ln for ln in res.err.splitlines() if ln.startswith("  fix: "))
    assert "--glibc 2.36" in fix and "--check" not in fix and "causal-conv1d==none" in fix


def test_doctor_excludes_rows_whose_cuda_cannot_compile_for_the_sm() -> None:
    res = run_cli(["doctor", "--sm", "12.1", "--driver", "580.65.06", "--json"])
    assert res.code == 0, res.err
    rows = {r["tag"]: r for r in json.loads(res.out)["rows"]}
    v200 = rows["v2.0.0"]  # CUDA 12.1: nvcc 12.1 targets 5.0..9.0
    assert v200["status"] == "excluded" and any("cannot compile for sm_121" in r for r in v200["reasons"])
    assert "v2.0.0" not in json.loads(res.out)["runnable"]


def test_uv_disk_full_names_the_full_filesystem(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk cannot be made here without root: a stand-in `uv` prints what uv prints on ENOSPC."""
    from envbuilder.lock import uvrun

    fake = kit.tmp / "uv-full"
    fake.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "uv 0.13.9"; exit 0; fi\n'
                    'echo "error: Failed to write to the lock file" >&2\n'
                    'echo "  Caused by: No space left on device (os error 28)" >&2\nexit 2\n')
    fake.chmod(0o755)
    monkeypatch.setattr(uvrun, "uv_binary", lambda: str(fake))
    before = snapshot(kit.lock)
    res = run_cli(_lock("--glibc", "2.36", "-o", str(kit.lock)))
    assert res.code == 74, res.err
    err = next(ln for ln in res.err.splitlines() if ln.startswith("error: "))
    fix = next(ln for ln in res.err.splitlines() if ln.startswith("  fix: "))
    assert f"on the filesystem of {kit.tmp}" in err and "uv cache prune" not in fix
    assert any(ln.startswith("  | ") and "os error 28" in ln for ln in res.err.splitlines())
    assert snapshot(kit.lock) == before


def test_interpreter_failure_gets_an_interpreter_fix() -> None:
    from envbuilder.troubleshoot import troubleshoot

    advice = troubleshoot("error: No interpreter found for Python >=3.11, <3.12 in managed installations")
    assert advice is not None and "uv python install" in advice.fix


@pytest.mark.parametrize("split", [False, True])
def test_the_real_bundle_installs_and_records_its_own_lock(kit: Kit, split: bool) -> None:
    """The checks refuse the damaged bundles above and nothing else: the bundle as made installs."""
    bundle = kit.bundle(split=split)
    venv, victim = kit.venv_beside()
    res = run_cli(["install", str(bundle), "--venv", str(venv), "--json"])
    assert res.code == 0, res.err
    lock = json.loads((bundle / "envbuilder-bundle.parts.json" if split else bundle / "envbuilder-bundle.json")
                      .read_text())["lock_sha256"]
    record = json.loads((venv / "envbuilder-install.json").read_text())
    assert record["lock_sha256"] == lock and record["row"] == "smoke"
    assert [p.name for p in (venv / "envbuilder-sdists").iterdir()] == ["causal_conv1d-1.6.2.post1.tar.gz"]
    assert victim.read_text() == "the user's file beside the venv\n"
    assert not [p for p in kit.tmp.iterdir() if p.name.startswith(".venv")]  # no staging left
    if not split:  # sha256sum -c accepts the checksum file, manifest line included
        ok = subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=bundle, capture_output=True, text=True)
        assert ok.returncode == 0, ok.stdout + ok.stderr


MARKUP_NAMES = ["x[/]y", "x[red]y", "x[bold]y[/bold]", "[link=http://e.x]z"]


@pytest.mark.parametrize("name", MARKUP_NAMES)
def test_markup_in_an_output_path_is_printed_as_it_is(kit: Kit, name: str) -> None:
    """rich markup in a user's path is text: lock, report and bundle finish (no exit 70 after writing
    everything) and print the path that exists."""
    out = kit.tmp / name / "lk"
    res = run_cli([*OFFLINE_LOCK_ARGS, "-o", str(out)])
    assert res.code == 0, res.err
    assert (out / "uv.lock").is_file() and f"wrote {out}:" in res.err
    site = kit.tmp / name / "site"
    res = run_cli(["report", str(_cert(kit)), "-o", str(site)])
    assert res.code == 0, res.err
    assert (site / "index.html").is_file() and f"wrote {site}/index.html" in res.err


def test_markup_in_a_bundle_path(kit: Kit) -> None:
    out = kit.tmp / "b[/]x"
    res = run_cli(["bundle", str(kit.request.getfixturevalue("bundle_master")["lock"]), "-o", str(out),  # type: ignore[union-attr]
                   "--cache-dir", str(kit.request.getfixturevalue("bundle_master")["cache"])])  # type: ignore[union-attr]
    assert res.code == 0, res.err
    assert f"wrote {out}:" in res.err


@pytest.mark.parametrize("text", ["\x1b[2J\x1b]0;owned\x07", "line\rover", "a\x9bb"])
def test_control_characters_in_an_error_are_escapes(kit: Kit, text: str) -> None:
    res = run_cli(["verify-cert", str(kit.tmp / f"no{text}such.json"), "--lock", str(kit.lock)])
    assert res.code == 41
    assert not any(c in res.err for c in "\x1b\x07\r\x9b"), repr(res.err)
    assert len([ln for ln in res.err.splitlines() if ln.startswith("error: ")]) == 1


OTHER_UID = 65534


def _as_other_user(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """envbuilder ARGS as uid 65534 (root bypasses file modes, so a permission error needs another user)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as another user")
    env = {**os.environ, "HOME": str(cwd), "UV_CACHE_DIR": str(cwd / "uv-cache"), "XDG_CACHE_HOME": str(cwd)}
    return subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
                           sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600, check=False)


@pytest.fixture()
def shared(tmp_path: Path) -> Iterator[Path]:
    """A directory both users can enter (pytest's own are 0700)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="envbuilder-faults-", dir="/tmp"))
    d.chmod(0o777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _one_error(res: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert res.returncode == code, res.stderr
    assert "Traceback" not in res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0], res.stderr
    assert res.stderr.splitlines()[res.stderr.splitlines().index(errors[0]) + 1].startswith("  fix: ")


def test_a_bundle_part_this_user_may_not_read(shared: Path, bundle_master: dict[str, Path]) -> None:
    bundle = shared / "bundle"
    shutil.copytree(bundle_master["split"], bundle)
    for p in [bundle, *bundle.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (bundle / "bundle.tar.000").chmod(0)
    before = snapshot(shared)
    res = _as_other_user(["install", str(bundle), "--venv", str(shared / "venv")], shared)
    _one_error(res, 77, "bundle.tar.000: permission denied")
    assert snapshot(shared) == before


def test_an_output_this_user_may_not_write(shared: Path, tmp_path: Path) -> None:
    mine = shared / "root-owned"
    mine.mkdir(mode=0o755)
    cert = shared / "certificate.json"
    cert.write_text(json.dumps({"schema": 1, "status": "pass", "level": 0, "lock_sha256": "a" * 64, "row": "r",
                                "checks": [{"name": "drift", "status": "pass"}], "summary": {"pass": 1}}))
    cert.chmod(0o644)
    before = snapshot(shared)
    for args, needle in ((["report", str(cert), "-o", str(mine / "site")], "permission denied"),
                         (["keygen", "-o", str(mine / "keys")], "permission denied"),
                         (["verify-cert", str(cert), "--lock", str(mine)], "")):
        res = _as_other_user(args, shared)
        if needle:
            _one_error(res, 77, needle)
        assert snapshot(shared) == before, args
    certs = shared / "certs"  # a directory of certificates, one of which this user may not read
    certs.mkdir(mode=0o755)
    (certs / "a").mkdir(mode=0o755)
    shutil.copy(cert, certs / "a" / "certificate.json")
    (certs / "a" / "certificate.json").chmod(0)
    res = _as_other_user(["report", str(certs), "-o", str(shared / "site")], shared)
    _one_error(res, 77, "certificate.json: permission denied")
