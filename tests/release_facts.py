"""Facts about Megatron-Bridge releases, and the minimal release trees `matrix derive` reads, generated
from them at test time.

Nothing here is an upstream file. Each release is a handful of facts read from the real tags (versions,
package names and where upstream took them from, the base image, the container a release ships in, the
submodule commit): the same facts matrices/upstream/*.toml and matrices/mbridge.toml record. `write_release`
renders them into files of the formats derive parses (pyproject.toml, uv.lock, .python-version, .gitmodules,
docs/versions1.json, docs/releases/software-versions.md, docker/Dockerfile.ci, docker/common/install.sh,
src/megatron/bridge/package_info.py), holding only the fields derive reads. The locks name the packages the
tests assert on and a few more, with a dependency graph of our own that puts each where derive's closure
walk needs it (not upstream's graph); comments on override lines are our own short wording.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PYPI = "https://pypi.org/simple"
NVIDIA = "https://pypi.nvidia.com/"
NEVER = "sys_platform == 'never'"
S390X, NOT_S390X = "platform_machine == 's390x'", "platform_machine != 's390x'"


@dataclass(frozen=True)
class Pkg:
    """One [[package]] of a generated uv.lock.

    source: "pypi", "nvidia" (NVIDIA's index), "git:URL@REF#COMMIT", "editable:PATH" (a workspace member:
    uv records no version). deps: "name", "name[extra,extra]" or "name!never" (an edge upstream marks never).
    """

    name: str
    version: str | None
    source: str = "pypi"
    deps: tuple[str, ...] = ()
    extras: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    markers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Release:
    tag: str
    docs_versions: tuple[tuple[str, str | None], ...]  # docs/versions1.json: (version, container or None)
    tables: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # container -> table rows
    package_info: tuple[int, int, int, str] | None = None  # src/megatron/bridge/package_info.py
    requires_python: str | None = None
    python: str | None = None  # .python-version
    base_image: str | None = None  # docker/Dockerfile.ci ARG BASE_IMAGE
    cuda_repo_os: str | None = None  # the CUDA apt repository install.sh uses ("ubuntu2404")
    overrides: tuple[tuple[str, str], ...] = ()  # [tool.uv] override-dependencies: (requirement, comment)
    lock: tuple[Pkg, ...] = ()
    lock_markers: tuple[str, ...] = ()  # uv.lock's top-level resolution-markers
    submodule: bool = False  # 3rdparty/Megatron-LM (.gitmodules; release_repo adds the gitlink)

    @property
    def complete(self) -> bool:
        return self.requires_python is not None


# --- the facts ----------------------------------------------------------------------------------------

TE_060 = "4329ff84bfbdaa778a33cba02a15fb0807c64689"
TE_040 = "71bbefbf153418f943640df0f7373625dc93fa46"
FHT_060 = "1cc807efbd6cc001df359822d60bf6052dd66859"
EO_060 = "1effa026ff096b7fa1063ca2fba19d98be6e6cdf"
EO_040 = "d5363b4a418128cd8111983b191c4b8869a9766b"
NVRX_040 = "15a851565a4ce846c04431ecb0cf09903ab4837e"

# comments of our own on override lines: derive carries a line's comment into the row, and a CVE id
# makes the override a security one
CVE_URLLIB3 = "CVE-2026-21441"
CVE_MLFLOW = "CVE-2025-15031"
CVE_CODEC = "CVE: codec left out of the image"
FHT_WHY = "the PyPI sdist is incomplete; built from the git tag"
CUTLASS_WHY = "the base image provides it"

# docs/versions1.json as at each tag: the Megatron-Bridge version -> NeMo Framework container
DOCS_060 = (("0.6.0", "26.08"), ("0.5.1", "26.06.01"), ("0.5.0", "26.06"), ("0.4.2", "26.04.01"), ("0.4.0", "26.04"),
            ("0.3.1", "26.02.01"), ("0.3.0", "26.02"))
DOCS_042 = (("0.4.0", "26.04"), ("0.3.1", "26.02.01"), ("0.3.0", "26.02"))
DOCS_040 = (("0.4.0", None), ("0.3.1", None), ("0.3.0", None))  # v0.4.0 itself names no container yet

TABLE_2602 = (("PyTorch", "2.10.0a0"), ("Megatron Core", "main:0.16.0"), ("Transformer Engine", "2.12"),
              ("Megatron-Bridge", "0.3.0"), ("NeMo Run", "0.8.0"), ("NVRX", "0.5.0"), ("CUDA", "13.0.2"),
              ("cuDNN", "9.18.0.50"))
TABLE_2604 = (("PyTorch", "2.11.0a0+eb65b36914.nv26.02"), ("Megatron Core", "0.17.0"),
              ("Transformer Engine", "2.14+71bbefb"), ("Megatron-Bridge", "0.4.0"), ("NeMo Run", "0.9.0"),
              ("Nvidia-ModelOpt", "0.43.0"), ("CUDA", "13.1.1"), ("cuDNN", "9.20.0.48-1"))

OVERRIDES_060 = (
    (f"av; {NEVER}", CVE_CODEC), (f"imageio; {NEVER}", CVE_CODEC), (f"imageio-ffmpeg; {NEVER}", CVE_CODEC),
    (f"torch; {NEVER}", ""), (f"torchvision; {NEVER}", ""), (f"triton; {NEVER}", ""),
    (f"transformer-engine @ git+https://github.com/NVIDIA/TransformerEngine.git@{TE_060}", ""),
    ("mlflow>=3.15.1", CVE_MLFLOW), ("cachetools>=5.0.0", ""), ("cryptography>=43.0.0,<47", ""),
    ("nvidia-modelopt==0.46.0rc1", ""), ("urllib3>=2.6.3", CVE_URLLIB3),
    (f"nvidia-cutlass-dsl[cu13]; {NEVER}", CUTLASS_WHY),
    ("fast-hadamard-transform @ git+https://github.com/Dao-AILab/fast-hadamard-transform.git@v1.1.0", FHT_WHY),
)
OVERRIDES_040 = (
    (f"torch; {NEVER}", ""), (f"torchvision; {NEVER}", ""), (f"triton; {NEVER}", ""),
    (f"transformer-engine @ git+https://github.com/NVIDIA/TransformerEngine.git@{TE_040}", ""),
    ("mlflow>=3.9.0", CVE_MLFLOW), ("cachetools>=5.0.0", ""), ("cryptography>=43.0.0,<47", ""),
    ("nvidia-modelopt>=0.42.0a0", ""), ("urllib3>=2.6.3", CVE_URLLIB3),
)

LOCK_060 = (
    Pkg("megatron-bridge", None, "editable:.",
        deps=("megatron-core[dev,mlm]", "torch", "nvidia-resiliency-ext", "fast-hadamard-transform", "mlflow",
              "av!never", "imageio!never"),
        extras={"te": ("transformer-engine",), "ssm": ("causal-conv1d", "mamba-ssm"), "recipes": ("nemo-run",)}),
    Pkg("megatron-core", None, "editable:3rdparty/Megatron-LM", deps=("numpy", "packaging", "torch"),
        extras={"dev": ("emerging-optimizers", "nvidia-modelopt", "multi-storage-client", "nvidia-cutlass-dsl")}),
    Pkg("torch", "2.13.0", deps=("triton",)),
    Pkg("triton", "3.7.1"),
    Pkg("transformer-engine", "2.17.1+4329ff84", f"git:https://github.com/NVIDIA/TransformerEngine.git@{TE_060}"
        f"#{TE_060}", deps=("einops", "torch")),
    Pkg("mamba-ssm", "2.3.2.post1", deps=("causal-conv1d", "torch")),
    Pkg("causal-conv1d", "1.6.2.post1", deps=("torch",)),
    Pkg("nemo-run", "0.10.0"),
    Pkg("nvidia-resiliency-ext", "0.6.0", "nvidia", deps=("packaging",)),
    Pkg("fast-hadamard-transform", "1.1.0",
        f"git:https://github.com/Dao-AILab/fast-hadamard-transform.git@v1.1.0#{FHT_060}", deps=("torch",)),
    Pkg("emerging-optimizers", "0.2.0", f"git:https://github.com/NVIDIA-NeMo/Emerging-Optimizers.git@v0.2.0#{EO_060}",
        deps=("torch",)),
    Pkg("nvidia-modelopt", "0.46.0rc1", "nvidia", deps=("numpy",)),
    Pkg("multi-storage-client", "0.51.0", "nvidia"),
    Pkg("nvidia-cutlass-dsl", "4.6.1", "nvidia"),
    Pkg("nvidia-sphinx-theme", "0.0.9.post1", "nvidia"),  # a docs dependency: outside the closure
    Pkg("mlflow", "3.15.1", deps=("cryptography", "urllib3")),
    Pkg("cryptography", "46.0.7"), Pkg("urllib3", "2.7.0"), Pkg("einops", "0.9.0.dev0"), Pkg("numpy", "1.26.4"),
    Pkg("packaging", "26.2"), Pkg("av", "18.0.0"), Pkg("imageio", "2.37.4"),
)
LOCK_040 = (
    Pkg("megatron-bridge", None, "editable:.",
        deps=("megatron-core[dev,mlm]", "torch", "transformer-engine", "mamba-ssm", "causal-conv1d",
              "nvidia-resiliency-ext", "mlflow", "imageio"),
        extras={"recipes": ("nemo-run",)}),
    Pkg("megatron-core", None, "editable:3rdparty/Megatron-LM", deps=("numpy", "packaging", "torch"),
        extras={"dev": ("emerging-optimizers", "nvidia-modelopt", "multi-storage-client")}),
    Pkg("torch", "2.11.0", deps=("triton",)),
    Pkg("triton", "3.6.0"),
    Pkg("transformer-engine", "2.14.0+71bbefbf", f"git:https://github.com/NVIDIA/TransformerEngine.git@{TE_040}"
        f"#{TE_040}", deps=("einops", "torch")),
    Pkg("mamba-ssm", "2.3.1", deps=("causal-conv1d", "torch")),
    Pkg("causal-conv1d", "1.6.1", deps=("torch",)),
    Pkg("nemo-run", "0.8.1"),
    Pkg("nvidia-resiliency-ext", "0.6.0.dev33+15a8515",
        f"git:https://github.com/NVIDIA/nvidia-resiliency-ext.git@{NVRX_040}#{NVRX_040}", deps=("packaging",)),
    Pkg("emerging-optimizers", "0.1.0", f"git:https://github.com/NVIDIA-NeMo/Emerging-Optimizers.git@v0.1.0#{EO_040}",
        deps=("torch",)),
    Pkg("nvidia-modelopt", "0.43.0rc4", "nvidia", deps=("numpy",)),
    Pkg("multi-storage-client", "0.46.0", "nvidia"),
    Pkg("nvidia-sphinx-theme", "0.0.9.post1", "nvidia"),
    Pkg("mlflow", "3.11.1", deps=("cryptography", "urllib3")),
    Pkg("cryptography", "46.0.7"), Pkg("urllib3", "2.6.3"), Pkg("einops", "0.8.2"), Pkg("packaging", "26.0"),
    Pkg("imageio", "2.37.3"),
    # the lock forks on s390x: the x86_64 side is upstream's numpy; the s390x side is a version of our own
    Pkg("numpy", "1.26.4", markers=(NOT_S390X,)), Pkg("numpy", "1.26.0", markers=(S390X,)),
)

RELEASES: dict[str, Release] = {
    "v0.6.0": Release("v0.6.0", DOCS_060, package_info=(0, 6, 1, ""), requires_python=">=3.12,<3.13", python="3.12",
                      base_image="nvcr.io/nvidia/pytorch:26.06-py3", cuda_repo_os="ubuntu2404",
                      overrides=OVERRIDES_060, lock=LOCK_060, submodule=True),
    "v0.4.0": Release("v0.4.0", DOCS_040, {"26.02": TABLE_2602}, package_info=(0, 4, 0, ""),
                      requires_python=">=3.12,<3.13", python="3.12", base_image="nvcr.io/nvidia/pytorch:26.02-py3",
                      cuda_repo_os="ubuntu2404", overrides=OVERRIDES_040, lock=LOCK_040,
                      lock_markers=(NOT_S390X, S390X), submodule=True),
    # v0.4.2: only its docs, the first tag that names 26.04's container and publishes its table
    "v0.4.2": Release("v0.4.2", DOCS_042, {"26.04": TABLE_2604, "26.02": TABLE_2602}),
}

# Megatron-LM at the commit each release's 3rdparty/Megatron-LM pins: megatron/core/package_info.py's version
MEGATRON_LM: dict[str, tuple[str, tuple[int, int, int, str]]] = {
    "v0.4.0": ("d7288711ba278d160d2a5a22c099915c9fe1395c", (0, 17, 0, "rc0")),
    "v0.6.0": ("cd4afffa648426a959dc7cb1e24b5ce7d0c3ff54", (0, 19, 0, "")),
}


# --- rendering ----------------------------------------------------------------------------------------


def package_info(version: tuple[int, int, int, str]) -> str:
    major, minor, patch, pre = version
    return f"MAJOR = {major}\nMINOR = {minor}\nPATCH = {patch}\nPRE_RELEASE = {pre!r}\n"


def _s(text: str) -> str:
    return json.dumps(text)


def _source(src: str) -> str:
    if src == "pypi":
        return f"{{ registry = {_s(PYPI)} }}"
    if src == "nvidia":
        return f"{{ registry = {_s(NVIDIA)} }}"
    kind, _, rest = src.partition(":")
    if kind == "git":
        url, _, ref_commit = rest.rpartition("@")
        ref, _, commit = ref_commit.partition("#")
        return f"{{ git = {_s(f'{url}?rev={ref}#{commit}')} }}"
    if kind == "editable":
        return f"{{ editable = {_s(rest)} }}"
    raise ValueError(src)


def _dep(spec: str) -> str:
    name, never = spec.removesuffix("!never"), spec.endswith("!never")
    parts = []
    if "[" in name:
        name, extra = name.rstrip("]").split("[")
        parts.append(f"extra = [{', '.join(_s(e) for e in extra.split(','))}]")
    parts.insert(0, f"name = {_s(name)}")
    if never:
        parts.append(f"marker = {_s(NEVER)}")
    return "    { " + ", ".join(parts) + " },"


def uv_lock(release: Release) -> str:
    lines = ["version = 1", "revision = 3", 'requires-python = "==3.12.*"']
    if release.lock_markers:
        lines += ["resolution-markers = [", *(f"    {_s(m)}," for m in release.lock_markers), "]"]
    for p in release.lock:
        lines += ["", "[[package]]", f"name = {_s(p.name)}"]
        if p.version is not None:
            lines.append(f"version = {_s(p.version)}")
        lines.append(f"source = {_source(p.source)}")
        if p.markers:
            lines += ["resolution-markers = [", *(f"    {_s(m)}," for m in p.markers), "]"]
        if p.deps:
            lines += ["dependencies = [", *(_dep(d) for d in p.deps), "]"]
        if p.extras:
            lines += ["", "[package.optional-dependencies]"]
            for extra, deps in p.extras.items():
                lines += [f"{extra} = [", *(_dep(d) for d in deps), "]"]
    return "\n".join(lines) + "\n"


def pyproject(release: Release) -> str:
    lines = ["[project]", 'name = "megatron-bridge"', 'dynamic = ["version"]',
             f"requires-python = {_s(release.requires_python or '')}", "", "[tool.uv]", "override-dependencies = ["]
    for req, comment in release.overrides:
        lines.append(f"    {_s(req)}," + (f"  # {comment}" if comment else ""))
    lines.append("]")
    return "\n".join(lines) + "\n"


def versions_json(release: Release) -> str:
    entries: list[dict[str, str]] = [{"version": "nightly"}]
    for version, container in release.docs_versions:
        entries.append({"name": f"{version} · {container}", "version": version} if container else {"version": version})
    return json.dumps(entries, indent=2, ensure_ascii=False) + "\n"


def software_versions(release: Release) -> str:
    out = ["# Component versions", ""]
    for container, rows in release.tables.items():
        out += [f"## NeMo Framework {container}", "", "| Software Component | Version |", "|---|---|",
                *(f"| {name} | {version} |" for name, version in rows), ""]
    return "\n".join(out)


def write_release(dst: Path, release: Release) -> Path:
    """The release's tree under dst (created), every file derive reads at that tag."""
    files: dict[str, str] = {"docs/versions1.json": versions_json(release)}
    if release.tables:
        files["docs/releases/software-versions.md"] = software_versions(release)
    if release.complete:
        files["pyproject.toml"] = pyproject(release)
        files["uv.lock"] = uv_lock(release)
        if release.python:
            files[".python-version"] = release.python + "\n"
        if release.package_info:
            files["src/megatron/bridge/package_info.py"] = package_info(release.package_info)
        if release.base_image:
            files["docker/Dockerfile.ci"] = f"ARG BASE_IMAGE={release.base_image}\nFROM ${{BASE_IMAGE}}\n"
        if release.cuda_repo_os:
            files["docker/common/install.sh"] = (
                "#!/bin/bash\nset -euo pipefail\n"
                f"REPO=https://developer.download.nvidia.com/compute/cuda/repos/{release.cuda_repo_os}/x86_64/\n"
                'echo "CUDA apt repository: $REPO"\n')
    if release.submodule:
        files[".gitmodules"] = ('[submodule "3rdparty/Megatron-LM"]\n\tpath = 3rdparty/Megatron-LM\n'
                                "\turl = https://github.com/NVIDIA/Megatron-LM.git\n")
    for path, text in files.items():
        (dst / path).parent.mkdir(parents=True, exist_ok=True)
        (dst / path).write_text(text)
    return dst


def write_releases(tmp: Path, *tags: str) -> dict[str, Path]:
    """Each tag's generated tree under tmp/trees/TAG (all of RELEASES when no tag is named)."""
    return {tag: write_release(tmp / "trees" / tag, RELEASES[tag]) for tag in (tags or tuple(RELEASES))}
