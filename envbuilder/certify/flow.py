"""Host side: the whole `envbuilder certify` run, from options to a checked certificate.

Pick the target, write the expectations (from the lock, the lock inside the image, or
--expect), run `python -m envbuilder.certify` in the target, keep its certificate (and sign it)
in -o only when the run finished and claims something. The CLI parses, calls and prints.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envbuilder import procs
from envbuilder.atomic import run_tempdir
from envbuilder.canonical import sha256_file
from envbuilder.certify.certificate import Artifact, Certificate, SbomRef
from envbuilder.certify.expect import Expectations, load_expectations
from envbuilder.certify.expectations import expectations_from_lock, expectations_without_lock, read_lock
from envbuilder.certify.runner import InPlaceTarget, Target, VenvTarget, run_certify
from envbuilder.errors import (
    CertificationFailedError,
    CertifyEnvironmentError,
    DiskFullError,
    EnvbuilderError,
    InvalidOptionError,
)
from envbuilder.paths import matrices_dir
from envbuilder.progress import Progress

SBOM_NAME = "sbom.cdx.json"


@dataclass
class CertifyOptions:
    target: Target
    lock: Path | None = None
    expect: Path | None = None
    level: int = 1
    cpu: bool = False
    only: str = ""
    steps: int = 30
    gpus: int = 0
    output: Path | None = None
    logs: Path | None = None
    timestamp: bool = False
    sign_key: Path | None = None
    sbom: Path | None = None


@dataclass
class CertifyResult:
    certificate: Certificate
    output: Path | None
    signed_keyid: str | None = None

    @property
    def passed(self) -> bool:
        return self.certificate.passed

    def error(self) -> CertificationFailedError | None:
        """The typed error this certificate means, or None when it passed."""
        cert = self.certificate
        if not cert.ran_any:
            return CertificationFailedError(
                "no check ran: with nothing to compare against, a certificate would claim nothing",
                "pass --lock DIR (or --expect FILE), or a level whose checks apply to this target")
        if cert.passed:
            return None
        failed = cert.failed_checks()
        return CertificationFailedError(
            f"{len(failed)} check(s) failed: {', '.join(c.name for c in failed)}",
            next((c.advice.split("fix: ", 1)[-1] for c in failed if c.advice),
                 "see the report for each check's advice"))

    def to_dict(self) -> dict[str, Any]:
        return self.certificate.to_dict()


CERT_OWNED = ("certificate.json", "report.md", "certificate.dsse.json", "sbom.cdx.json")


def _is_cert_dir(path: Path) -> bool:
    return (path / "certificate.json").is_file()


def _cert_owned(path: Path) -> list[str]:
    """Files a previous certify wrote into `path` (replaced by this run's; anything else stays)."""
    names = [n for n in CERT_OWNED if (path / n).is_file()]
    return names + sorted(p.name for p in path.glob("*.svg") if p.is_file())


def _claims_something(path: Path) -> bool:
    """A certificate in which at least one check passed or failed (one that checked nothing is not kept)."""
    try:
        return path.is_file() and Certificate.read(path).ran_any
    except EnvbuilderError:
        return False


@contextlib.contextmanager
def _out_dir(output: Path | None, progress: Progress) -> Iterator[Path]:
    """A private directory (0700, ours) for this run's files; they replace the previous certificate's
    only once the run finished. The environment never writes here: see `_env_dir`."""
    if output is None:
        with run_tempdir("certify-out") as tmp:
            yield tmp
        return
    from envbuilder.atomic import claim_output_dir, commit_files, staging_dir

    with claim_output_dir(output, _is_cert_dir, "a certificate directory",
                          progress=progress) as real, staging_dir(real) as stage:
        yield stage
        shutil.rmtree(stage / ENV_DIR, ignore_errors=True)
        if _claims_something(stage / "certificate.json"):
            made = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
            commit_files(stage, real, made, remove=_cert_owned(real))


#: the sub-directory of the private staging directory the environment writes into
ENV_DIR = "from-environment"


def _env_dir(stage: Path, in_dir: Path, t: Target) -> Path:
    """The directory mounted where a container's output would go. The environment writes nothing the host
    takes (the host writes and signs the certificate it read from the environment's stdout), so it is never
    writable by others: private in the staging directory for a host target; for a container (which may run as
    another uid, e.g. Apptainer as the user) a read-only-to-others directory beside the expectations, never
    inside the directory that gets signed."""
    if t.on_host:
        d = stage / ENV_DIR
        d.mkdir(mode=0o700)
    else:
        d = in_dir / ENV_DIR
        d.mkdir(mode=0o755)
        d.chmod(0o755)  # umask may have taken bits away
    return d


def _certificate_from(rc: int, stdout: str, exp: Expectations, kind: str) -> tuple[bytes, Certificate]:
    """The environment's certificate, read once from its stdout (a pipe no one else can write), checked,
    and bound to what the host asked for: these exact bytes are what the host writes and signs."""
    if rc == DiskFullError.exit_code:  # the environment's own work directory ($TMPDIR there) is full
        raise DiskFullError(f"the {kind} ran out of disk space while it ran the checks (its $TMPDIR)",
                            "free space there (or point TMPDIR at a bigger disk) and certify again")
    if rc not in (0, CertificationFailedError.exit_code):
        raise CertifyEnvironmentError(f"the checks could not run in the {kind} (exit code {rc})",
                                      "read the output above; `python -m envbuilder.certify --help` inside the "
                                      "environment shows the in-environment options")
    raw = stdout.encode("utf-8", "surrogateescape")
    bad = "read the output above; the environment must print exactly one certificate on stdout"
    if not raw.strip():
        raise CertifyEnvironmentError(f"the {kind} printed no certificate", bad)
    cert = Certificate.from_json(raw, f"the certificate the {kind} printed", CertifyEnvironmentError, bad)
    if cert.to_json().encode() != raw:
        raise CertifyEnvironmentError(f"the {kind} printed a certificate that is not in envbuilder's canonical form",
                                      bad)
    asked = (exp.lock_sha256, exp.row, exp.lock_name, exp.artifact or Artifact())
    for key, got, want in zip(("lock_sha256", "row", "lock_name", "artifact"),
                              (cert.lock_sha256, cert.row, cert.lock_name, cert.artifact), asked, strict=True):
        if got != want:
            shown = [x.to_dict() if isinstance(x, Artifact) else x for x in (got, want)]
            raise CertifyEnvironmentError(
                f"the {kind} certified {key} {str(shown[0])[:60]!r}, not the {str(shown[1])[:60]!r} "
                "it was asked to check", "certify again; an environment that rewrites what it certifies is not "
                "trustworthy")
    return raw, cert


def _write_certificate(stage: Path, raw: bytes, cert: Certificate) -> None:
    """certificate.json (the bytes read), report.md and the loss SVGs, rendered here from those bytes."""
    from envbuilder.atomic import write_atomic
    from envbuilder.certify import CERT_NAME, REPORT_NAME
    from envbuilder.certify.report import render_report

    md, svgs = render_report(cert)
    for name, text in sorted(svgs.items()):
        write_atomic(stage / name, text)
    write_atomic(stage / REPORT_NAME, md)
    write_atomic(stage / CERT_NAME, raw)


def _expectations(t: Target, lock: Path | None, expect: Path | None, artifact: Artifact,
                  workdir: Path, progress: Progress) -> Expectations:
    if expect is not None:  # read here so a bad file fails before anything starts
        return load_expectations(expect).with_artifact(artifact)
    if lock is not None:  # opened and verified once: the label check and the expectations share it
        binding = read_lock(lock)
        label = t.lock_label()
        if label and label != binding.lock_sha256:
            progress(f"warning: {t.ref} was built from lock {label[:12]}…, not from {lock}; expect drift failures")
    else:
        inside = t.lock_inside(workdir / "lock-from-image")
        if inside is None:
            return expectations_without_lock(matrices=matrices_dir(), artifact=artifact)
        binding = read_lock(inside, strict=False)
    return expectations_from_lock(binding, matrices=matrices_dir(), artifact=artifact, python_full=_python_full(t))


def _python_full(t: Target) -> str | None:
    """The full version of the interpreter a host target runs the checks with (3.11.7), None for a container or
    when it does not answer: the lock's markers on python_full_version are then decided for MAJOR.MINOR.0."""
    if not isinstance(t, (InPlaceTarget, VenvTarget)):
        return None
    try:
        out = procs.run([t.python(), "-c", "import platform; print(platform.python_version())"],
                        capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = out.stdout.strip()
    return version if out.returncode == 0 and re.fullmatch(r"\d+\.\d+\.\d+", version) else None


def _inner_args(opts: CertifyOptions, exp_path: str) -> list[str]:
    # no --out: the environment writes nothing the host keeps; the host renders and writes every file from
    # the certificate the environment prints (so a full or read-only -o is the host's typed error)
    args = [f"--level={opts.level}", f"--expect={exp_path}", "--json", f"--steps={opts.steps}"]
    if opts.cpu:
        args.append("--cpu")
    if opts.only:
        args.append(f"--only={opts.only}")
    if opts.gpus:
        args.append(f"--gpus={opts.gpus}")
    if opts.logs is not None:
        if not opts.target.on_host:
            raise InvalidOptionError("--logs works with --venv and --in-place only",
                                     "containers keep their logs inside; use -o for the report")
        args.append(f"--logs={opts.logs.resolve()}")
    if opts.timestamp:
        args.append("--timestamp=" + datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return args


def certify_environment(opts: CertifyOptions, progress: Progress = lambda _m: None) -> CertifyResult:
    """Run the checks in the target; CertificationFailedError only when no check ran (a failed check
    is a certificate with status "fail", which the caller reports)."""
    from envbuilder.certify.sign import sign_certificate
    from envbuilder.dsse import KEY_ENV, load_private_key

    t, output, sbom = opts.target, opts.output, opts.sbom
    if opts.lock is not None and opts.expect is not None:
        raise InvalidOptionError("--lock and --expect are alternatives", "pass one of them")
    if output is not None:  # refuse a directory that is not ours before anything runs
        from envbuilder.atomic import guard_output_dir

        guard_output_dir(output, _is_cert_dir, "a certificate directory")
    signing = opts.sign_key is not None or bool(os.environ.get(KEY_ENV, "").strip())
    if (signing or sbom is not None) and output is None:
        raise InvalidOptionError("--sign and --sbom need -o DIR (the envelope and SBOM sit beside the certificate)",
                                 "add -o DIR")
    key = load_private_key(opts.sign_key) if signing else None  # fail on a bad key before the checks run
    os.environ.pop(KEY_ENV, None)  # the key is in memory now; the environment under test never sees it
    artifact = t.artifact()
    if sbom is not None:
        artifact = artifact.with_sbom(SbomRef(SBOM_NAME, sha256_file(sbom)))
    signed = None
    with run_tempdir("certify-in") as in_dir:
        exp = _expectations(t, opts.lock, opts.expect, artifact, in_dir, progress)
        (in_dir / "expect.json").write_text(exp.to_json(), encoding="utf-8")
        in_dir.chmod(0o755)
        with _out_dir(output, progress) as stage:
            env_dir = _env_dir(stage, in_dir, t)
            exp_path, _ = t.inner_paths(in_dir, env_dir)
            args = _inner_args(opts, exp_path)
            rc, stdout = run_certify(t, args, in_dir, env_dir, gpus=opts.level >= 1 and not opts.cpu)
            raw, cert = _certificate_from(rc, stdout, exp, t.kind)
            if output is not None:
                _write_certificate(stage, raw, cert)
                if sbom is not None:
                    shutil.copyfile(sbom, stage / SBOM_NAME)
                if key is not None:  # signed in the staging dir: certificate and envelope appear together
                    signed = sign_certificate(stage / "certificate.json", key, cert_bytes=raw)
    return CertifyResult(cert, output, signed.keyid if signed else None)
