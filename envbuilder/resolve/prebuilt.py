"""Prefer kernel-package versions whose GitHub release has a prebuilt wheel for the chosen torch.

A stage-2 package with a prebuilt wheel installs in seconds; without one it compiles (minutes
for causal-conv1d, hours for flash-attn on a small machine). When the row's pin has no wheel for
(python, torch MAJOR.MINOR, CUDA major, C++ ABI) and another release inside every accepted range
does, that release is used. --no-source-build turns a remaining compile into an error.
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuilder.errors import SourceBuildRefusedError
from envbuilder.matrix.model import Matrix
from envbuilder.matrix.prebuilt import UNKNOWN, YES, PrebuiltVerdict, prebuilt_verdict

# packages whose setup.py fetches a prebuilt wheel from its GitHub release
PREBUILT_PACKAGES = ("causal-conv1d", "flash-attn", "mamba-ssm", "transformer-engine-torch")
# what a source build costs, for the message (measured or documented; rough by nature)
BUILD_COST = {
    "flash-attn": "3-5 minutes on 64 cores with ninja, hours on a few cores (flash-attention README)",
    "causal-conv1d": "several minutes (1.7.0 had not finished after 500 s on 16 cores, all archs)",
    "mamba-ssm": "time not measured here; needs nvcc",
    "transformer-engine-torch": "time not measured here; needs the CUDA toolkit and cuDNN headers",
}
SOURCE_BUILD_POLICIES = ("allow", "forbid")


def accepted_range(matrix: Matrix, name: str, chosen: dict[str, tuple[str, str]]) -> SpecifierSet | None:
    """Every range the other pins impose on `name` (today: TE's accepted flash-attn range)."""
    if name == "flash-attn" and "transformer-engine" in chosen:
        te = matrix.transformer_engine.get(chosen["transformer-engine"][0])
        if te is not None and te.flash_attn.known:
            return SpecifierSet(str(te.flash_attn.value))
    return None


def prefer_prebuilt(matrix: Matrix, chosen: dict[str, tuple[str, str]], overrides: dict[str, str], python: str,
                    torch: str | None, cuda: str | None, policy: str, torch_local: str | None = None
                    ) -> tuple[dict[str, tuple[str, str]], tuple[PrebuiltVerdict, ...]]:
    """(chosen with preferred versions, one verdict per stage-2 kernel package).

    torch_local: the torch.__version__ the lock installs ("2.11.0+cu130"), when it fixes the build;
    releases that match the whole version (transformer-engine-torch) are "unknown" without it.
    """
    if torch is None or cuda is None:
        return chosen, ()
    info = matrix.torch.get(torch)
    abi = bool(info.cxx11_abi.value) if info is not None and info.cxx11_abi.known else True
    major = cuda.split(".")[0]
    out = dict(chosen)
    verdicts: list[PrebuiltVerdict] = []
    for name in PREBUILT_PACKAGES:
        key = "transformer-engine" if name == "transformer-engine-torch" else name
        if key not in out:
            continue
        version, prov = out[key]
        verdict = prebuilt_verdict(matrix.prebuilt_wheels, name, version, python, torch, major, abi, torch_local)
        if verdict.answer != YES and key not in overrides:
            spec = accepted_range(matrix, name, out)
            fits = [v for v in verdict.versions_with_wheel if spec is not None and Version(v) in spec]
            if fits:
                best = max(fits, key=Version)
                out[key] = (best, f"prebuilt:{name} {best} has a wheel for torch {torch} (cu{major}, "
                                  f"cp{python.replace('.', '')}), {version} has none; {prov}")
                verdict = prebuilt_verdict(matrix.prebuilt_wheels, name, best, python, torch, major, abi, torch_local)
        if verdict.answer != YES and policy == "forbid":
            what = "no prebuilt wheel" if verdict.answer != UNKNOWN else "no known prebuilt wheel"
            alts = ", ".join(verdict.versions_with_wheel[-3:])
            raise SourceBuildRefusedError(
                f"--no-source-build: {name} {verdict.version} has {what} for torch {torch}, CUDA {major}, "
                f"Python {python} ({verdict.source}); it would compile ({BUILD_COST.get(name, 'time unknown')})",
                "drop --no-source-build" + (f", or --set {key}==VERSION with a wheel ({alts})" if alts else ""))
        verdicts.append(verdict)
    return out, tuple(verdicts)
