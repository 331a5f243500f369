"""`envbuilder certify` and `envbuilder verify-cert`: run the in-environment checks, verify certificates."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from envbuilder.cli.options import deprecated_alias, json_option, lock_dir_input
from envbuilder.console import dumps, emit_json, stderr_console
from envbuilder.errors import (
    CertificationFailedError,
    CertifyEnvironmentError,
    InvalidOptionError,
    MalformedFileError,
)

SBOM_NAME = "sbom.cdx.json"
_STYLE = {"pass": "green", "fail": "bold red", "skipped": "yellow", "not-installed": "dim"}


def _target(image: str | None, sqsh: Path | None, sif: Path | None, venv: Path | None, in_place: bool,
            interpreter: str) -> Any:
    from envbuilder.certify.runner import Target

    given = [(k, v) for k, v in (("image", image), ("sqsh", sqsh), ("sif", sif), ("venv", venv),
                                 ("in-place", in_place or None)) if v]
    if len(given) != 1:
        raise InvalidOptionError("name exactly one target: --image, --sqsh, --sif, --venv or --in-place",
                                 "e.g. envbuilder certify --in-place --lock build/v2.3.0")
    kind, ref = given[0]
    return Target(kind, None if kind == "in-place" else str(ref), interpreter)


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
        checks = json.loads(path.read_text(encoding="utf-8")).get("checks")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(checks, list) and any(isinstance(c, dict) and c.get("status") in ("pass", "fail")
                                            for c in checks)


@contextlib.contextmanager
def _out_dir(output: Path | None) -> Iterator[Path]:
    """Where the environment writes; its files replace the previous certificate's only once the run finished."""
    if output is None:
        with tempfile.TemporaryDirectory(prefix="envbuilder-cert-") as tmp:
            yield Path(tmp)
        return
    from envbuilder.atomic import claim_output_dir, commit_files, staging_dir

    with claim_output_dir(output, _is_cert_dir, "a certificate directory",
                          progress=lambda m: stderr_console().print(m)) as real, staging_dir(real) as stage:
        stage.chmod(0o777)  # containers may run as another uid
        yield stage
        if _claims_something(stage / "certificate.json"):
            made = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
            commit_files(stage, real, made, remove=_cert_owned(real))


def _expectations(t: Any, lock: Path | None, expect: Path | None, artifact: dict[str, Any],
                  workdir: Path) -> dict[str, Any]:
    from envbuilder.certify.expectations import expectations_from_lock, expectations_without_lock
    from envbuilder.paths import matrices_dir

    if expect is not None:
        data = _read_expectations(expect)
        data["artifact"] = artifact
        return data
    strict = True
    if lock is not None and t.kind == "image":
        from envbuilder.certify.expectations import read_lock
        from envbuilder.certify.runner import image_info
        from envbuilder.lock.record import LABEL_LOCK_SHA256

        label = image_info(t.ref)[1].get(LABEL_LOCK_SHA256)
        if label and label != read_lock(lock).lock_sha256:
            stderr_console().print(f"[yellow]warning[/]: {t.ref} was built from lock {label[:12]}…, not from "
                                   f"{lock}; expect drift failures")
    if lock is None and t.kind == "image":
        from envbuilder.certify.runner import copy_lock_from_image

        lock, strict = copy_lock_from_image(t.ref, workdir / "lock-from-image"), False
    if lock is None:
        return expectations_without_lock(matrices=matrices_dir(), artifact=artifact)
    from envbuilder.uvbin import uv_binary

    return expectations_from_lock(lock, uv_bin=uv_binary(), matrices=matrices_dir(), artifact=artifact,
                                  strict=strict)


def _read_expectations(path: Path) -> dict[str, Any]:
    """--expect FILE, schema-checked here so a bad file fails before anything starts."""
    from envbuilder.certify.expect import EXPECT_SCHEMA

    fix = "pass an expectations file written by envbuilder (or certify with --lock DIR)"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedFileError(f"--expect {path} is not readable JSON ({exc})", fix) from exc
    if not isinstance(data, dict):
        raise MalformedFileError(f"--expect {path} is a JSON {type(data).__name__}, not an object", fix)
    if data.get("schema") != EXPECT_SCHEMA:
        raise MalformedFileError(f"--expect {path}: schema {data.get('schema')!r}, expected {EXPECT_SCHEMA}", fix)
    for key, kind in (("packages", dict), ("target", dict), ("skip_imports", list), ("datasheet", list)):
        if key in data and not isinstance(data[key], kind):
            raise MalformedFileError(f"--expect {path}: '{key}' is not a {kind.__name__}", fix)
    return data


def _print_table(cert: dict[str, Any]) -> None:
    from rich.table import Table

    console = stderr_console()
    table = Table(title=f"certificate: {cert['status'].upper()} (level {cert['level']})", show_lines=False)
    for col in ("check", "status", "detail / advice"):
        table.add_column(col)
    for c in cert["checks"]:
        note = c.get("advice") or c.get("detail") or ""
        table.add_row(c["name"], f"[{_STYLE.get(c['status'], '')}]{c['status']}[/]", note[:120])
    console.print(table)


@click.command()
@click.option("--image", help="Docker image tag (runs with --gpus all for level >= 1).")
@click.option("--sqsh", type=click.Path(path_type=Path), help="enroot squashfs file.")
@click.option("--sif", type=click.Path(path_type=Path), help="Apptainer SIF file (apptainer exec --nv).")
@click.option("--venv", type=click.Path(path_type=Path), help="A virtual environment's root directory.")
@click.option("--in-place", is_flag=True, help="This interpreter (bare GPU hosts, or inside a container).")
@lock_dir_input(help="Lock directory to certify against (for --image, default: the lock inside the image).")
@click.option("--expect", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Expectations JSON instead of a lock (advanced: hosts certified without a lock).")
@click.option("--level", type=click.IntRange(0, 2), default=1, show_default=True,
              help="0: drift/imports/torch build; 1: + GPU kernels, GEMM, tiny pretrain; 2: + NCCL, parallel.")
@click.option("--cpu", is_flag=True, help="No GPU: level 0 plus a torch-only GPT pretrain on CPU (gloo, DP=2).")
@click.option("--only", default="", help="Comma-separated check groups (drift,imports,torch-build,driver,arch,"
              "kernels,gemm,pretrain,mcore,nemo,nccl,parallel).")
@click.option("--steps", type=click.IntRange(5, 10000), default=30, show_default=True)
@click.option("--gpus", type=click.IntRange(0), default=0, help="Level 2: GPUs to use (default: all visible).")
@click.option("--interpreter", default="python", show_default=True, metavar="PATH",
              help="Python interpreter inside --image/--sqsh/--sif (a name on its PATH or an absolute path).")
@deprecated_alias("--python", "--interpreter", "interpreter")
@click.option("-o", "--output", type=click.Path(path_type=Path, file_okay=False),
              help="Write certificate.json, report.md and loss-curve SVGs here (replaced atomically).")
@click.option("--logs", type=click.Path(path_type=Path, file_okay=False),
              help="--venv/--in-place: keep the training and probe logs here.")
@click.option("--timestamp", is_flag=True, help="Record the creation time (certificates have none by default).")
@click.option("--sign", "sign_key", type=click.Path(path_type=Path, dir_okay=False),
              help="ed25519 private key (PEM): write certificate.dsse.json, an in-toto statement in a DSSE "
                   "envelope. Without it, a PEM key in $ENVBUILDER_SIGNING_KEY (a CI secret) is used.")
@click.option("--sbom", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="CycloneDX SBOM of the artifact (envbuilder sbom): copied beside the certificate and "
                   "named, with its sha256, in the certificate and the signed statement.")
@json_option("Print the certificate JSON on stdout.")
def certify(image: str | None, sqsh: Path | None, sif: Path | None, venv: Path | None, in_place: bool,
            lock: Path | None, expect: Path | None, level: int, cpu: bool, only: str, steps: int, gpus: int,
            interpreter: str, output: Path | None, logs: Path | None, timestamp: bool, sign_key: Path | None,
            sbom: Path | None, as_json: bool) -> None:
    """Certify an environment: imports, kernels, GEMM, NCCL and tiny-pretrain checks, with a certificate."""
    from envbuilder.canonical import sha256_file
    from envbuilder.certify.__main__ import GROUPS
    from envbuilder.certify.runner import artifact_record, inner_paths, run_certify
    from envbuilder.certify.sign import KEY_ENV, load_private_key, sign_certificate

    unknown = sorted({g.strip() for g in only.split(",") if g.strip()} - set(GROUPS))
    if unknown:
        raise click.BadParameter(f"unknown check group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}",
                                 param_hint="--only")
    t = _target(image, sqsh, sif, venv, in_place, interpreter)
    if lock is not None and expect is not None:
        raise InvalidOptionError("--lock and --expect are alternatives", "pass one of them")
    if output is not None:  # refuse a directory that is not ours before anything runs
        from envbuilder.atomic import guard_output_dir

        guard_output_dir(output, _is_cert_dir, "a certificate directory")
    signing = sign_key is not None or bool(os.environ.get(KEY_ENV, "").strip())
    if (signing or sbom is not None) and output is None:
        raise InvalidOptionError("--sign and --sbom need -o DIR (the envelope and SBOM sit beside the certificate)",
                                 "add -o DIR")
    key = load_private_key(sign_key) if signing else None  # fail on a bad key before the checks run
    artifact: dict[str, Any] = dict(artifact_record(t))
    if sbom is not None:
        artifact["sbom"] = {"name": SBOM_NAME, "sha256": sha256_file(sbom)}
    with tempfile.TemporaryDirectory(prefix="envbuilder-certify-in-") as tmp:
        in_dir = Path(tmp)
        exp = _expectations(t, lock, expect, artifact, in_dir)
        (in_dir / "expect.json").write_text(dumps(exp), encoding="utf-8")
        in_dir.chmod(0o755)
        with _out_dir(output) as out_dir:
            exp_path, out_path = inner_paths(t, in_dir, out_dir)
            args = [f"--level={level}", f"--expect={exp_path}", f"--out={out_path}", "--json",
                    f"--steps={steps}", "--host-managed-out"]
            if cpu:
                args.append("--cpu")
            if only:
                args.append(f"--only={only}")
            if gpus:
                args.append(f"--gpus={gpus}")
            if logs is not None:
                if t.kind not in ("venv", "in-place"):
                    raise InvalidOptionError("--logs works with --venv and --in-place only",
                                             "containers keep their logs inside; use -o for the report")
                args.append(f"--logs={logs.resolve()}")
            if timestamp:
                args.append("--timestamp=" + datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            rc, stdout = run_certify(t, args, in_dir, out_dir, gpus=level >= 1 and not cpu)
            signed = None
            if (out_dir / "certificate.json").exists() and output is not None:
                if sbom is not None:
                    shutil.copyfile(sbom, out_dir / SBOM_NAME)
                if key is not None:  # signed in the staging dir: certificate and envelope appear together
                    signed = sign_certificate(out_dir / "certificate.json", key)
    if rc not in (0, CertificationFailedError.exit_code):
        raise CertifyEnvironmentError(f"the checks could not run in the {t.kind} (exit code {rc})",
                                      "read the output above; `python -m envbuilder.certify --help` inside the "
                                      "environment shows the in-environment options")
    try:
        cert: dict[str, Any] = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise CertifyEnvironmentError("the environment printed no certificate", "read the output above") from exc
    if not isinstance(cert, dict) or not isinstance(cert.get("checks"), list):
        raise CertifyEnvironmentError("the environment printed something that is not a certificate",
                                      "read the output above")
    _print_table(cert)
    ran = [c for c in cert["checks"] if c.get("status") in ("pass", "fail")]
    if not ran:
        raise CertificationFailedError(
            "no check ran: with nothing to compare against, a certificate would claim nothing",
            "pass --lock DIR (or --expect FILE), or a level whose checks apply to this target")
    if output is not None:
        stderr_console().print(f"wrote {output}/certificate.json and report.md"
                               + (f", signed by key {signed.keyid[:12]}… ({output}/certificate.dsse.json)"
                                  if signed else ""))
    if as_json:
        emit_json(cert)
    if cert["status"] != "pass":
        failed = [c for c in cert["checks"] if c["status"] == "fail"]
        err = CertificationFailedError(
            f"{len(failed)} check(s) failed: {', '.join(c['name'] for c in failed)}",
            next((c["advice"].split("fix: ", 1)[-1] for c in failed if c.get("advice")),
                 "see the report for each check's advice"))
        if as_json:  # the certificate is the JSON document; keep stdout to one document
            click.echo(f"error: {err.cause}\n  fix: {err.fix}", err=True)
            sys.exit(err.exit_code)
        raise err


@click.command("verify-cert")
@click.argument("cert", type=click.Path(path_type=Path, dir_okay=False))
@lock_dir_input(required=True, help="Lock directory the certificate must belong to.")
@click.option("--image", help="Docker image the certificate must name (by image id).")
@click.option("--sqsh", type=click.Path(path_type=Path, dir_okay=False), help="squashfs file (by sha256).")
@click.option("--sif", type=click.Path(path_type=Path, dir_okay=False), help="SIF file (by sha256).")
@click.option("--key", "public_key", type=click.Path(path_type=Path, dir_okay=False),
              help="ed25519 public key (PEM): require certificate.dsse.json signed by it and binding CERT's bytes.")
@json_option("Print the verification result as JSON on stdout.")
def verify_cert(cert: Path, lock: Path, image: str | None, sqsh: Path | None, sif: Path | None,
                public_key: Path | None, as_json: bool) -> None:
    """Check that CERT belongs to this lock (and artifact) and that it passed."""
    from envbuilder.certify.expectations import read_lock
    from envbuilder.certify.runner import Target, artifact_record
    from envbuilder.certify.sign import envelope_path, load_public_key, verify_signature
    from envbuilder.certify.verify import load_certificate, verify_certificate, verify_sbom

    if sum(x is not None for x in (image, sqsh, sif)) > 1:
        raise InvalidOptionError("name at most one of --image, --sqsh, --sif", "pass the artifact you deploy")
    data = load_certificate(cert)
    lock_sha256 = read_lock(lock).lock_sha256
    artifact = None
    if image:
        artifact = artifact_record(Target("image", image))
    elif sqsh or sif:
        artifact = artifact_record(Target("sqsh" if sqsh else "sif", str(sqsh or sif)))
    console = stderr_console()
    signature: dict[str, Any]
    if public_key is not None:  # first: an edited certificate is reported as edited, not as failed
        signature = verify_signature(cert, load_public_key(public_key))
    elif envelope_path(cert).exists():
        signature = {"signed": True, "checked": False}
        console.print(f"[yellow]warning[/]: {cert} is signed but the signature was not checked; pass --key PUB")
    else:
        signature = {"signed": False}
        console.print(f"[yellow]warning[/]: {cert} is unsigned: anyone could have written it; "
                      "certify with --sign KEY and verify with --key PUB")
    result = verify_certificate(data, lock_sha256, artifact)
    result["sbom"] = verify_sbom(data, cert.parent)
    result["signature"] = signature
    console.print(f"[green]verified[/]: {cert} belongs to lock {result['lock_sha256'][:12]}…"
                  + (f" and {artifact['kind']} {artifact.get('ref')}" if artifact else "")
                  + f", level {result['level']}, passed"
                  + (f"; signature by key {signature['keyid'][:12]}… holds" if signature.get("keyid") else ""))
    if as_json:
        emit_json(result)
