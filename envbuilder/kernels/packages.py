"""How each stage-2 package takes an arch list, and how much memory one compile job needs.

Three ways a setup.py picks its archs:
  * its own variable (read here from the unpacked setup.py / build_tools, so a new release that
    renames it is noticed): flash-attn's FLASH_ATTN_CUDA_ARCHS, Transformer Engine's NVTE_CUDA_ARCHS;
  * torch's TORCH_CUDA_ARCH_LIST, when the extension passes no arch flags itself;
  * literal `-gencode` flags (causal-conv1d 1.7.0, mamba-ssm 2.3.2.post1): patched (patch.py).
TORCH_CUDA_ARCH_LIST is always set too: harmless where ignored, right where used.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from envbuilder.kernels.archs import ArchList

# GB of RAM one compile job (MAX_JOBS=1) needs at peak.
# flash-attn: its README says "ninja ... MAX_JOBS=4 ... with less than 96GB of RAM", and its nvcc
# processes reach ~5-7 GB each (Dao-AILab/flash-attention:README.md "MAX_JOBS"); the others compile a
# handful of small .cu files or C++ only: 2 GB is a measured upper bound for causal-conv1d here.
JOB_MEMORY_GB: dict[str, float] = {"flash-attn": 6.0}
DEFAULT_JOB_MEMORY_GB = 2.0

_ARCH_ENV_READ = re.compile(r"""getenv\(\s*["']([A-Z0-9_]*CUDA_ARCHS?)["']""")


@dataclass(frozen=True)
class ArchKnobs:
    """The environment that carries the arch list into one package's build."""

    env: dict[str, str]
    own_variable: str | None     # the package's own variable, when it has one
    hardcoded: bool              # setup.py holds literal gencodes (needs the patch)

    def to_dict(self) -> dict[str, object]:
        return {"env": self.env, "own_variable": self.own_variable, "hardcoded_gencodes": self.hardcoded}


def own_arch_variable(src: Path) -> str | None:
    """The *_CUDA_ARCHS variable the sources read (setup.py, build_tools/*.py), if any."""
    for f in [src / "setup.py", *sorted((src / "build_tools").glob("*.py"))]:
        if f.is_file():
            m = _ARCH_ENV_READ.search(f.read_text(encoding="utf-8", errors="replace"))
            if m and m.group(1) != "TORCH_CUDA_ARCH_LIST":
                return m.group(1)
    return None


def arch_knobs(src: Path, archs: ArchList) -> ArchKnobs:
    from envbuilder.kernels.patch import hardcoded_gencodes

    env = {"TORCH_CUDA_ARCH_LIST": archs.torch}
    own = own_arch_variable(src)
    if own:
        env[own] = archs.semicolon_numbers
    setup = src / "setup.py"
    literal = bool(setup.is_file() and hardcoded_gencodes(setup.read_text(encoding="utf-8", errors="replace")))
    return ArchKnobs(env, own, literal and own is None)


def available_memory_gb() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / (1024 * 1024)
    except OSError:
        pass
    return 8.0


def default_jobs(package: str, cores: int | None = None, memory_gb: float | None = None) -> int:
    """Parallel compile jobs: no more than the cores, nor than the RAM allows for this package."""
    cores = cores or os.cpu_count() or 1
    memory_gb = available_memory_gb() if memory_gb is None else memory_gb
    per_job = JOB_MEMORY_GB.get(package, DEFAULT_JOB_MEMORY_GB)
    return max(1, min(cores, int(memory_gb // per_job)))
