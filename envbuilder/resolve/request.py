"""What the user asked for, with where each value came from."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envbuilder.archlist import ArchList
from envbuilder.choices import LOCK_MODES, LockMode
from envbuilder.errors import InvalidOptionError, ResolveConflictError
from envbuilder.host.torchprobe import HostTorch
from envbuilder.resolve.components import canonical


@dataclass(frozen=True)
class HostFacts:
    """The target host as far as the resolver cares; `origin` is 'detected', 'planned' or 'none'."""

    origin: str = "none"
    driver: str | None = None
    sm: str | None = None
    gpu_name: str | None = None
    gpu_count: int | None = None




@dataclass(frozen=True)
class ResolveRequest:
    row: str  # the row as the user named it: a NeMo tag, a release ("26.04") or a Megatron-Bridge version
    python: str | None = None
    cuda: str | None = None
    torch: str | None = None
    torch_index: str = "pypi"  # "pypi" (PyPI's default variant) or "pytorch" (exact variant index)
    overrides: tuple[tuple[str, str], ...] = ()
    source: str = "pypi"
    mode: LockMode = LockMode.HERMETIC  # a spelling ("ngc-base") is read into the type
    glibc: str = "2.35"
    glibc_from_row: bool = False  # glibc is the row's default (its container's base OS), not --glibc
    host: HostFacts = field(default_factory=HostFacts)
    allow_minor_compat: bool = False
    row_option: str = "nemo"  # which of ROW_OPTIONS `row` is (the CLI option, and Matrix.find_row's keyword)
    source_build: str = "allow"  # "forbid": a stage-2 package without a prebuilt wheel is an error
    host_torch: HostTorch | None = None  # --mode host-torch: the interpreter's torch (probed by the CLI)
    arch_list: ArchList | None = None  # --arch-list: the GPU archs stage 2 compiles for (else the one default)

    def __post_init__(self) -> None:
        if not isinstance(self.mode, LockMode):
            try:
                object.__setattr__(self, "mode", LockMode.parse(str(self.mode)))
            except ValueError as exc:
                raise InvalidOptionError(f"--mode {self.mode}: {exc}", f"use --mode {' or '.join(LOCK_MODES)}") from exc


_SET_RE = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([A-Za-z0-9_.+!\-]+)\s*$")


def parse_set(values: tuple[str, ...] | list[str]) -> tuple[tuple[str, str], ...]:
    """Parse repeatable --set NAME==VERSION (VERSION 'none' drops the component)."""
    out: dict[str, str] = {}
    for raw in values:
        m = _SET_RE.match(raw)
        if not m:
            raise InvalidOptionError(f"--set '{raw}' is not NAME==VERSION",
                                     "write it like --set flash-attn==2.7.4.post1 (or NAME==none to drop it)")
        name = canonical(m.group(1))
        if name in out and out[name] != m.group(2):
            raise ResolveConflictError(f"--set {name}=={out[name]} and --set {name}=={m.group(2)} disagree",
                                       f"pass --set {name} once")
        out[name] = m.group(2)
    return tuple(sorted(out.items()))
