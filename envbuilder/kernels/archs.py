"""GPU architecture lists: parse `--arch-list`, spell it for each package, read it back from a .so.

A request such as `8.0;9.0+PTX` means: SASS for sm_80 and sm_90, PTX for compute_90, nothing
else. After a build, `cuobjdump --list-elf/--list-ptx` lists what each shared object really holds,
and the two must agree: a wheel missing the GPU's arch fails at the first kernel launch, and one
with every arch took many times longer to compile than asked for.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from envbuilder.errors import ArchMismatchError, CudaToolkitError, InvalidOptionError


@dataclass(frozen=True)
class ArchList:
    """Compute capabilities as torch spells them ('8.0', '9.0'), each with or without PTX."""

    archs: tuple[str, ...]
    ptx: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> ArchList:
        """'sm_80,sm_90' / '80 90' / '8.0;9.0+PTX' -> ArchList (order kept, duplicates dropped)."""
        archs: list[str] = []
        ptx: list[str] = []
        for raw in re.split(r"[;,\s]+", spec.strip()):
            if not raw:
                continue
            tok = raw.lower().removeprefix("sm_").removeprefix("sm")
            has_ptx = tok.endswith("+ptx")
            tok = tok.removesuffix("+ptx")
            m = re.fullmatch(r"(\d+)\.(\d)|(\d+)(\d)a?", tok)  # sm_90a: the 9.0 arch-specific target
            if not m:
                raise InvalidOptionError(f"--arch-list: {raw!r} is not a CUDA arch (use 8.0;9.0 or sm_80,sm_90)",
                                         "pass compute capabilities such as 9.0 or 8.0;9.0+PTX")
            major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            item = f"{int(major)}.{minor}"
            if item not in archs:
                archs.append(item)
            if has_ptx and item not in ptx:
                ptx.append(item)
        if not archs:
            raise InvalidOptionError("--arch-list is empty", "pass compute capabilities such as 9.0")
        return cls(tuple(archs), tuple(ptx))

    def __str__(self) -> str:
        return self.torch

    @property
    def torch(self) -> str:
        """TORCH_CUDA_ARCH_LIST form: '8.0;9.0+PTX'."""
        return ";".join(a + ("+PTX" if a in self.ptx else "") for a in self.archs)

    @property
    def numbers(self) -> tuple[str, ...]:
        """'90', '80': the sm_ / compute_ suffixes."""
        return tuple(a.replace(".", "") for a in self.archs)

    @property
    def semicolon_numbers(self) -> str:
        """NVTE_CUDA_ARCHS / FLASH_ATTN_CUDA_ARCHS form: '80;90'."""
        return ";".join(self.numbers)

    def gencodes(self) -> list[str]:
        """nvcc -gencode values: SASS for every arch, plus PTX where asked."""
        out = [f"arch=compute_{n},code=sm_{n}" for n in self.numbers]
        out += [f"arch=compute_{a.replace('.', '')},code=compute_{a.replace('.', '')}" for a in self.ptx]
        return out

    @property
    def tag(self) -> str:
        """The local-version fragment: 'sm90', 'sm80sm90ptx' (PTX archs get 'ptx')."""
        return "".join(f"sm{a.replace('.', '')}" + ("ptx" if a in self.ptx else "") for a in self.archs)

    @property
    def expected_sass(self) -> frozenset[str]:
        return frozenset(self.numbers)

    @property
    def expected_ptx(self) -> frozenset[str]:
        return frozenset(a.replace(".", "") for a in self.ptx)


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
    proc = subprocess.run([str(cuobjdump), flag, str(path)], capture_output=True, text=True, timeout=300)
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
