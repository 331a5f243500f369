"""envbuilder.lock.json: inputs, chosen row, provenance per pin and file hashes.

`LockRecord` is the only reader and writer of the record; every other package gets the
lock through it. The image label names that bind an artifact to a lock live here too.
Deterministic by construction: sorted keys, no timestamps, no host-specific paths.
Builds, exports and certificates bind to `lock_sha256` (the sha256 of uv.lock).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from envbuilder import __version__
from envbuilder.archlist import ArchList
from envbuilder.canonical import dumps, major_minor, sha256_file
from envbuilder.choices import ROW_OPTIONS, LockMode
from envbuilder.errors import LockDirError, LockSchemaError, MalformedFileError
from envbuilder.host.torchprobe import RecordedTorch
from envbuilder.jsonread import Fields, loads_json, read_bytes
from envbuilder.safetext import plain_relpath_problem, printable

if TYPE_CHECKING:  # annotations only: export and build read records without loading the resolver
    from envbuilder.resolve.request import ResolveRequest
    from envbuilder.resolve.resolver import Resolution

RECORD_NAME = "envbuilder.lock.json"
SCHEMA = 1
#: schema versions this envbuilder reads; a newer record fails with LockSchemaError instead of being misread
SUPPORTED_SCHEMAS = (1,)

# Image labels that bind an artifact to its lock: written by the Dockerfile templates, read by
# export (sqsh/sif labels) and certify (drift warning). One spelling, here.
LABEL_LOCK_SHA256 = "io.envbuilder.lock-sha256"
LABEL_ROW = "io.envbuilder.row"
LABEL_MODE = "io.envbuilder.mode"
LABEL_VERSION = "io.envbuilder.version"
LABEL_SOURCE_DATE = "io.envbuilder.source-date-epoch"
LABEL_STAGE = "io.envbuilder.stage"
# the arch list the image's kernels were compiled for (TORCH_CUDA_ARCH_LIST; "none" without CUDA)
LABEL_ARCH_LIST = "io.envbuilder.arch-list"
LABEL_IMAGE_ID = "io.envbuilder.image-id"

__all__ = [
    "LABEL_ARCH_LIST", "LABEL_IMAGE_ID", "LABEL_LOCK_SHA256", "LABEL_MODE", "LABEL_ROW", "LABEL_SOURCE_DATE",
    "LABEL_STAGE", "LABEL_VERSION", "RECORD_NAME", "SCHEMA", "GitSource", "LockFindings", "LockRecord", "LockTarget",
    "PinRecord", "build_record", "dumps_record", "sha256_file", "source_date_epoch",
]


def source_date_epoch(exclude_newer: str) -> int:
    try:
        return int(datetime.fromisoformat(exclude_newer.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


@dataclass(frozen=True)
class LockTarget:
    """The platform the lock targets (the record's "target" object)."""

    python: str
    requires_python: str
    cuda: str | None
    cudnn: str | None
    torch: str | None
    torch_variant: str | None
    torch_index: str | None
    min_driver: str | None
    glibc: str
    platform: str
    container: str | None

    @property
    def python_minor(self) -> str:
        """'3.12' from '3.12' or '3.12.4'."""
        return major_minor(self.python)


_FIX = "re-run envbuilder lock"


@dataclass(frozen=True)
class LockInputs:
    """What `envbuilder lock` was asked for (the record's "inputs"), as the user spelled it.

    The row is written under the option that named it (`"nemo": "v2.3.0"`, `"release": "26.04"`)."""

    row_option: str                 # one of choices.ROW_OPTIONS
    row: str
    python: str | None
    cuda: str | None
    torch: str | None
    torch_index: str
    overrides: tuple[str, ...]      # --set NAME==VERSION, as given
    source: str
    mode: str
    glibc: str
    allow_minor_compat: bool
    find_links: tuple[str, ...]
    source_build: str = "allow"     # written only when not the default
    arch_list: str | None = None    # --arch-list (ArchList.torch spelling); written only when given

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            self.row_option: self.row, "python": self.python, "cuda": self.cuda, "torch": self.torch,
            "torch_index": self.torch_index, "set": list(self.overrides), "source": self.source, "mode": self.mode,
            "glibc": self.glibc, "allow_minor_compat": self.allow_minor_compat, "find_links": list(self.find_links)}
        if self.source_build != "allow":
            out["source_build"] = self.source_build
        if self.arch_list is not None:
            out["arch_list"] = self.arch_list
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> LockInputs:
        named = [o for o in ROW_OPTIONS if o in f]
        if len(named) != 1:
            f.fail(None, f"names its row under {len(named)} of {', '.join(ROW_OPTIONS)} (one expected)")
        known = {*ROW_OPTIONS, "python", "cuda", "torch", "torch_index", "set", "source", "mode", "glibc",
                 "allow_minor_compat", "find_links", "source_build", "arch_list"}
        unknown = sorted(set(f) - known)
        if unknown:
            f.fail(unknown[0], "is not an input envbuilder records")
        return cls(named[0], f.string(named[0]), f.string("python", None), f.string("cuda", None),
                   f.string("torch", None), f.string("torch_index"), tuple(f.strings("set")), f.string("source"),
                   f.string("mode"), f.string("glibc"), f.boolean("allow_minor_compat"),
                   tuple(f.strings("find_links")), f.string("source_build", "allow"), f.string("arch_list", None))


@dataclass(frozen=True)
class LockHost:
    """The host the lock was made for (the record's "host"): detected, planned from flags, or none.

    `origin` is written as "kind" (schema-1 spelling, see CONTRIBUTING's glossary)."""

    origin: str                     # detected | planned | none
    driver: str | None = None
    sm: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    torch: RecordedTorch | None = None  # --mode host-torch: the interpreter's torch, never replaced

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.origin, "driver": self.driver, "sm": self.sm, "gpu": self.gpu,
                                  "gpu_count": self.gpu_count}
        if self.torch is not None:
            out["torch"] = self.torch.to_dict()
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> LockHost:
        unknown = sorted(set(f) - {"kind", "driver", "sm", "gpu", "gpu_count", "torch"})
        if unknown:
            f.fail(unknown[0], "is not a host fact envbuilder records")
        torch = f.obj("torch", None)
        return cls(f.string("kind", choices=("detected", "planned", "none")), f.string("driver", None),
                   f.string("sm", None), f.string("gpu", None), f.integer("gpu_count", None, min=0),
                   RecordedTorch.from_fields(torch) if torch is not None else None)


@dataclass(frozen=True)
class PinRecord:
    """One pinned component: version, install stage and where the version came from."""

    version: str
    stage: int
    provenance: str
    git: str | None = None
    tag: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "stage": self.stage, "provenance": self.provenance}
        if self.git:
            out.update(git=self.git, tag=self.tag)
        return out


@dataclass(frozen=True)
class GitSource:
    """A stage-2 pin built from its repository's tag instead of its PyPI sdist (which ships no kernels).

    uv.lock keeps the PyPI pin (its metadata resolves the rest of the lock); stage 2 builds the tag's
    files. `tree` is what a build recomputes from the files it gets (a mirror, a bundle, a download),
    `commit` is the tag's commit that holds that tree, `source` cites both.
    """

    url: str
    tag: str
    commit: str
    tree: str
    source: str
    reason: str
    #: the package's own switch that stops its setup.py from downloading a prebuilt wheel
    force_build_env: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def archive_name(self, package: str) -> str:
        """The file name of this source as an archive (bundles, build contexts, caches)."""
        return f"{package}-{self.tag}-git{self.commit[:12]}.tar.gz"

    def archive_prefix(self, package: str, version: str) -> str:
        """The one top-level directory inside that archive, sdist-like."""
        return f"{package}-{version}"


@dataclass(frozen=True)
class LockRecord:
    """The parsed envbuilder.lock.json. `to_json(from_json(text)) == text` for every record we write."""

    envbuilder_version: str
    uv_version: str
    row: str
    mode: LockMode
    source: str
    inputs: LockInputs
    host: LockHost
    target: LockTarget
    pins: dict[str, PinRecord]
    local_wheels: dict[str, str]
    provenance: dict[str, str]
    omitted: dict[str, str]
    constraints_added: list[dict[str, str]]
    stage2_packages: list[str]
    stage1_deferred: list[str]
    source_builds: dict[str, list[str]]
    stage2_env: dict[str, str]
    warnings: list[str]
    notes: list[dict[str, str]]
    exclude_newer: str
    source_date_epoch: int
    files: dict[str, str]
    lock_sha256: str
    schema: int = SCHEMA
    # stage-2 pins of the row whose sdist ships no CUDA sources: locked (so the row still locks and
    # syncs), warned about, and refused by build/wheels until the user picks a way out
    kernel_less: list[str] = dataclasses.field(default_factory=list)
    # stage-2 pins of the row whose PyPI sdist ships no CUDA sources and whose repository tag the matrix
    # records: stage 2 builds them from that tag (see GitSource), never from the kernel-less sdist
    git_sources: dict[str, GitSource] = dataclasses.field(default_factory=dict)

    # a row with upstream's lock as its target (Megatron-Bridge rows): agreement and every difference with
    # its reason (lock/fidelity.py, Fidelity.to_dict)
    fidelity: dict[str, Any] = dataclasses.field(default_factory=dict)

    #: fields written only when they hold something, so records without them keep their bytes
    OPTIONAL_FIELDS: ClassVar[frozenset[str]] = frozenset({"kernel_less", "git_sources", "fidelity"})

    # ---- what the lock asks for ----------------------------------------------------
    @property
    def name(self) -> str:
        """What results of this lock are labelled: its row, or, for a lock made with --set overrides (another
        stack than the row's: torch 2.11 and no NeMo is not "v2.7.3"), the row and the lock itself."""
        return f"{self.row}+set-{self.lock_sha256[:12]}" if self.inputs.overrides else self.row

    def arch_list(self) -> ArchList:
        """The GPU archs this lock's kernels are compiled for: its --arch-list, else the one default for its CUDA
        and host (envbuilder.matrix.archs.default_arch_list). Build, wheels and certify all read it here."""
        if self.inputs.arch_list:
            return ArchList.parse(self.inputs.arch_list, f"{RECORD_NAME} inputs.arch_list")
        from envbuilder.matrix.archs import default_arch_list

        return default_arch_list(self.target.cuda, self.host.sm)

    # ---- serialisation -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in self.OPTIONAL_FIELDS and not value:
                continue
            if f.name == "target":
                value = dataclasses.asdict(value)
            elif f.name in ("inputs", "host"):
                value = value.to_dict()
            elif f.name == "pins":
                value = {name: pin.to_dict() for name, pin in sorted(value.items())}
            elif f.name == "git_sources":
                value = {name: src.to_dict() for name, src in sorted(value.items())}
            out[f.name] = value
        return out

    def to_json(self) -> str:
        return dumps(self.to_dict(), ascii_only=True)

    @classmethod
    def from_dict(cls, data: Any, where: str = RECORD_NAME) -> LockRecord:
        """Typed record from parsed JSON; LockSchemaError for another schema, LockDirError when malformed."""
        if not isinstance(data, dict):
            raise LockDirError(f"{where}: not a JSON object", "re-run envbuilder lock")
        schema = data.get("schema")
        if schema not in SUPPORTED_SCHEMAS:
            raise LockSchemaError(
                f"{where}: lock record schema {schema!r} is not one this envbuilder {__version__} reads "
                f"(reads {', '.join(map(str, SUPPORTED_SCHEMAS))})",
                "re-lock with this envbuilder (envbuilder lock), or use the envbuilder version that wrote it")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(names - set(data) - cls.OPTIONAL_FIELDS)
        if missing:
            raise LockDirError(f"{where}: lock record lacks {', '.join(missing)}", "re-run envbuilder lock")
        unknown = sorted(set(data) - names)
        if unknown:  # a same-schema record with fields we do not know was not written by a release of ours
            raise LockSchemaError(f"{where}: lock record has unknown field(s) {', '.join(unknown)}",
                                  "re-lock with this envbuilder (envbuilder lock)")
        try:  # every name the record joins to the lock directory is a relative path of plain names
            for rel in [*data["files"], *data["local_wheels"].values()]:
                problem = plain_relpath_problem(rel)
                if problem is not None:
                    raise LockDirError(f"{where}: the file name {printable(rel)[:80]!r} {problem}", _FIX)
        except (TypeError, AttributeError) as exc:
            raise LockDirError(f"{where}: malformed lock record ({exc})", _FIX) from exc
        try:
            kwargs = dict(data)
            kwargs["mode"] = _mode(data["mode"], where)
            kwargs["inputs"] = LockInputs.from_fields(Fields.of(data["inputs"], f"{where} inputs", LockDirError, _FIX))
            kwargs["host"] = LockHost.from_fields(Fields.of(data["host"], f"{where} host", LockDirError, _FIX))
            kwargs["target"] = LockTarget(**data["target"])
            kwargs["pins"] = {name: PinRecord(**pin) for name, pin in data["pins"].items()}
            kwargs["git_sources"] = {name: GitSource(**src) for name, src in data.get("git_sources", {}).items()}
            return cls(**kwargs)
        except (TypeError, AttributeError) as exc:
            raise LockDirError(f"{where}: malformed lock record ({exc})", "re-run envbuilder lock") from exc

    @classmethod
    def from_json(cls, text: str | bytes, where: str = RECORD_NAME) -> LockRecord:
        """Parsed through envbuilder.jsonread: bounded, no duplicate keys, no NaN."""
        return cls.from_dict(loads_json(text, what=where, error=LockDirError, fix=_FIX), where)

    @classmethod
    def from_lockdir(cls, lockdir: Path, verify: bool = True, verify_only: tuple[str, ...] | None = None
                     ) -> LockRecord:
        """Load a lock directory's record; with verify, recompute every file hash it lists
        (or only those in verify_only, for a lock copied out of an image without its wheels/)."""
        lockdir = Path(lockdir)
        path = lockdir / RECORD_NAME
        if not path.is_file():
            raise LockDirError(f"{lockdir} has no {RECORD_NAME}",
                               f"create it with: envbuilder lock --nemo TAG -o {lockdir}")
        raw = read_bytes(path, what="lock record")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedFileError(f"{path}: not UTF-8 text", _FIX) from exc
        record = cls.from_json(raw, str(path))
        if verify:
            record.verify_files(lockdir, verify_only)
            if verify_only is None or "uv.lock" in verify_only:
                record.verify_binding(lockdir)
        return record

    def verify_binding(self, lockdir: Path) -> None:
        """Recompute the hash every artifact binds to: lock_sha256 must be the sha256 of the uv.lock
        beside it (never a value taken on trust), and uv.lock must parse: hashes alone cannot tell a
        truncated file whose record was re-hashed from a good one."""
        lock = Path(lockdir) / "uv.lock"
        where = Path(lockdir) / RECORD_NAME
        if not isinstance(self.files, dict) or not all(isinstance(v, str) for v in self.files.values()):
            raise MalformedFileError(f"{where}: 'files' is not a map of file name to sha256", "re-run envbuilder lock")
        if not lock.is_file():
            raise LockDirError(f"{lockdir}: uv.lock is missing", "re-run envbuilder lock")
        actual = sha256_file(lock)
        if self.lock_sha256 != actual or self.files.get("uv.lock", actual) != actual:
            raise LockDirError(f"{where}: lock_sha256 {str(self.lock_sha256)[:12]}… is not the sha256 of uv.lock "
                               f"({actual[:12]}…): the record was edited", "re-run envbuilder lock")
        from envbuilder.lock.uvlock import check_uv_lock  # lazy: readers of a record alone never parse uv.lock

        check_uv_lock(lock)

    # ---- checks ----------------------------------------------------------------------
    def verify_files(self, lockdir: Path, only: tuple[str, ...] | None = None) -> None:
        """Recompute the hash of every file the record lists; LockDirError on the first mismatch."""
        for name, digest in sorted(self.files.items()):
            if only is not None and name not in only:
                continue
            f = Path(lockdir) / name
            if not f.is_file():
                raise LockDirError(f"{lockdir}: {name} is missing", "re-run envbuilder lock")
            if sha256_file(f) != digest:
                raise LockDirError(f"{lockdir}: {name} was changed after locking (sha256 differs from the record)",
                                   "re-run envbuilder lock instead of editing lock files by hand")


@dataclass(frozen=True)
class LockFindings:
    """What one lock run found besides the resolution: the facts the record keeps from uv, the index and
    the locked graph (one value, so build_record takes three things, not thirteen)."""

    uv_version: str
    constraints_added: list[dict[str, str]] = field(default_factory=list)
    local_wheels: dict[str, str] = field(default_factory=dict)   # package -> wheel path relative to the lock
    find_links_used: list[str] = field(default_factory=list)
    stage1_deferred: list[str] = field(default_factory=list)     # stage-2 packages stage 1 also depends on
    target_python: str | None = None
    source_builds: dict[str, list[str]] | None = None
    kernel_less: list[str] = field(default_factory=list)
    git_sources: dict[str, GitSource] = field(default_factory=dict)
    fidelity: dict[str, Any] | None = None


def build_record(res: Resolution, req: ResolveRequest, lockdir: Path, found: LockFindings) -> LockRecord:
    files = {name: sha256_file(lockdir / name) for name in ("pyproject.toml", "uv.lock")}
    for rel in sorted(found.local_wheels.values()):
        files[rel] = sha256_file(lockdir / rel)
    files = dict(sorted(files.items()))
    return LockRecord(
        schema=SCHEMA,
        envbuilder_version=__version__,
        uv_version=found.uv_version,
        row=res.row,
        mode=res.mode,
        source=res.source,
        inputs=LockInputs(
            row_option=req.row_option, row=req.row, python=req.python, cuda=req.cuda, torch=req.torch,
            torch_index=req.torch_index, overrides=tuple(f"{n}=={v}" for n, v in req.overrides),
            source=req.source, mode=req.mode, glibc=req.glibc, allow_minor_compat=req.allow_minor_compat,
            find_links=tuple(found.find_links_used), source_build=req.source_build,
            arch_list=req.arch_list.torch if req.arch_list else None),
        host=LockHost(res.host_origin, res.driver, res.sm, req.host.gpu_name, req.host.gpu_count,
                      res.host_torch.recorded() if res.host_torch else None),
        target=LockTarget(
            python=found.target_python or res.python, requires_python=res.requires_python, cuda=res.cuda,
            cudnn=res.cudnn, torch=res.pins["torch"].version if "torch" in res.pins else
            (res.host_torch.torch if res.host_torch else None),
            torch_variant=res.torch_variant, torch_index=res.torch_index, min_driver=res.min_driver,
            glibc=res.glibc, platform="linux-x86_64", container=res.container,
        ),
        pins={name: PinRecord(p.version, p.stage, p.provenance, p.git_url or None, p.git_tag if p.git_url else None)
              for name, p in sorted(res.pins.items())},
        local_wheels=dict(sorted(found.local_wheels.items())),
        provenance=res.provenance,
        omitted=res.omitted,
        constraints_added=found.constraints_added,
        stage2_packages=sorted(p.name for p in res.stage(2)),
        # stage-2 packages that stage 1 also depends on: stage 1 must skip them
        # (`uv sync --frozen --no-install-package NAME`), stage 2 builds them
        stage1_deferred=sorted(found.stage1_deferred),
        # what stage 1 builds from source on target.python: compiled = wheels exist but none fit
        source_builds=found.source_builds or {"compiled": [], "sdist_only": []},
        stage2_env=res.stage2_env,
        warnings=list(res.warnings),
        kernel_less=sorted(found.kernel_less),
        git_sources=dict(sorted(found.git_sources.items())),
        fidelity=found.fidelity or {},
        notes=[{"severity": n.severity, "text": n.text, "source": n.source} for n in res.notes],
        exclude_newer=res.exclude_newer,
        source_date_epoch=source_date_epoch(res.exclude_newer),
        files=files,
        lock_sha256=files["uv.lock"],
    )


def _mode(value: object, where: str) -> LockMode:
    try:
        return LockMode.parse(str(value))
    except ValueError as exc:
        raise LockDirError(f"{where}: mode {exc}", _FIX) from exc


def dumps_record(record: LockRecord) -> str:
    return record.to_json()
