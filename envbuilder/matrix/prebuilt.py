"""Which prebuilt wheels a kernel package's GitHub release publishes (matrices/prebuilt_wheels.toml).

setup.py of flash-attn, mamba-ssm and causal-conv1d downloads a wheel built for the installed
torch (MAJOR.MINOR), CUDA major, C++ ABI and Python instead of compiling, when its release has
one: a 30-second download instead of a build that takes from minutes to hours. The answer is
yes, no, or unknown (a version whose release workflow was not read).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from envbuilder.canonical import major_minor
from envbuilder.matrix.model import Fact

YES, NO, UNKNOWN = "yes", "no", "unknown"
# How a release's setup.py matches the installed torch: by MAJOR.MINOR (flash-attn, mamba-ssm,
# causal-conv1d), or by the whole torch.__version__ with its local tag, "2.8.0+cu129"
# (transformer-engine-torch), which only a lock that fixes the torch build can know.
TORCH_KEYS = ("major.minor", "local")


@dataclass(frozen=True)
class PrebuiltWheels:
    """One release's published wheels: combos "PYTHON|TORCH_MM|CUDA_MAJOR|ABI" and the CUDA tag
    its wheel names use per CUDA major ("12" from flash-attn 2.7, "122"/"123" before)."""

    package: str
    version: str
    combos: Fact
    name_cuda_tags: Fact
    torch_key: str = TORCH_KEYS[0]

    def _torch(self, torch: str) -> str:
        return torch if self.torch_key == "local" else major_minor(torch)

    def has(self, python: str, torch: str, cuda_major: str, cxx11_abi: bool) -> bool:
        """torch: the torch version, or for torch_key "local" the whole torch.__version__."""
        if not self.combos.known:  # the release workflow at the tag was not read: no combo is known
            return False
        key = f"{python}|{self._torch(torch)}|{cuda_major}|{'TRUE' if cxx11_abi else 'FALSE'}"
        return key in set(self.combos.value)

    def wheel_name(self, python: str, torch: str, cuda_major: str, cxx11_abi: bool) -> str:
        tags = dict(self.name_cuda_tags.value) if self.name_cuda_tags.known else {}
        cu = tags.get(cuda_major, cuda_major)
        py = "cp" + python.replace(".", "")
        dist = self.package.replace("-", "_")
        abi = "TRUE" if cxx11_abi else "FALSE"
        return f"{dist}-{self.version}+cu{cu}torch{self._torch(torch)}cxx11abi{abi}-{py}-{py}-linux_x86_64.whl"


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


def prebuilt_verdict(table: dict[tuple[str, str], PrebuiltWheels], package: str, version: str, python: str,
                     torch: str, cuda_major: str, cxx11_abi: bool, torch_local: str | None = None
                     ) -> PrebuiltVerdict:
    """torch_local: the torch.__version__ the lock installs ("2.11.0+cu130"), when it fixes one."""

    def key(e: PrebuiltWheels) -> str | None:
        return torch_local if e.torch_key == "local" else torch

    entry = table.get((package, version))
    others = tuple(v for (p, v), e in sorted(table.items(), key=lambda kv: Version(kv[0][1]))
                   if p == package and v != version and (t := key(e)) is not None
                   and e.has(python, t, cuda_major, cxx11_abi))
    if entry is None:
        return PrebuiltVerdict(package, version, UNKNOWN, None,
                               f"{package} {version}: release workflow not recorded (matrices/prebuilt_wheels.toml)",
                               others)
    wanted = key(entry)
    if wanted is None:
        return PrebuiltVerdict(package, version, UNKNOWN, None,
                               f"{package} {version} matches the whole torch.__version__, which this lock does not fix "
                               f"(not a PyPI torch); recorded builds: {entry.combos.source}", others)
    torch = wanted
    if not entry.combos.known:
        return PrebuiltVerdict(package, version, UNKNOWN, entry.wheel_name(python, torch, cuda_major, cxx11_abi),
                               f"{package} {version}: the wheel setup.py would look for is named, but which builds the "
                               f"release published is not recorded ({entry.combos.source})", others)
    ok = entry.has(python, torch, cuda_major, cxx11_abi)
    return PrebuiltVerdict(package, version, YES if ok else NO,
                           entry.wheel_name(python, torch, cuda_major, cxx11_abi), entry.combos.source, others)
