"""Which prebuilt wheels a kernel package's GitHub release publishes (matrices/prebuilt_wheels.toml).

setup.py of flash-attn, mamba-ssm and causal-conv1d downloads a wheel built for the installed
torch (MAJOR.MINOR), CUDA major, C++ ABI and Python instead of compiling, when its release has
one: a 30-second download instead of a build that takes from minutes to hours. The answer is
yes, no, or unknown (a version whose release workflow was not read).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from envbuilder.matrix.model import Fact

YES, NO, UNKNOWN = "yes", "no", "unknown"


@dataclass(frozen=True)
class PrebuiltWheels:
    """One release's published wheels: combos "PYTHON|TORCH_MM|CUDA_MAJOR|ABI" and the CUDA tag
    its wheel names use per CUDA major ("12" from flash-attn 2.7, "122"/"123" before)."""

    package: str
    version: str
    combos: Fact
    name_cuda_tags: Fact

    def has(self, python: str, torch: str, cuda_major: str, cxx11_abi: bool) -> bool:
        key = f"{python}|{_major_minor(torch)}|{cuda_major}|{'TRUE' if cxx11_abi else 'FALSE'}"
        return key in set(self.combos.value)

    def wheel_name(self, python: str, torch: str, cuda_major: str, cxx11_abi: bool) -> str:
        tags = dict(self.name_cuda_tags.value) if self.name_cuda_tags.known else {}
        cu = tags.get(cuda_major, cuda_major)
        py = "cp" + python.replace(".", "")
        dist = self.package.replace("-", "_")
        abi = "TRUE" if cxx11_abi else "FALSE"
        return f"{dist}-{self.version}+cu{cu}torch{_major_minor(torch)}cxx11abi{abi}-{py}-{py}-linux_x86_64.whl"


@dataclass(frozen=True)
class PrebuiltVerdict:
    package: str
    version: str
    answer: str  # yes / no / unknown
    wheel: str | None  # the wheel name setup.py looks for (when the release is recorded)
    source: str
    versions_with_wheel: tuple[str, ...] = ()  # recorded versions that do have the wheel

    def to_dict(self) -> dict[str, object]:
        return {"package": self.package, "version": self.version, "prebuilt_wheel": self.answer,
                "wheel": self.wheel, "source": self.source, "versions_with_wheel": list(self.versions_with_wheel)}


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def prebuilt_verdict(table: dict[tuple[str, str], PrebuiltWheels], package: str, version: str, python: str,
                     torch: str, cuda_major: str, cxx11_abi: bool) -> PrebuiltVerdict:
    entry = table.get((package, version))
    others = tuple(v for (p, v), e in sorted(table.items(), key=lambda kv: Version(kv[0][1]))
                   if p == package and v != version and e.has(python, torch, cuda_major, cxx11_abi))
    if entry is None:
        return PrebuiltVerdict(package, version, UNKNOWN, None,
                               f"{package} {version}: release workflow not recorded (matrices/prebuilt_wheels.toml)",
                               others)
    ok = entry.has(python, torch, cuda_major, cxx11_abi)
    return PrebuiltVerdict(package, version, YES if ok else NO,
                           entry.wheel_name(python, torch, cuda_major, cxx11_abi), entry.combos.source, others)
