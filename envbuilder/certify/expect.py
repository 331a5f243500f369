"""What the lock promises (`Expectations`): the one record the host writes and the environment checks against.

The host turns a lock directory into it (expectations.py), or reads a user's `--expect FILE`; the
environment reads it back with nothing beyond the standard library. One shape, one reader: the host
and the environment both parse it with `Expectations.from_json` (through envbuilder.jsonread), so a
malformed file fails with the same typed error on either side.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envbuilder.canonical import dumps
from envbuilder.certify.certificate import Artifact
from envbuilder.errors import EnvbuilderError, MalformedFileError
from envbuilder.jsonread import Fields, loads_json, read_bytes

EXPECT_SCHEMA = 1
SUPPORTED_SCHEMAS = (1,)
_FIX = "pass an expectations file written by envbuilder (or certify with --lock DIR)"


def normalize(name: str) -> str:
    """PEP 503 name normalization (what uv.lock and importlib.metadata agree on)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class ExpectedTarget:
    """The platform the lock targets, as the checks compare it: torch build, CUDA, ABI, driver, arch list."""

    python: str | None = None
    torch: str | None = None
    torch_variant: str | None = None    # cu130 | cpu | ...
    cuda: str | None = None
    min_driver: str | None = None
    cxx11_abi: bool | None = None
    arch_list: str | None = None        # the arch list the lock asked for (ArchList.torch spelling)

    def to_dict(self) -> dict[str, Any]:
        return {"python": self.python, "torch": self.torch, "torch_variant": self.torch_variant, "cuda": self.cuda,
                "min_driver": self.min_driver, "cxx11_abi": self.cxx11_abi, "arch_list": self.arch_list}

    @classmethod
    def from_fields(cls, f: Fields) -> ExpectedTarget:
        return cls(f.string("python", None, max_len=32), f.string("torch", None, max_len=200),
                   f.string("torch_variant", None, max_len=64), f.string("cuda", None, max_len=32),
                   f.string("min_driver", None, max_len=64), f.boolean("cxx11_abi", None),
                   f.string("arch_list", None, max_len=400))


@dataclass(frozen=True)
class DatasheetRate:
    """A GPU's dense bf16 rate from matrices/gpus.toml (names: the model and its NVML aliases)."""

    names: tuple[str, ...]
    bf16_dense_tflops: float
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"names": list(self.names), "bf16_dense_tflops": self.bf16_dense_tflops}
        if self.source is not None:
            out["source"] = self.source
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> DatasheetRate:
        return cls(tuple(f.strings("names")), f.number("bf16_dense_tflops", min=0), f.string("source", None))


@dataclass(frozen=True)
class Expectations:
    lock_sha256: str | None = None
    row: str | None = None
    packages: dict[str, str] = field(default_factory=dict)      # normalized name -> locked version
    target: ExpectedTarget = field(default_factory=ExpectedTarget)
    nemo_locked: bool = False
    mbridge_locked: bool = False
    skip_imports: tuple[str, ...] = ()
    datasheet: tuple[DatasheetRate, ...] = ()
    artifact: Artifact | None = None
    #: sha256 of the file it was read from (what the certificate binds as expectations_sha256)
    sha256: str | None = None
    #: the lock's name when it is not its row (a lock made with --set overrides: LockRecord.name)
    lock_name: str | None = None

    @property
    def locked(self) -> set[str]:
        return set(self.packages)

    def is_locked(self, dist: str) -> bool:
        return normalize(dist) in self.packages

    def datasheet_tflops(self, gpu_name: str) -> float | None:
        """Dense bf16 rate for an NVML name: an exact alias first, else the longest alias inside the name."""
        low = gpu_name.lower()
        best: tuple[int, float] | None = None
        for entry in self.datasheet:
            for n in entry.names:
                if not n:
                    continue
                if n.lower() == low:
                    return entry.bf16_dense_tflops
                if n.lower() in low and (best is None or len(n) > best[0]):
                    best = (len(n), entry.bf16_dense_tflops)
        return best[1] if best else None

    def with_artifact(self, artifact: Artifact) -> Expectations:
        return replace(self, artifact=artifact)

    # ---- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"schema": EXPECT_SCHEMA, "lock_sha256": self.lock_sha256, "row": self.row,
                "packages": dict(sorted(self.packages.items())), "target": self.target.to_dict(),
                "nemo_locked": self.nemo_locked, "mbridge_locked": self.mbridge_locked,
                "skip_imports": list(self.skip_imports), "datasheet": [d.to_dict() for d in self.datasheet],
                "artifact": self.artifact.to_dict() if self.artifact is not None else {},
                **({"lock_name": self.lock_name} if self.lock_name else {})}

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_fields(cls, f: Fields, sha256: str | None = None) -> Expectations:
        schema = f.integer("schema")
        if schema not in SUPPORTED_SCHEMAS:
            f.fail("schema", f"is {schema}: this envbuilder reads expectations schema "
                             f"{', '.join(map(str, SUPPORTED_SCHEMAS))}")
        pkgs, target, art = f.obj("packages", None), f.obj("target", None), f.obj("artifact", None)
        return cls(
            lock_sha256=f.sha256("lock_sha256", None), row=f.string("row", None, max_len=200),
            packages={normalize(k): pkgs.string(k, max_len=200) for k in pkgs} if pkgs is not None else {},
            target=ExpectedTarget.from_fields(target) if target is not None else ExpectedTarget(),
            nemo_locked=f.boolean("nemo_locked", False), mbridge_locked=f.boolean("mbridge_locked", False),
            skip_imports=tuple(f.strings("skip_imports", [])),
            datasheet=tuple(DatasheetRate.from_fields(d) for d in f.objs("datasheet", [])),
            artifact=Artifact.from_fields(art) if art else None, sha256=sha256,
            lock_name=f.string("lock_name", None, max_len=200))

    @classmethod
    def from_json(cls, raw: bytes | str, where: str = "expectations",
                  error: type[EnvbuilderError] = MalformedFileError) -> Expectations:
        data = raw.encode("utf-8") if isinstance(raw, str) else raw
        value = loads_json(data, what=where, error=error, fix=_FIX)
        return cls.from_fields(Fields.of(value, where, error, _FIX), hashlib.sha256(data).hexdigest())


def load_expectations(path: Path | None, error: type[EnvbuilderError] = MalformedFileError) -> Expectations:
    """The expectations file at `path` (none: no lock, nothing to compare against)."""
    if path is None:
        return Expectations()
    return Expectations.from_json(read_bytes(path, what="expectations file"), f"expectations {path}", error)
