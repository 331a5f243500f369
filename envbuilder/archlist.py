"""The GPU architecture list a build compiles for: parsed once into `ArchList`, spelled per consumer.

A request such as `8.0;9.0+PTX` means: SASS for sm_80 and sm_90, PTX for compute_90, nothing else.
Every stage reads it through this one type: the `--arch-list` option of lock, build and wheels, the
lock record (`inputs.arch_list`), the Dockerfile's build arguments, the wheel cache key and the
certify arch check, which also reads torch's own list (`torch.cuda.get_arch_list()`) with it.
Which archs exist and which a CUDA release compiles for, and the default list, are matrix facts
(envbuilder.matrix.archs, matrices/cuda_archs.toml).

Standard library only: `python -m envbuilder.certify` parses the lock's list inside the environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from envbuilder.errors import InvalidOptionError

_TOKEN = re.compile(r"(\d+)\.(\d)|(\d+)(\d)[af]?")  # 9.0 | 90 | 90a (arch-specific) | 100f (family)


@dataclass(frozen=True)
class ArchList:
    """Compute capabilities as torch spells them ('8.0', '9.0'), each with or without PTX."""

    archs: tuple[str, ...]
    ptx: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str | Iterable[str], flag: str = "--arch-list") -> ArchList:
        """'sm_80,sm_90' / '80 90' / '8.0;9.0+PTX' / torch's ['sm_80', 'compute_90'] -> ArchList
        (order kept, duplicates dropped; compute_XY means PTX for X.Y)."""
        raws = re.split(r"[;,\s]+", spec.strip()) if isinstance(spec, str) else [str(x) for x in spec]
        archs: list[str] = []
        ptx: list[str] = []
        for raw in raws:
            if not raw:
                continue
            tok = raw.lower()
            has_ptx = tok.endswith("+ptx") or tok.startswith("compute_")
            tok = tok.removesuffix("+ptx").removeprefix("compute_").removeprefix("sm_").removeprefix("sm")
            m = _TOKEN.fullmatch(tok)
            if not m:
                raise InvalidOptionError(f"{flag}: {raw!r} is not a CUDA arch (use 8.0;9.0 or sm_80,sm_90)",
                                         "pass compute capabilities such as 9.0 or 8.0;9.0+PTX")
            major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            item = f"{int(major)}.{minor}"
            if item not in archs:
                archs.append(item)
            if has_ptx and item not in ptx:
                ptx.append(item)
        if not archs:
            raise InvalidOptionError(f"{flag} is empty", "pass compute capabilities such as 9.0")
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
