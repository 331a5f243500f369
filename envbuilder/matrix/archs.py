"""Which compute capabilities exist, which each CUDA release's nvcc can compile for, and the default list.

Reads matrices/cuda_archs.toml (every list cites its source). Used before any slow step: `doctor`
marks a row that cannot have kernels for the GPU, `lock` refuses a --sm that names no GPU or that
the row's CUDA cannot target, and lock, build and wheels check an `--arch-list` here
(`check_arch_list`) and work out the one default (`default_arch_list`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from envbuilder.archlist import ArchList
from envbuilder.canonical import major_minor
from envbuilder.errors import MatrixFileError, UnsupportedArchError
from envbuilder.paths import matrices_dir
from envbuilder.toml_cache import tomllib

ARCHS_FILE = "cuda_archs.toml"


@dataclass(frozen=True)
class ArchTable:
    known: tuple[str, ...]
    known_source: str
    by_cuda: dict[str, tuple[tuple[str, ...], str]]  # "12.1" -> (sm list, source)
    default: tuple[str, ...] = ()                     # [default]: the archs a lock for no particular GPU gets

    def default_for(self, cuda: str | None) -> tuple[str, ...]:
        """[default] kept to what CUDA `cuda` compiles for; for no CUDA, or one the table does not know, to what
        every CUDA in the table compiles for (never a guess that nvcc would refuse)."""
        supported = self.supported(cuda) if cuda else None
        if supported is None:
            rows = [sms for sms, _ in self.by_cuda.values()]
            return tuple(sm for sm in self.default if all(sm in r for r in rows))
        return tuple(sm for sm in self.default if sm in supported)

    def supported(self, cuda: str) -> tuple[str, ...] | None:
        """The sms nvcc of CUDA `cuda` (major.minor) compiles for; None when the table has no such release."""
        got = self.by_cuda.get(major_minor(cuda))
        return got[0] if got else None

    def source(self, cuda: str) -> str:
        got = self.by_cuda.get(major_minor(cuda))
        return got[1] if got else ""


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
    default = data.get("default") or {}
    if default and not default.get("source"):
        raise MatrixFileError(f"{path}: [default] has no source", "every matrix fact cites its source")
    return ArchTable(_sm_list(known.get("sm"), path, "[known]"), str(known["source"]), table,
                     _sm_list(default.get("sm", []), path, "[default]"))


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
    return (f"CUDA {major_minor(cuda)}'s nvcc cannot compile for sm_{sm.replace('.', '')} "
            f"(it targets {archs[0]}..{archs[-1]}; source: {table.source(cuda).split(' ')[0]})")


def default_arch_list(cuda: str | None, host_sm: str | None, table: ArchTable | None = None) -> ArchList:
    """The one default arch list: the host's sm for a lock made for a host, else every [default] arch the row's
    CUDA compiles for (today: up to 12.1 for CUDA 12.9 and 13.x, 10.0 and 12.0 from 12.8, Hopper before)."""
    if host_sm:
        return ArchList((host_sm,))
    table = table or load_arch_table()
    archs = table.default_for(cuda) if table is not None else ()
    return ArchList(archs or ("8.0", "8.6", "8.9", "9.0"))  # site matrices without cuda_archs.toml


def check_arch_list(archs: ArchList, cuda: str | None, flag: str = "--arch-list",
                    table: ArchTable | None = None) -> ArchList:
    """UnsupportedArchError unless every arch names a GPU and the row's CUDA compiles for it."""
    table = table or load_arch_table()
    if table is None:
        return archs
    for sm in archs.archs:
        check_sm_exists(sm, flag, table)
        why = cuda_lacks_sm(cuda, sm, table) if cuda and cuda not in ("none", "unknown") else None
        if why:
            raise UnsupportedArchError(f"{flag} {archs.torch}: {why}",
                                       f"drop sm {sm} from {flag}, or lock a row whose CUDA compiles for it")
    return archs
