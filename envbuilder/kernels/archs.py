"""GPU architectures of built wheels: read them back from a .so and hold them to the request.

The request is an `ArchList` (envbuilder.archlist, re-exported here: one parser for every stage).
After a build, `cuobjdump --list-elf/--list-ptx` lists what each shared object really holds, and
the two must agree: a wheel missing the GPU's arch fails at the first kernel launch, and one with
every arch took many times longer to compile than asked for.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from envbuilder import procs
from envbuilder.archlist import ArchList
from envbuilder.errors import ArchMismatchError, CudaToolkitError

__all__ = ["ArchList", "ObjectArchs", "check_archs", "find_cuobjdump", "mismatches", "object_archs"]


@dataclass(frozen=True)
class ObjectArchs:
    """What one shared object holds: SASS (cubin) and PTX archs, as cuobjdump names them."""

    path: str
    sass: tuple[str, ...]
    ptx: tuple[str, ...]

    @property
    def has_device_code(self) -> bool:
        return bool(self.sass or self.ptx)

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "sass": list(self.sass), "ptx": list(self.ptx)}


_ARCH_IN_NAME = re.compile(r"\.sm_(\d+[a-z]?)\.(?:cubin|ptx)\b")


def find_cuobjdump(extra_dirs: list[Path] | None = None) -> Path:
    """cuobjdump from CUDA_HOME, PATH, or a directory of NVIDIA's PyPI CUDA wheels."""
    candidates: list[Path] = []
    for d in extra_dirs or []:
        candidates.append(Path(d) / "cuobjdump")
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "bin" / "cuobjdump")
    found = shutil.which("cuobjdump")
    if found:
        candidates.append(Path(found))
    candidates.append(Path("/usr/local/cuda/bin/cuobjdump"))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise CudaToolkitError("no cuobjdump found (needed to read the archs of built .so files)",
                           "install the CUDA toolkit, or `pip install nvidia-cuda-cuobjdump` and set CUDA_HOME "
                           "to its nvidia/cu13 directory")


def _list(cuobjdump: Path, flag: str, path: Path) -> tuple[str, ...]:
    proc = procs.run([str(cuobjdump), flag, str(path)], capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 and "does not contain device code" not in text:
        raise CudaToolkitError(f"cuobjdump {flag} {path.name} failed: {text.strip()[-300:]}",
                               "check that cuobjdump matches the CUDA version the .so was built with")
    return tuple(sorted(set(_ARCH_IN_NAME.findall(text)), key=_arch_sort_key))


def _arch_sort_key(arch: str) -> tuple[int, str]:
    m = re.match(r"(\d+)(.*)", arch)
    return (int(m.group(1)), m.group(2)) if m else (0, arch)


def object_archs(path: Path, cuobjdump: Path, root: Path | None = None) -> ObjectArchs:
    rel = str(path.relative_to(root)) if root else path.name
    return ObjectArchs(rel, _list(cuobjdump, "--list-elf", path), _list(cuobjdump, "--list-ptx", path))


#: ELF sections nvcc puts CUDA fat binaries in (an executable's and a relocatable object's)
FATBIN_SECTIONS = frozenset({b".nv_fatbin", b"__nv_relfatbin"})


def elf_has_fatbin(path: Path) -> bool:
    """Whether a 64-bit ELF file has a fat-binary section: read from its section headers (envbuilder/elf.py;
    no CUDA tool needed), so a wheel built without device code is checked on any host."""
    from envbuilder.elf import read_sections

    with open(path, "rb") as fh:
        sections = read_sections(fh)
    return sections is not None and any(s.name in FATBIN_SECTIONS for s in sections)


def _family(arch: str) -> str:
    """sm_90a is arch-specific SASS for 9.0: it counts as 9.0."""
    return arch.rstrip("abcdefghijklmnopqrstuvwxyz")


def mismatches(requested: ArchList, found: list[ObjectArchs]) -> list[str]:
    """One line per .so whose device code differs from the request; [] when all agree."""
    problems = []
    for obj in found:
        if not obj.has_device_code:
            continue
        sass = {_family(a) for a in obj.sass}
        ptx = {_family(a) for a in obj.ptx}
        if sass != requested.expected_sass or ptx != requested.expected_ptx:
            problems.append(f"{obj.path}: SASS {sorted(sass, key=_arch_sort_key) or '-'} "
                            f"PTX {sorted(ptx, key=_arch_sort_key) or '-'}")
    return problems


def check_archs(package: str, requested: ArchList, found: list[ObjectArchs]) -> None:
    """Raise ArchMismatchError unless every .so with device code holds exactly the requested archs."""
    if not any(o.has_device_code for o in found):
        raise ArchMismatchError(
            f"{package}: no built .so holds GPU code (asked for {requested.torch})",
            "the build skipped its CUDA extension: check CUDA_HOME/nvcc and the package's *_SKIP_CUDA_BUILD variables")
    problems = mismatches(requested, found)
    if problems:
        want = f"SASS {sorted(requested.expected_sass)} PTX {sorted(requested.expected_ptx) or '-'}"
        raise ArchMismatchError(
            f"{package}: built archs differ from --arch-list {requested.torch} (want {want}): " + "; ".join(problems),
            "the package ignores its arch variable: add a gencode patch for it (envbuilder/kernels/patch.py), "
            "or pass the arch list it really builds", found=[o.to_dict() for o in found])
