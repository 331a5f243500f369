"""Build secrets: the proxy CA bundle, --secret specs and credentialed proxy variables.

All of them reach the build as BuildKit secrets (`--secret id=NAME,src=FILE`): files under
/run/secrets that exist only while a RUN step that mounts them runs, never in a layer or in
the image history. Values from environment variables are written to a private 0600 file for
the duration of the build (the 20.10 CLI's --secret takes files).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from envbuilder.atomic import run_tempdir
from envbuilder.errors import SecretSpecError
from envbuilder.jsonread import CA_BUNDLE_MAX_BYTES, read_bytes

_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


@dataclass(frozen=True)
class SecretSpec:
    id: str
    env: str | None = None
    src: Path | None = None


def parse_secret(spec: str) -> SecretSpec:
    """`id=NAME,env=VAR` or `id=NAME,src=FILE` (docker's syntax)."""
    fields: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        if not sep or not value or key not in ("id", "env", "src") or key in fields:
            raise SecretSpecError(f"--secret {spec!r}: expected id=NAME,env=VAR or id=NAME,src=FILE",
                                  "example: --secret id=HF_TOKEN,env=HF_TOKEN")
        fields[key] = value
    sid = fields.get("id", "")
    if not _ID.match(sid) or sid == "ca":
        raise SecretSpecError(f"--secret {spec!r}: id must be a variable name (letters, digits, _), not 'ca'",
                              "the id becomes the variable name inside fetching RUN steps; 'ca' is --ca-bundle")
    if ("env" in fields) == ("src" in fields):
        raise SecretSpecError(f"--secret {spec!r}: give exactly one of env= or src=",
                              "example: --secret id=HF_TOKEN,env=HF_TOKEN")
    if "env" in fields:
        if fields["env"] not in os.environ:
            raise SecretSpecError(f"--secret {spec!r}: environment variable {fields['env']} is not set",
                                  f"export {fields['env']}=... before the build")
        return SecretSpec(sid, env=fields["env"])
    src = Path(fields["src"]).expanduser()
    if not src.is_file() or not os.access(src, os.R_OK):
        raise SecretSpecError(f"--secret {spec!r}: {src} is not a readable file", "check the path")
    return SecretSpec(sid, src=src)


def default_ca_bundle(environ: dict[str, str] | None = None) -> Path | None:
    """The host's configured bundle: SSL_CERT_FILE, REQUESTS_CA_BUNDLE, then the system one."""
    env = os.environ if environ is None else environ
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        value = env.get(var)
        if value and Path(value).is_file():
            return Path(value)
    return SYSTEM_BUNDLE if SYSTEM_BUNDLE.is_file() else None


def check_ca_bundle(path: Path) -> Path:
    try:
        head = read_bytes(path, what="CA bundle", max_bytes=CA_BUNDLE_MAX_BYTES)  # never /dev/zero whole
    except OSError as exc:
        raise SecretSpecError(f"--ca-bundle {path}: {exc.strerror}", "pass a readable PEM file") from exc
    if b"-----BEGIN CERTIFICATE-----" not in head:
        raise SecretSpecError(f"--ca-bundle {path}: no PEM certificate in it", "pass a PEM bundle (BEGIN CERTIFICATE)")
    return path


def proxy_settings(environ: dict[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Split proxy variables into plain build args and secrets (those carrying user:password@)."""
    env = os.environ if environ is None else environ
    args: dict[str, str] = {}
    secret: dict[str, str] = {}
    for var in PROXY_VARS:
        value = env.get(var)
        if not value:
            continue
        parts = urlsplit(value if "://" in value else f"http://{value}")
        if parts.username is not None or parts.password is not None:
            secret[var] = value
        else:
            args[var] = value
    return args, secret


@contextmanager
def secret_files(ca_bundle: Path | None, specs: list[SecretSpec],
                 env_values: dict[str, str]) -> Iterator[tuple[list[str], list[str]]]:
    """Yield (docker --secret arguments, secret ids besides 'ca'); temp files removed after."""
    # held by this run (0700); a killed run's secrets are removed by the next run (run_tempdir), not left on disk
    with run_tempdir("secrets") as tmp:
        argv: list[str] = []
        ids: list[str] = []
        if ca_bundle is not None:
            argv += ["--secret", f"id=ca,src={ca_bundle}"]
        for spec in specs:
            if spec.src is not None:
                argv += ["--secret", f"id={spec.id},src={spec.src}"]
            else:
                f = tmp / spec.id
                fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(os.environ[spec.env or ""])
                argv += ["--secret", f"id={spec.id},src={f}"]
            ids.append(spec.id)
        for var, value in sorted(env_values.items()):
            f = tmp / var
            fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(value)
            argv += ["--secret", f"id={var},src={f}"]
            ids.append(var)
        if len(set(ids)) != len(ids):
            raise SecretSpecError(f"secret ids repeat: {', '.join(sorted(ids))}", "give each --secret its own id")
        yield argv, ids
