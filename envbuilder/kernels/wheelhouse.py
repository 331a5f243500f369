"""wheelhouse.json: what `envbuilder wheels` built for one lock, and the one reader of it.

`Wheelhouse` is the typed, versioned record (conda-lock style): `to_json(from_json(text)) == text` for
every record `wheels` writes. `bundle`, `install` and `build --wheelhouse` read a wheelhouse through
`read_wheelhouse` (through envbuilder.jsonread: bounded, every field typed, wheel names plain), and a
cache hit builds its `WheelRecord` from the cache entry through the same type.
Deterministic: no timings, no host paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.canonical import dumps
from envbuilder.errors import InvalidOptionError, MalformedFileError
from envbuilder.host.torchprobe import RecordedTorch
from envbuilder.jsonread import Fields, loads_json, read_object
from envbuilder.kernels.archs import ObjectArchs
from envbuilder.kernels.patch import GencodePatch

WHEELHOUSE_RECORD = "wheelhouse.json"
SCHEMA = 1
SUPPORTED_SCHEMAS = (1,)
_FIX = "rebuild it: envbuilder wheels LOCKDIR -o DIR"


@dataclass(frozen=True)
class WheelRecord:
    """One built package: its wheel, the sdist it came from and the archs its shared objects hold."""

    name: str
    version: str
    wheel: str                  # file name inside the wheelhouse (a plain name, never a path)
    sha256: str
    cache_key: str
    sdist_sha256: str
    cuda_sources: int
    arch_env: dict[str, str]    # the arch variables the build was given
    arch_check: str             # ok | skipped: <why>
    archs: tuple[ObjectArchs, ...]
    patch: GencodePatch | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "wheel": self.wheel, "sha256": self.sha256,
                "cache_key": self.cache_key, "sdist_sha256": self.sdist_sha256, "cuda_sources": self.cuda_sources,
                "arch_env": self.arch_env, "arch_check": self.arch_check,
                "archs": [o.to_dict() for o in self.archs],
                "patch": self.patch.to_dict() if self.patch else None}

    @classmethod
    def from_fields(cls, f: Fields) -> WheelRecord:
        patch = f.obj("patch", None)
        return cls(f.string("name"), f.string("version"), f.string("wheel", plain=True), f.sha256("sha256"),
                   f.sha256("cache_key"), f.sha256("sdist_sha256"), f.integer("cuda_sources", min=0),
                   string_map(f, "arch_env"), f.string("arch_check"),
                   tuple(object_archs_from(o) for o in f.objs("archs")),
                   gencode_patch_from(patch) if patch is not None else None)


def string_map(f: Fields, key: str) -> dict[str, str]:
    """A JSON object of strings ({"TORCH_CUDA_ARCH_LIST": "9.0"})."""
    m = f.obj(key)
    return {k: m.string(k) for k in m}


def object_archs_from(f: Fields) -> ObjectArchs:
    return ObjectArchs(f.string("path"), tuple(f.strings("sass")), tuple(f.strings("ptx")))


def gencode_patch_from(f: Fields) -> GencodePatch:
    return GencodePatch(f.string("file", relpath=True), f.string("diff", max_len=1 << 20), f.sha256("sha256"),
                        tuple(f.strings("removed")))


@dataclass(frozen=True)
class Wheelhouse:
    """wheelhouse.json: the lock and torch the wheels were built for, the arch list, every package."""

    lock_sha256: str
    torch: RecordedTorch
    arch_list: str              # ArchList.torch spelling ("8.0;9.0")
    packages: tuple[WheelRecord, ...]
    schema: int = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "lock_sha256": self.lock_sha256, "torch": self.torch.to_dict(),
                "arch_list": self.arch_list, "packages": [p.to_dict() for p in self.packages]}

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_fields(cls, f: Fields) -> Wheelhouse:
        schema = f.integer("schema")
        if schema not in SUPPORTED_SCHEMAS:
            f.fail("schema", f"is {schema}: this envbuilder reads wheelhouse schema "
                             f"{', '.join(map(str, SUPPORTED_SCHEMAS))}")
        return cls(f.sha256("lock_sha256"), RecordedTorch.from_fields(f.obj("torch")), f.string("arch_list"),
                   tuple(WheelRecord.from_fields(p) for p in f.objs("packages")), schema=schema)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = WHEELHOUSE_RECORD) -> Wheelhouse:
        data = loads_json(text, what=where, error=MalformedFileError, fix=_FIX)
        return cls.from_fields(Fields.of(data, where, MalformedFileError, _FIX))

    @property
    def names(self) -> list[str]:
        return sorted(p.name for p in self.packages)

    def require_lock(self, lock_sha256: str, where: Path, fix: str = _FIX) -> None:
        """A wheelhouse of another lock is refused: its wheels are another lock's pins."""
        if self.lock_sha256 != lock_sha256:
            raise InvalidOptionError(f"--wheelhouse {where} was built for lock {self.lock_sha256[:12]}, "
                                     f"not {lock_sha256[:12]}", fix)

    def require_torch(self, torch: str | None, where: Path) -> None:
        """Wheels compiled against another torch import with `undefined symbol` errors."""
        built = self.torch.version or ""
        if torch and built.split("+", 1)[0] != torch.split("+", 1)[0]:
            raise InvalidOptionError(f"--wheelhouse {where} was compiled against torch {built}, the lock installs "
                                     f"torch {torch}", "rebuild it with --torch-from venv")

    def verified_wheels(self, root: Path) -> list[Path]:
        """Every wheel's path under `root`, each hash-checked against the record."""
        from envbuilder.kernels.files import verify

        out = []
        for pkg in self.packages:
            whl = Path(root) / pkg.wheel
            verify(whl, pkg.sha256, f"wheelhouse {pkg.wheel}")
            out.append(whl)
        return out


def read_wheelhouse(path: Path) -> Wheelhouse:
    """The wheelhouse in directory `path`; InvalidOptionError when it is none, MalformedFileError when damaged."""
    rec_path = Path(path) / WHEELHOUSE_RECORD
    if not rec_path.exists():
        raise InvalidOptionError(f"{path} is not a wheelhouse (no {WHEELHOUSE_RECORD})",
                                 f"make one with: envbuilder wheels LOCKDIR -o {path}")
    return Wheelhouse.from_fields(read_object(rec_path, what="wheelhouse record", error=MalformedFileError,
                                              fix=_FIX))


__all__ = ["SCHEMA", "WHEELHOUSE_RECORD", "WheelRecord", "Wheelhouse", "read_wheelhouse"]
