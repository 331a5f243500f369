"""certificate.json as a typed, versioned record: what certify writes and report, nightly and verify-cert read.

`Certificate.to_json(Certificate.from_json(text)) == text` for every certificate envbuilder writes (the
committed ones under bench/results prove it). Reading goes through envbuilder.jsonread: bounded, depth
checked, every field typed, a wrong one a typed error naming the file and the field. A check's
`measured` and `threshold` are the check's own JSON (numbers, maps), kept as they were.

Standard library only: the environment being certified builds its certificate with this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envbuilder.canonical import dumps
from envbuilder.certify.result import FAIL, PASS, STATUSES, CheckResult
from envbuilder.errors import EnvbuilderError, MalformedFileError
from envbuilder.jsonread import Fields, loads_json, read_object

CERT_SCHEMA = 1
SUPPORTED_SCHEMAS = (1,)
#: a check's measurements are free JSON: a number, a string, a map of numbers
JsonValue = Any
_FIX = "pass the certificate.json written by `envbuilder certify -o DIR`"


@dataclass(frozen=True)
class SbomRef:
    """The SBOM a certificate names; it sits beside certificate.json."""

    name: str
    sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "sha256": self.sha256}


@dataclass(frozen=True)
class Artifact:
    """What was certified: `kind` is the certify target (image, sqsh, sif, venv, in-place), with the image's
    `digest` or the file's `sha256`. Fields that do not apply are absent from the JSON."""

    kind: str = "unknown"
    ref: str | None = None
    digest: str | None = None       # image: sha256:<hex>
    sha256: str | None = None       # sqsh / sif
    sbom: SbomRef | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for key in ("ref", "digest", "sha256"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.sbom is not None:
            out["sbom"] = self.sbom.to_dict()
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> Artifact:
        sbom = f.obj("sbom", None)
        return cls(f.string("kind", "unknown", max_len=40), f.string("ref", None), f.string("digest", None, max_len=80),
                   f.sha256("sha256", None),
                   SbomRef(sbom.string("name", plain=True), sbom.sha256("sha256")) if sbom is not None else None)

    def with_sbom(self, sbom: SbomRef) -> Artifact:
        return Artifact(self.kind, self.ref, self.digest, self.sha256, sbom)


@dataclass(frozen=True)
class GpuInfo:
    name: str
    sm: str | None = None
    memory_gib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.sm is not None:
            out["sm"] = self.sm
        if self.memory_gib is not None:
            out["memory_gib"] = self.memory_gib
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> GpuInfo:
        return cls(f.string("name", max_len=200), f.string("sm", None, max_len=16), f.number("memory_gib", None))


@dataclass(frozen=True)
class GpuFacts:
    """The GPUs torch sees and the driver NVML reports, as the checks and the certificate's host read them."""

    driver: str | None = None
    gpus: tuple[GpuInfo, ...] = ()
    error: str | None = None        # why torch sees no GPU, when it sees none

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def sms(self) -> list[str]:
        return sorted({g.sm for g in self.gpus if g.sm})


@dataclass(frozen=True)
class CertHost:
    """The machine the checks ran on."""

    driver: str | None = None
    gpus: tuple[GpuInfo, ...] = ()
    gpu_count: int = 0
    python: str | None = None
    torch: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"driver": self.driver, "gpus": [g.to_dict() for g in self.gpus], "gpu_count": self.gpu_count,
                "python": self.python, "torch": self.torch}

    @classmethod
    def from_fields(cls, f: Fields) -> CertHost:
        return cls(f.string("driver", None, max_len=64), tuple(GpuInfo.from_fields(g) for g in f.objs("gpus", [])),
                   f.integer("gpu_count", 0, min=0), f.string("python", None, max_len=64),
                   f.string("torch", None, max_len=200))

    @property
    def gpu_model(self) -> str:
        """The GPU model(s) the numbers were measured on ('cpu' when none)."""
        names = sorted({g.name for g in self.gpus})
        return " + ".join(names) if names else "cpu"


def check_from_fields(f: Fields) -> CheckResult:
    return CheckResult(
        name=f.string("name", nonempty=True, max_len=200), level=f.integer("level", 0, min=0, max=9),
        status=f.string("status", choices=STATUSES), measured=f.raw("measured", None),
        threshold=f.raw("threshold", None), advice=f.string("advice", None, max_len=1 << 16),
        detail=f.string("detail", None, max_len=1 << 16), losses=f.numbers("losses", None, allow_nonfinite=True),
        seconds=f.number("seconds", None, min=0))


@dataclass
class Certificate:
    """certificate.json. Written by the environment (`python -m envbuilder.certify`), checked and signed by the
    host, read by verify-cert, report and nightly."""

    level: int
    status: str                         # pass | fail
    checks: list[CheckResult]
    lock_sha256: str | None = None      # the uv.lock it is bound to; None when certified without a lock
    row: str | None = None
    expectations_sha256: str | None = None
    artifact: Artifact = field(default_factory=Artifact)
    host: CertHost = field(default_factory=CertHost)
    summary: dict[str, int] = field(default_factory=dict)
    loss_rule: str | None = None
    envbuilder_version: str | None = None
    created: str | None = None          # only with --timestamp: certificates are deterministic otherwise
    lock_name: str | None = None        # a lock made with --set overrides is named for itself, not its row
    schema: int = CERT_SCHEMA

    @property
    def name(self) -> str:
        """What this certificate is labelled: the lock's name when it is not its row, else the row."""
        return self.lock_name or self.row or "no-row"

    # ---- what the checks say ------------------------------------------------------------
    @property
    def passed(self) -> bool:
        return self.status == PASS

    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def ran_any(self) -> bool:
        """Whether at least one check passed or failed: a certificate that checked nothing claims nothing."""
        return any(c.status in (PASS, FAIL) for c in self.checks)

    # ---- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": self.schema, "envbuilder_version": self.envbuilder_version, "level": self.level,
            "status": self.status, "lock_sha256": self.lock_sha256, "row": self.row,
            "expectations_sha256": self.expectations_sha256, "artifact": self.artifact.to_dict(),
            "host": self.host.to_dict(), "checks": [c.to_dict() for c in self.checks], "summary": self.summary,
            "loss_rule": self.loss_rule,
        }
        if self.created:
            out["created"] = self.created
        if self.lock_name:
            out["lock_name"] = self.lock_name
        return out

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_fields(cls, f: Fields) -> Certificate:
        schema = f.integer("schema", CERT_SCHEMA)
        if schema not in SUPPORTED_SCHEMAS:
            f.fail("schema", f"is {schema}: this envbuilder reads certificate schema "
                             f"{', '.join(map(str, SUPPORTED_SCHEMAS))}")
        summary = f.obj("summary", None)
        art, host = f.obj("artifact", None), f.obj("host", None)
        return cls(
            level=f.integer("level", 0, min=0, max=9), status=f.string("status", choices=(PASS, FAIL)),
            checks=[check_from_fields(c) for c in f.objs("checks")],
            lock_sha256=f.sha256("lock_sha256", None), row=f.string("row", None, max_len=200),
            expectations_sha256=f.sha256("expectations_sha256", None),
            artifact=Artifact.from_fields(art) if art is not None else Artifact(),
            host=CertHost.from_fields(host) if host is not None else CertHost(),
            summary={k: summary.integer(k, min=0) for k in summary} if summary is not None else {},
            loss_rule=f.string("loss_rule", None), envbuilder_version=f.string("envbuilder_version", None, max_len=64),
            created=f.string("created", None, max_len=64), lock_name=f.string("lock_name", None, max_len=200),
            schema=schema)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "certificate.json",
                  error: type[EnvbuilderError] = MalformedFileError, fix: str = _FIX) -> Certificate:
        """Parse certificate text (a file's bytes, an environment's stdout); NaN losses are allowed (a diverged
        run is a failed check, not a malformed certificate)."""
        data = loads_json(text, what=where, error=error, fix=fix, allow_nan=True)
        return cls.from_fields(Fields.of(data, where, error, fix))

    @classmethod
    def read(cls, path: Any, error: type[EnvbuilderError] = MalformedFileError, fix: str = _FIX) -> Certificate:
        return cls.from_fields(read_object(path, what="certificate", error=error, fix=fix, allow_nan=True))


def summarize(checks: list[CheckResult]) -> dict[str, int]:
    """How many checks ended in each status (every status named, zeros included)."""
    return {s: sum(1 for c in checks if c.status == s) for s in STATUSES}
