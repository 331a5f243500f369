"""Typed view of the compatibility matrix. Every fact keeps its source."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

UNKNOWN = "unknown"
NONE = "none"


@dataclass(frozen=True)
class Fact:
    value: Any
    source: str

    @property
    def known(self) -> bool:
        """A usable value: not "unknown" and not "none"."""
        return self.value not in (UNKNOWN, NONE)

    @property
    def absent(self) -> bool:
        return bool(self.value == NONE)

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Note:
    severity: str
    text: str
    source: str


@dataclass(frozen=True)
class Location:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Release:
    """One NeMo release tag (or a test-only profile)."""

    nemo: str
    facts: dict[str, Fact]
    notes: tuple[Note, ...] = ()
    prefer: str | None = None
    test_only: bool = False
    stage1_extra: tuple[str, ...] = ()
    stage2_env: dict[str, str] = field(default_factory=dict)
    location: Location | None = None
    # PyPI name per component field where it differs from the default (v2.0.0: pytorch-lightning)
    package_names: dict[str, str] = field(default_factory=dict)
    nemo_extras: tuple[str, ...] = ("all",)

    def fact(self, name: str) -> Fact:
        return self.facts[name]

    def __getattr__(self, name: str) -> Fact:
        # rows read naturally: row.torch.value, row.cuda.source
        facts = self.__dict__.get("facts", {})
        if name in facts:
            fact: Fact = facts[name]
            return fact
        raise AttributeError(name)


@dataclass(frozen=True)
class CudaRelease:
    cuda: str  # major.minor
    version: str  # full toolkit version, e.g. 12.8.1
    label: str
    min_driver_linux: Fact


@dataclass(frozen=True)
class TorchInfo:
    version: str
    cuda_variants: Fact
    pypi_default_variant: Fact
    python: Fact
    cxx11_abi: Fact


@dataclass(frozen=True)
class TransformerEngineInfo:
    version: str
    flash_attn: Fact
    pypi_parts: Fact | None = None
    sdist_only_parts: Fact | None = None


@dataclass(frozen=True)
class BuildPackage:
    name: str
    facts: dict[str, Fact]

    def get(self, key: str) -> Fact | None:
        return self.facts.get(key)

    def requires_dist(self, version: str) -> list[str]:
        """Runtime Requires-Dist of this version: the matching requires_dist_by_version entry,
        else the generic requires_dist list."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        by_version = self.facts.get("requires_dist_by_version")
        if by_version is not None and by_version.known:
            for entry in by_version.value:
                if Version(version) in SpecifierSet(str(entry["versions"])):
                    return [str(r) for r in entry["requires_dist"]]
        return self.list_value("requires_dist")

    def list_value(self, key: str) -> list[str]:
        fact = self.facts.get(key)
        if fact is None or not fact.known or not isinstance(fact.value, list):
            return []
        return [str(v) for v in fact.value]


@dataclass(frozen=True)
class PythonRequirement:
    package: str
    versions: str  # PEP 440 specifier on the package version
    python: str  # PEP 440 specifier on the interpreter
    source: str


@dataclass(frozen=True)
class Gpu:
    name: str
    aliases: tuple[str, ...]
    facts: dict[str, Fact]

    @property
    def sm(self) -> str | None:
        fact = self.facts.get("sm")
        return str(fact.value) if fact is not None and fact.known else None

    def fact(self, key: str) -> Fact | None:
        return self.facts.get(key)


@dataclass(frozen=True)
class Matrix:
    releases: tuple[Release, ...]
    cuda_releases: tuple[CudaRelease, ...] = ()
    minor_compat: dict[int, Fact] = field(default_factory=dict)
    forward_compat: Note | None = None
    torch: dict[str, TorchInfo] = field(default_factory=dict)
    transformer_engine: dict[str, TransformerEngineInfo] = field(default_factory=dict)
    build_packages: dict[str, BuildPackage] = field(default_factory=dict)
    python_requirements: tuple[PythonRequirement, ...] = ()
    gpus: tuple[Gpu, ...] = ()

    def tags(self, include_test: bool = False) -> list[str]:
        return [r.nemo for r in self.releases if include_test or not r.test_only]

    def find_release(self, tag: str) -> Release | None:
        wanted = tag if tag.startswith("v") or tag in self.tags(True) else f"v{tag}"
        for r in self.releases:
            if r.nemo == wanted:
                return r
        return None

    def cuda_min_driver(self, cuda: str) -> Fact | None:
        """Minimum Linux driver for a CUDA major.minor (its GA release) or a full version."""
        exact = [c for c in self.cuda_releases if c.version == cuda]
        if exact:
            return exact[0].min_driver_linux
        same = [c for c in self.cuda_releases if c.cuda == cuda]
        if not same:
            return None
        return min(same, key=lambda c: _vkey(c.version)).min_driver_linux

    def gpu(self, name: str) -> Gpu | None:
        """Exact name or alias; else a table name inside an NVML name ("NVIDIA H100 80GB HBM3" ->
        "H100"); else the first entry the name starts ("A100" -> "A100 40GB"). Whole words only,
        so "A100" never resolves to "A10"."""
        key = name.strip().lower()
        if not key:
            return None
        for g in self.gpus:
            if key == g.name.lower() or key in (a.lower() for a in g.aliases):
                return g
        for g in sorted(self.gpus, key=lambda g: -len(g.name)):
            if _words(g.name.lower(), key):
                return g
        for g in self.gpus:
            if g.name.lower().startswith(key) and _words(key, g.name.lower()):
                return g
        return None


def _words(needle: str, haystack: str) -> bool:
    """`needle` occurs in `haystack` as whole words: "a10" is not in "a100"."""
    return re.search(rf"(?<![a-z0-9]){re.escape(needle)}(?![a-z0-9])", haystack) is not None


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))
