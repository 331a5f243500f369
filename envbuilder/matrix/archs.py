"""Which compute capabilities exist, and which each CUDA release's nvcc can compile for.

Reads matrices/cuda_archs.toml (every list cites nvcc's documentation for that release). Used
before any slow step: `doctor` marks a row that cannot have kernels for the GPU, `lock` refuses
a --sm that names no GPU or that the row's CUDA cannot target.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from envbuilder.errors import MatrixFileError, UnsupportedArchError
from envbuilder.paths import matrices_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ARCHS_FILE = "cuda_archs.toml"


@dataclass(frozen=True)
class ArchTable:
    known: tuple[str, ...]
    known_source: str
    by_cuda: dict[str, tuple[tuple[str, ...], str]]  # "12.1" -> (sm list, source)

    def supported(self, cuda: str) -> tuple[str, ...] | None:
        """The sms nvcc of CUDA `cuda` (major.minor) compiles for; None when the table has no such release."""
        got = self.by_cuda.get(_minor(cuda))
        return got[0] if got else None

    def source(self, cuda: str) -> str:
        got = self.by_cuda.get(_minor(cuda))
        return got[1] if got else ""


def _minor(version: str) -> str:
    return ".".join(str(version).split(".")[:2])


def _sm_list(raw: object, path: Path, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise MatrixFileError(f"{path}: {where}: 'sm' must be a list of \"X.Y\" strings", f"fix {path.name}",
                              field="sm")
    return tuple(raw)


@lru_cache(maxsize=8)
def _load(path: Path) -> ArchTable:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MatrixFileError(f"{path}: {exc}", f"fix {path.name}") from exc
    known = data.get("known") or {}
    if not known.get("source"):
        raise MatrixFileError(f"{path}: [known] has no source", "every matrix fact cites its source")
    table: dict[str, tuple[tuple[str, ...], str]] = {}
    for i, row in enumerate(data.get("cuda", [])):
        if not row.get("source"):
            raise MatrixFileError(f"{path}: [[cuda]] #{i + 1} has no source", "every matrix fact cites its source")
        cudas = row.get("cuda")
        for c in cudas if isinstance(cudas, list) else [cudas]:
            table[str(c)] = (_sm_list(row.get("sm"), path, f"[[cuda]] {c}"), str(row["source"]))
    return ArchTable(_sm_list(known.get("sm"), path, "[known]"), str(known["source"]), table)


def load_arch_table(directory: Path | None = None) -> ArchTable | None:
    """The table, or None when the matrices directory has no cuda_archs.toml (site-local matrices)."""
    path = (directory or matrices_dir()) / ARCHS_FILE
    return _load(path.resolve()) if path.exists() else None


def check_sm_exists(sm: str, flag: str = "--sm", table: ArchTable | None = None) -> None:
    """UnsupportedArchError when `sm` is no compute capability any GPU has (e.g. 12.5)."""
    table = table or load_arch_table()
    if table is not None and sm not in table.known:
        raise UnsupportedArchError(
            f"{flag} {sm} is not the compute capability of any NVIDIA GPU",
            f"use one of {', '.join(table.known[-8:])} (all: matrices/{ARCHS_FILE})")


def cuda_lacks_sm(cuda: str, sm: str, table: ArchTable | None = None) -> str | None:
    """Why CUDA `cuda` cannot compile for `sm` (one line with the source), or None when it can or is unknown."""
    table = table or load_arch_table()
    if table is None:
        return None
    archs = table.supported(cuda)
    if archs is None or sm in archs:
        return None
    return (f"CUDA {_minor(cuda)}'s nvcc cannot compile for sm_{sm.replace('.', '')} "
            f"(it targets {archs[0]}..{archs[-1]}; source: {table.source(cuda).split(' ')[0]})")
