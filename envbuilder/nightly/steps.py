"""One row's nightly steps, each an `envbuilder` command line (what a person would type).

Paths per row (OUT = --output, default build/nightly):
    LOCKS/<row>/                 the committed lock (pyproject.toml, uv.lock, envbuilder.lock.json)
    OUT/<row>/audit.json         known vulnerabilities of the lock's packages (envbuilder audit), every night
    OUT/<row>/sbom.cdx.json      CycloneDX SBOM of the lock and the image, with the audit's vulnerabilities
    OUT/<row>/<row>.sqsh|.sif    exported artifacts
    OUT/<row>/cert/              certificate.json, certificate.dsse.json, report.md, loss curves
    OUT/<row>/logs/<step>.log    each step's output
    OUT/<row>/push.json          with --push: the image as pushed (reference, digest, by_digest)
    OUT/<row>/nightly.json       the row's result (steps, exit codes, times)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envbuilder.kernels.wheelcache.shared import CacheSource

from envbuilder import procs

# push comes last: only an image whose certificate verified is pushed (and only with --push)
STEPS = ("lock-check", "audit", "build", "sbom", "export-sqsh", "export-sif", "certify", "verify", "push")
DEFAULT_TAG = "envbuilder/nightly-{row}:{lock12}"


@dataclass(frozen=True)
class RowConfig:
    """Everything a row's steps need; the same object drives `nightly run` and `nightly step`."""

    row: str
    level: int = 2
    #: how `lock` names this row: --nemo for NeMo tags, --release for rows without one (e.g. 26.04)
    row_flag: str = "--nemo"
    output: Path = Path("build/nightly")
    locks: Path = Path("locks")
    tag_template: str = DEFAULT_TAG
    base: str | None = None
    cpu: bool = False
    train_steps: int | None = None
    sign_key: Path | None = None
    public_key: Path | None = None
    formats: tuple[str, ...] = ("sqsh", "sif")
    #: `audit`: an offline OSV database (else the OSV service), and the severity that fails the row
    audit: bool = True
    audit_db: Path | None = None
    audit_fail_on: str = "none"
    lock_args: tuple[str, ...] = field(default=())
    build_args: tuple[str, ...] = field(default=())
    export_args: tuple[str, ...] = field(default=())
    #: REGISTRY/NAMESPACE: the certified image is pushed there as NAMESPACE/<tag's name>:<tag>, by digest
    push: str | None = None
    wheel_cache: CacheSource | None = None  # build --cache URL (--trusted-key, --trust-unsigned)

    @property
    def lockdir(self) -> Path:
        return self.locks / self.row

    @property
    def rowdir(self) -> Path:
        return self.output / self.row

    @property
    def certdir(self) -> Path:
        return self.rowdir / "cert"

    @property
    def sbom(self) -> Path:
        return self.rowdir / "sbom.cdx.json"

    @property
    def audit_report(self) -> Path:
        return self.rowdir / "audit.json"

    def artifact(self, fmt: str) -> Path:
        return self.rowdir / f"{self.row}.{fmt}"

    def lock_sha256(self) -> str:
        uv_lock = self.lockdir / "uv.lock"
        return hashlib.sha256(uv_lock.read_bytes()).hexdigest() if uv_lock.exists() else "nolock"

    @property
    def tag(self) -> str:
        """Named after the lock's content: a new lock never reuses an image built from an old one."""
        return self.tag_template.format(row=self.row.lower(), lock12=self.lock_sha256()[:12])

    @property
    def push_record(self) -> Path:
        return self.rowdir / "push.json"

    @property
    def push_target(self) -> str:
        """--push PREFIX + the tag's last component: REGISTRY/NAMESPACE/nightly-v2.3.0:<lock12>."""
        return f"{(self.push or '').rstrip('/')}/{self.tag.rsplit('/', 1)[-1]}"

    def steps(self) -> list[str]:
        return [s for s in STEPS if not (s.startswith("export-") and s.removeprefix("export-") not in self.formats)
                and not (s == "push" and not self.push) and (s != "audit" or self.audit)]


def cache_args(source: CacheSource | None) -> list[str]:
    """`--cache URL` and its trust, spelled for a child `envbuilder build`."""
    if source is None:
        return []
    return ["--cache", source.url.text, *[a for k in source.trusted_keys for a in ("--trusted-key", str(k))],
            *(["--trust-unsigned"] if source.trust_unsigned else [])]


def command(cfg: RowConfig, step: str) -> list[str]:
    """The envbuilder arguments of one step."""
    if step == "lock-check":
        return ["lock", cfg.row_flag, cfg.row, "-o", str(cfg.lockdir), "--check", "--no-detect", *cfg.lock_args]
    if step == "build":
        return ["build", str(cfg.lockdir), "--tag", cfg.tag, *(["--base", cfg.base] if cfg.base else []),
                *cache_args(cfg.wheel_cache), *cfg.build_args]
    if step == "audit":
        return ["audit", str(cfg.lockdir), "--json", "-o", str(cfg.audit_report), "--fail-on", cfg.audit_fail_on,
                *(["--db", str(cfg.audit_db)] if cfg.audit_db else [])]
    if step == "sbom":
        return ["sbom", str(cfg.lockdir), "--image", cfg.tag, "-o", str(cfg.sbom),
                *(["--audit", str(cfg.audit_report)] if cfg.audit else [])]
    if step.startswith("export-"):
        fmt = step.removeprefix("export-")
        return ["export", cfg.tag, "--format", fmt, "-o", str(cfg.artifact(fmt)), "--lock", str(cfg.lockdir),
                *cfg.export_args]
    if step == "certify":
        return ["certify", "--image", cfg.tag, "--lock", str(cfg.lockdir), "--level", str(cfg.level),
                *(["--cpu"] if cfg.cpu else []), *(["--steps", str(cfg.train_steps)] if cfg.train_steps else []),
                "--sbom", str(cfg.sbom), "--timestamp", "-o", str(cfg.certdir),
                *(["--sign", str(cfg.sign_key)] if cfg.sign_key else [])]
    if step == "verify":
        return ["verify-cert", str(cfg.certdir / "certificate.json"), "--lock", str(cfg.lockdir), "--image", cfg.tag,
                *(["--key", str(cfg.public_key)] if cfg.public_key else [])]
    if step == "push":
        if not cfg.push:
            from envbuilder.errors import InvalidOptionError

            raise InvalidOptionError("the push step needs --push REGISTRY/NAMESPACE", "pass --push, or skip the step")
        return ["push", cfg.tag, cfg.push_target, "-o", str(cfg.push_record)]
    raise ValueError(f"unknown nightly step {step!r}")


def image_lock_label(tag: str) -> str | None:
    """The lock sha256 an image in the local engine was built from (None when it is absent)."""
    from envbuilder.lock.record import LABEL_LOCK_SHA256

    got = procs.run(["docker", "image", "inspect", "--format",
                          "{{index .Config.Labels \"" + LABEL_LOCK_SHA256 + "\"}}", tag],
                    capture_output=True, text=True, check=False)
    return got.stdout.strip() or None if got.returncode == 0 else None


def build_is_current(cfg: RowConfig) -> bool:
    """The image tag exists and was built from this very lock: building again would change nothing."""
    return image_lock_label(cfg.tag) == cfg.lock_sha256()
