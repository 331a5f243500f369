"""`envbuilder certify` and `envbuilder verify-cert`: run the in-environment checks, verify certificates."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from envbuilder.choices import CERTIFY_GROUPS
from envbuilder.cli.options import deprecated_alias, interpreter_option, json_option, lock_dir_input
from envbuilder.console import emit_json, plain, stderr_console, styled
from envbuilder.errors import InvalidOptionError

if TYPE_CHECKING:  # the certify package is imported only when a certify command runs
    from envbuilder.certify.certificate import Certificate
    from envbuilder.certify.runner import Target

_STYLE = {"pass": "green", "fail": "bold red", "skipped": "yellow", "not-installed": "dim"}


def _target(image: str | None, sqsh: Path | None, sif: Path | None, venv: Path | None, in_place: bool,
            interpreter: str) -> Target:
    from envbuilder.certify.runner import make_target

    given = [(k, v) for k, v in (("image", image), ("sqsh", sqsh), ("sif", sif), ("venv", venv),
                                 ("in-place", in_place or None)) if v]
    if len(given) != 1:
        raise InvalidOptionError("name exactly one target: --image, --sqsh, --sif, --venv or --in-place",
                                 "e.g. envbuilder certify --in-place --lock build/v2.3.0")
    kind, ref = given[0]
    return make_target(kind, None if kind == "in-place" else str(ref), interpreter)


def _print_table(cert: Certificate) -> None:
    from rich.table import Table

    console = stderr_console()
    table = Table(title=f"certificate: {cert.status.upper()} (level {cert.level})", show_lines=False)
    for col in ("check", "status", "detail / advice"):
        table.add_column(col)
    for c in cert.checks:
        note = c.advice or c.detail or ""
        table.add_row(plain(c.name), Text(c.status, style=_STYLE.get(c.status, "")), plain(note[:120]))
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
@click.option("--only", default="", help=f"Comma-separated check groups ({','.join(CERTIFY_GROUPS)}).")
@click.option("--steps", type=click.IntRange(5, 10000), default=30, show_default=True)
@click.option("--gpus", type=click.IntRange(0), default=0, help="Level 2: GPUs to use (default: all visible).")
@interpreter_option("inside --image/--sqsh/--sif (a name on its PATH or an absolute path)", on_host=False,
                    default="python")
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
    from envbuilder.certify.flow import CertifyOptions, certify_environment

    unknown = sorted({g.strip() for g in only.split(",") if g.strip()} - set(CERTIFY_GROUPS))
    if unknown:
        raise click.BadParameter(f"unknown check group(s) {', '.join(unknown)}; choose from "
                                 f"{', '.join(CERTIFY_GROUPS)}", param_hint="--only")
    opts = CertifyOptions(
        target=_target(image, sqsh, sif, venv, in_place, interpreter), lock=lock, expect=expect, level=level,
        cpu=cpu, only=only, steps=steps, gpus=gpus, output=output, logs=logs, timestamp=timestamp,
        sign_key=sign_key, sbom=sbom)
    console = stderr_console()
    result = certify_environment(opts, progress=console.print)
    cert = result.certificate
    _print_table(cert)
    err = result.error()
    if err is not None and not cert.ran_any:
        raise err
    if output is not None:
        console.print(f"wrote {output}/certificate.json and report.md"
                      + (f", signed by key {result.signed_keyid[:12]}… ({output}/certificate.dsse.json)"
                         if result.signed_keyid else ""))
    if as_json:
        emit_json(cert.to_dict())
    if err is not None:
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
    from envbuilder.certify.runner import make_target
    from envbuilder.certify.sign import envelope_path, verify_signature
    from envbuilder.certify.verify import load_certificate, verify_certificate, verify_sbom
    from envbuilder.dsse import load_public_key

    if sum(x is not None for x in (image, sqsh, sif)) > 1:
        raise InvalidOptionError("name at most one of --image, --sqsh, --sif", "pass the artifact you deploy")
    data = load_certificate(cert)
    lock_sha256 = read_lock(lock).lock_sha256
    artifact = None
    if image:
        artifact = make_target("image", image).artifact()
    elif sqsh or sif:
        artifact = make_target("sqsh" if sqsh else "sif", str(sqsh or sif)).artifact()
    console = stderr_console()
    signature: dict[str, Any]
    if public_key is not None:  # first: an edited certificate is reported as edited, not as failed
        signature = verify_signature(cert, load_public_key(public_key))
    elif envelope_path(cert).exists():
        signature = {"signed": True, "checked": False}
        console.print(styled("[yellow]warning[/]: {} is signed but the signature was not checked; pass --key PUB",
                             cert))
    else:
        signature = {"signed": False}
        console.print(styled("[yellow]warning[/]: {} is unsigned: anyone could have written it; "
                             "certify with --sign KEY and verify with --key PUB", cert))
    result = verify_certificate(data, lock_sha256, artifact)
    result["sbom"] = verify_sbom(data, cert.parent)
    result["signature"] = signature
    console.print(styled("[green]verified[/]: {}", f"{cert} belongs to lock {result['lock_sha256'][:12]}…"
                         + (f" and {artifact.kind} {artifact.ref}" if artifact else "")
                         + f", level {result['level']}, passed"
                         + (f"; signature by key {signature['keyid'][:12]}… holds" if signature.get("keyid") else "")))
    if as_json:
        emit_json(result)
