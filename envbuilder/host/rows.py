"""Which matrix rows a host can run, and for each excluded row why and how to fix it.

`evaluate_row` works on plain values (driver string, compute capabilities, a row's CUDA,
minimum driver and kernel needs) so it is testable without a matrix; `evaluate_matrix`
feeds it from the loaded matrix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from envbuilder.choices import LockMode
from envbuilder.host.model import HostInfo, sm_key, sm_label, version_key
from envbuilder.matrix import Matrix, Release
from envbuilder.matrix.stacks import row_stacks

RowStatus = Literal["ok", "excluded", "unknown"]


@dataclass(frozen=True)
class KernelNeed:
    what: str  # "flash-attn 2", "TE FP8"
    min_sm: str  # "8.0"
    required: bool  # False: a feature the row still runs without (FP8 -> train in bf16)
    source: str


@dataclass(frozen=True)
class RowNeeds:
    tag: str
    cuda: str | None  # "12.8"; None: the row ships no CUDA code (the smoke profile)
    min_driver: str | None  # Linux driver floor of that CUDA; None: unknown
    kernels: tuple[KernelNeed, ...] = ()
    label: str = ""  # how messages name the row ("nemo v2.3.0", "release 26.04"); default: nemo TAG

    @property
    def named(self) -> str:
        return self.label or f"nemo {self.tag}"


@dataclass(frozen=True)
class HostGpu:
    name: str
    sm: str | None
    datacenter: bool | None = None


@dataclass(frozen=True)
class RowVerdict:
    tag: str
    status: RowStatus
    reasons: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# First CUDA toolkit that can generate code for each architecture: a row whose CUDA is older
# ships no kernels for the GPU ("no kernel image is available for execution on the device").
ARCH_MIN_CUDA: dict[str, tuple[str, str]] = {
    "8.0": ("11.0", "https://docs.nvidia.com/cuda/archive/11.0/cuda-toolkit-release-notes/index.html"),
    "8.6": ("11.1", "https://docs.nvidia.com/cuda/archive/11.1.0/cuda-toolkit-release-notes/index.html"),
    "8.9": ("11.8", "https://docs.nvidia.com/cuda/archive/11.8.0/cuda-toolkit-release-notes/index.html"),
    "9.0": ("11.8", "https://docs.nvidia.com/cuda/archive/11.8.0/cuda-toolkit-release-notes/index.html"),
    "10.0": ("12.8", "https://docs.nvidia.com/cuda/archive/12.8.0/cuda-toolkit-release-notes/index.html"),
    "12.0": ("12.8", "https://docs.nvidia.com/cuda/archive/12.8.0/cuda-toolkit-release-notes/index.html"),
}

# Used only when matrices/build_packages.toml gives no min_sm for the package.
FALLBACK_MIN_SM: dict[str, tuple[str, str]] = {
    "flash-attn": ("8.0", "Dao-AILab/flash-attention:README.md@v2.7.3 (FlashAttention-2: Ampere, Ada, Hopper)"),
}

# Features that do not stop a row from running but are lost on older GPUs.
TE_FP8 = KernelNeed(
    "TE FP8", "8.9", False,
    "NVIDIA/TransformerEngine:transformer_engine/pytorch/fp8.py@v2.2 (check_fp8_support: sm89+)",
)


def _forward_compat_fix(target: str, gpus: list[HostGpu]) -> str:
    consumer = [g.name for g in gpus if g.datacenter is False]
    if consumer:
        return (f"upgrade the driver to {target} (forward compatibility needs a data-center GPU; "
                f"{consumer[0]} is not one)")
    return f"upgrade the driver to {target}, or use forward compatibility (data-center GPUs only)"


def _driver_check(row: RowNeeds, driver: str | None, cuda_driver: str | None,
                  gpus: list[HostGpu]) -> tuple[RowStatus, list[str], list[str]]:
    if row.cuda is None:
        return "ok", [], []
    if driver is not None and row.min_driver is not None:
        if version_key(driver) < version_key(row.min_driver):
            reason = f"driver {driver} < {row.min_driver} needed by CUDA {row.cuda} ({row.named})"
            return "excluded", [reason], [_forward_compat_fix(f"{row.min_driver} or newer", gpus)]
        return "ok", [], []
    if cuda_driver is not None:  # no driver floor known: the CUDA version the driver reports decides
        if version_key(cuda_driver) < version_key(row.cuda):
            reason = f"driver supports CUDA {cuda_driver} < {row.cuda} needed by nemo {row.tag}"
            return "excluded", [reason], [_forward_compat_fix(f"a release supporting CUDA {row.cuda}", gpus)]
        return "ok", [], []
    if driver is None:
        return "unknown", ["driver unknown: no NVIDIA driver detected and no --driver given"], [
            "run on the GPU host, or plan one with --driver X --gpu NAME"]
    return "unknown", [f"minimum driver for CUDA {row.cuda} is unknown (matrices/cuda.toml)"], [
        "add the CUDA release's min_driver_linux to matrices/cuda.toml"]


def _arch_check(row: RowNeeds, gpu: HostGpu) -> str | None:
    if row.cuda is None or gpu.sm is None:
        return None
    from envbuilder.matrix.archs import cuda_lacks_sm

    need = ARCH_MIN_CUDA.get(gpu.sm)
    if need is not None and version_key(row.cuda) < version_key(need[0]):
        return (f"{gpu.name} ({sm_label(gpu.sm)}): CUDA {row.cuda} ({row.named}) has no code for it; "
                f"needs CUDA {need[0]}+")
    lacks = cuda_lacks_sm(row.cuda, gpu.sm)  # every sm, from nvcc's list per release
    if lacks is not None:
        return f"{gpu.name} ({sm_label(gpu.sm)}): {lacks} ({row.named})"
    return None


def evaluate_row(row: RowNeeds, driver: str | None, cuda_driver_version: str | None,
                 gpus: list[HostGpu]) -> RowVerdict:
    """Can a host with this driver and these GPUs run `row`? Pure: no I/O."""
    status, reasons, fixes = _driver_check(row, driver, cuda_driver_version, gpus)
    notes: list[str] = []
    seen: set[tuple[str, str | None]] = set()
    for gpu in gpus:
        if (gpu.name, gpu.sm) in seen or gpu.sm is None:
            continue
        seen.add((gpu.name, gpu.sm))
        arch = _arch_check(row, gpu)
        if arch:
            status = "excluded"
            reasons.append(arch)
            fixes.append("use a row with a newer CUDA")
        short = [k for k in row.kernels if sm_key(gpu.sm) < sm_key(k.min_sm)]
        if not short:
            continue
        text = f"{gpu.name} ({sm_label(gpu.sm)}): " + "; ".join(
            f"{k.what} needs {sm_label(k.min_sm)}+" for k in short)
        if any(k.required for k in short):
            status = "excluded"
            reasons.append(text)
            fixes.append("run on a newer GPU (" + ", ".join(
                f"{sm_label(k.min_sm)}+ for {k.what}" for k in short if k.required) + ")")
        else:
            notes.append(text + " (the row runs without it)")
    return RowVerdict(row.tag, status, reasons, fixes, notes)


def _major(version: str) -> str:
    return version.split(".")[0]


def row_needs(release: Release, matrix: Matrix) -> RowNeeds:
    """A matrix row reduced to what host compatibility depends on."""
    cuda_fact = release.facts.get("cuda")
    cuda = str(cuda_fact.value) if cuda_fact is not None and cuda_fact.known else None
    min_driver = None
    if cuda is not None:
        # the hermetic stack's exact toolkit release when recorded (an update can need a newer driver)
        fact = row_stacks(matrix, release)[LockMode.HERMETIC].min_driver
        min_driver = str(fact.value) if fact.known else None
    kernels: list[KernelNeed] = []
    names = set(matrix.build_packages) | set(FALLBACK_MIN_SM)
    for name in sorted(names):
        row_fact = release.facts.get(name.replace("-", "_"))
        if row_fact is None or row_fact.absent:
            continue  # "none": the row does not ship this package ("unknown" = ships it, version unconfirmed)
        label = f"{name} {_major(str(row_fact.value))}" if row_fact.known else name
        pkg = matrix.build_packages.get(name)
        min_sm = pkg.get("min_sm") if pkg is not None else None
        if min_sm is not None and min_sm.known:
            kernels.append(KernelNeed(label, str(min_sm.value), True, min_sm.source))
        elif name in FALLBACK_MIN_SM:
            sm, source = FALLBACK_MIN_SM[name]
            kernels.append(KernelNeed(label, sm, True, source))
    te = release.facts.get("transformer_engine")
    if te is not None and not te.absent:
        kernels.append(TE_FP8)
    return RowNeeds(release.name, cuda, min_driver, tuple(kernels), release.label)


def host_gpus(host: HostInfo) -> list[HostGpu]:
    return [HostGpu(g.name, g.sm, g.datacenter) for g in host.gpus]


def evaluate_release(host: HostInfo, release: Release, matrix: Matrix) -> RowVerdict:
    """One row against `host` (what `lock` can call to warn about the row it is locking)."""
    return evaluate_row(row_needs(release, matrix), host.driver, host.cuda_driver_version, host_gpus(host))


def evaluate_matrix(host: HostInfo, matrix: Matrix, include_test: bool = False) -> list[RowVerdict]:
    """Every release row (test-only profiles left out unless asked) against `host`."""
    return [evaluate_release(host, r, matrix) for r in matrix.releases if include_test or not r.test_only]
