"""A content-addressed cache of built kernel wheels.

The key is the sha256 of everything that decides the binary (`BuildKey`): package, version, the sdist's
sha256, torch (version with its local tag), torch's CUDA, the C++ ABI, the arch list, the Python tag, the
patch applied, and the build environment the lock sets (stage2_env). Change any of them and the key
changes; change none and the repeat build is a copy. An entry is written in a staging directory and
renamed into place, so a killed build never leaves a half entry; a hit re-checks the wheel's sha256.
An entry's `entry.json` is a `CachedWheel`: the wheelhouse record of the package plus how it was built.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.atomic import write_atomic
from envbuilder.canonical import sha256_file
from envbuilder.errors import EnvbuilderError, MalformedFileError
from envbuilder.jsonread import Fields, read_object
from envbuilder.kernels.archs import ObjectArchs
from envbuilder.kernels.patch import GencodePatch
from envbuilder.kernels.wheelhouse import WheelRecord, gencode_patch_from, object_archs_from, string_map

ENTRY = "entry.json"
_FIX = "the cache entry is rebuilt on the next run"


@dataclass(frozen=True)
class BuildKey:
    """Every input that decides a kernel wheel's bytes. Its JSON (sorted, compact) hashes to the cache key,
    so the field spellings are part of every existing cache's keys: never rename one."""

    package: str
    version: str
    sdist_sha256: str
    torch: str
    cuda: str | None
    cxx11abi: bool
    arch_list: str              # ArchList.torch, or "none" when no device code is compiled
    python: str                 # the interpreter's tag: cp312
    patch: str | None           # sha256 of the gencode patch applied to setup.py
    stage2_env: dict[str, str]
    keep_version: bool = False  # the wheel keeps its upstream version (no local ABI tag)
    platform: str = "linux-x86_64"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "package": self.package, "version": self.version, "sdist_sha256": self.sdist_sha256,
            "torch": self.torch, "cuda": self.cuda, "cxx11abi": self.cxx11abi, "arch_list": self.arch_list,
            "python": self.python, "patch": self.patch, "stage2_env": dict(sorted(self.stage2_env.items())),
            "platform": self.platform,
        }
        if self.keep_version:
            out["local_version"] = False
        return out

    @property
    def key(self) -> str:
        return cache_key(self.to_dict())

    @classmethod
    def from_fields(cls, f: Fields) -> BuildKey:
        return cls(f.string("package"), f.string("version"), f.sha256("sdist_sha256"), f.string("torch"),
                   f.string("cuda", None), f.boolean("cxx11abi"), f.string("arch_list"), f.string("python"),
                   f.string("patch", None), string_map(f, "stage2_env"),
                   keep_version=f.boolean("local_version", True) is False, platform=f.string("platform"))


def cache_key(facts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(facts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class CachedWheel:
    """entry.json: the built wheel, what it was built from (`facts`) and what the build found."""

    key: str
    facts: BuildKey
    wheel: str
    sha256: str
    arch_env: dict[str, str]
    arch_check: str
    archs: tuple[ObjectArchs, ...]
    patch: GencodePatch | None
    compile_seconds: float | None = None
    peak_rss_mb: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "package": self.facts.package, "version": self.facts.version,
                "facts": self.facts.to_dict(), "wheel": self.wheel, "sha256": self.sha256,
                "arch_env": self.arch_env, "arch_check": self.arch_check, "archs": [o.to_dict() for o in self.archs],
                "patch": self.patch.to_dict() if self.patch else None,
                "compile_seconds": self.compile_seconds, "peak_rss_mb": self.peak_rss_mb}

    @classmethod
    def from_fields(cls, f: Fields) -> CachedWheel:
        patch = f.obj("patch", None)
        return cls(f.sha256("key"), BuildKey.from_fields(f.obj("facts")), f.string("wheel", plain=True),
                   f.sha256("sha256"), string_map(f, "arch_env"), f.string("arch_check"),
                   tuple(object_archs_from(o) for o in f.objs("archs")),
                   gencode_patch_from(patch) if patch is not None else None,
                   f.number("compile_seconds", None), f.number("peak_rss_mb", None))

    def wheel_record(self, cuda_sources: int) -> WheelRecord:
        """The package's wheelhouse.json entry, from the cache as from a fresh build."""
        return WheelRecord(self.facts.package, self.facts.version, self.wheel, self.sha256, self.key,
                           self.facts.sdist_sha256, cuda_sources, self.arch_env, self.arch_check, self.archs,
                           self.patch)


@dataclass(frozen=True)
class CacheEntry:
    wheel: Path
    record: CachedWheel


def lookup(cache: Path, key: str) -> CacheEntry | None:
    """The entry for `key` when it is whole and its wheel has the recorded sha256; None otherwise
    (a damaged or foreign entry is rebuilt and replaced)."""
    d = cache / "wheels" / key
    if not (d / ENTRY).is_file():
        return None
    try:
        record = CachedWheel.from_fields(read_object(d / ENTRY, what="kernel cache entry", error=MalformedFileError,
                                                     fix=_FIX))
    except EnvbuilderError:
        return None
    wheel = d / record.wheel
    if record.key != key or not wheel.is_file() or sha256_file(wheel) != record.sha256:
        return None
    return CacheEntry(wheel, record)


def store(cache: Path, wheel: Path, built: CachedWheel) -> CacheEntry:
    """Copy `wheel` into the cache under `built.key`; `built.wheel`/`sha256` are taken from the copy."""
    root = cache / "wheels"
    root.mkdir(parents=True, exist_ok=True)
    final = root / built.key
    tmp = Path(tempfile.mkdtemp(prefix=f".{built.key[:16]}.", dir=root))
    try:
        shutil.copy2(wheel, tmp / wheel.name)
        rec = CachedWheel(built.key, built.facts, wheel.name, sha256_file(tmp / wheel.name), built.arch_env,
                          built.arch_check, built.archs, built.patch, built.compile_seconds, built.peak_rss_mb)
        write_atomic(tmp / ENTRY, json.dumps(rec.to_dict(), indent=2, sort_keys=True) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)
    return CacheEntry(final / wheel.name, rec)
