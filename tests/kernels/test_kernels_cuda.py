"""Arch handling with the real CUDA compiler, and the gencode patch on the real sdists, without a GPU.

nvcc and cuobjdump come from NVIDIA's PyPI wheels (scripts/cuda-tools.sh, cached under build/);
the sdists are PyPI's own (causal-conv1d 1.7.0, mamba-ssm 2.3.2.post1 hard-code nine gencodes;
mamba-ssm 2.2.0 ships no CUDA sources), fetched by sha256 into the envbuilder download cache.
Nothing is compiled from the sdists: they are unpacked, patched and checked.
"""

from __future__ import annotations

import ast
import subprocess
import zipfile
from pathlib import Path

import pytest

from envbuilder.errors import ArchMismatchError, NoCudaSourcesError
from envbuilder.kernels.archs import ArchList, check_archs, object_archs
from envbuilder.kernels.files import cache_root, fetch
from envbuilder.kernels.packages import arch_knobs
from envbuilder.kernels.patch import hardcoded_gencodes, patch_sdist_tree
from envbuilder.kernels.pipeline import device_sources, unpack_sdist, wheel_archs
from envbuilder.lock.uvlock import LockedFile

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

# (url, sha256, size) as PyPI's simple index lists them
SDISTS = {
    "causal-conv1d-1.7.0": LockedFile(
        "https://files.pythonhosted.org/packages/f4/d1/eba27735f31bd5527d39a3c7f693e6ded7b844cab275db719a15ad37b6cd/"
        "causal_conv1d-1.7.0.tar.gz", "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b", 30328),
    "mamba-ssm-2.3.2.post1": LockedFile(
        "https://files.pythonhosted.org/packages/af/48/aa7bec0efc7453fa0512276c0069c854bf684219050294266534bfef34bb/"
        "mamba_ssm-2.3.2.post1.tar.gz", "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028", 216439),
    "mamba-ssm-2.2.0": LockedFile(
        "https://files.pythonhosted.org/packages/9c/e2/1a2e2c41d9622e0237376978bd20a5f89dd5173a7678f5b32cc1f26a823e/"
        "mamba_ssm-2.2.0.tar.gz", "31011c7db926d2f0552554f82b787b8e530b758e6aad2504f676b535395c3e07", 85389),
    "transformer-engine-torch-2.14.0": LockedFile(
        "https://files.pythonhosted.org/packages/39/c4/7ca9c7c9723bedfe4fa32ef1016d194dda2e6247b9e3257f786145d018ba/"
        "transformer_engine_torch-2.14.0.tar.gz", "e29d4ddb951c3a54357826fe6acbd2ab2192764a194fa07e1e5241cad9a65910",
        303576),
}

KERNEL = r"""
__global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
void launch(float* x, int n) { add_one<<<(n + 255) / 256, 256>>>(x, n); }
"""


def _compile(cuda_home: Path, archs: ArchList, out: Path) -> Path:
    src = out / "kernel.cu"
    out.mkdir(parents=True, exist_ok=True)
    src.write_text(KERNEL)
    cmd = [str(cuda_home / "bin" / "nvcc"), "-c", "-Xcompiler", "-fPIC", str(src), "-o", str(out / "kernel.o")]
    for g in archs.gencodes():
        cmd += ["-gencode", g]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    so = out / "libkernel.so"
    subprocess.run(["g++", "-shared", str(out / "kernel.o"), "-o", str(so)], check=True, timeout=120)
    return so


def test_cuobjdump_reads_back_the_compiled_archs(cuda_home: Path, tmp_path: Path) -> None:
    tool = cuda_home / "bin" / "cuobjdump"
    asked = ArchList.parse("8.0;9.0+PTX")
    so = _compile(cuda_home, asked, tmp_path / "a")
    found = object_archs(so, tool, tmp_path / "a")
    assert found.sass == ("80", "90") and found.ptx == ("90",)
    check_archs("demo", asked, [found])  # exactly what was asked: passes


def test_arch_check_catches_a_mismatch(cuda_home: Path, tmp_path: Path) -> None:
    tool = cuda_home / "bin" / "cuobjdump"
    so = _compile(cuda_home, ArchList.parse("8.0"), tmp_path / "b")
    with pytest.raises(ArchMismatchError) as exc:
        check_archs("demo", ArchList.parse("9.0"), [object_archs(so, tool, tmp_path / "b")])
    assert "libkernel.so" in exc.value.cause and "80" in exc.value.cause


def test_wheel_archs_lists_every_so_in_a_wheel(cuda_home: Path, tmp_path: Path) -> None:
    so = _compile(cuda_home, ArchList.parse("9.0"), tmp_path / "c")
    whl = tmp_path / "demo-1.0-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.write(so, "demo/_C.so")
        zf.writestr("demo/__init__.py", "")
    found = wheel_archs(whl, tmp_path / "work", cuda_home)
    assert [(o.path, o.sass, o.ptx) for o in found] == [("demo/_C.so", ("90",), ())]


def _sdist(name: str) -> Path:
    """The real sdist, downloaded once by its sha256 into the test cache under build/."""
    return fetch(SDISTS[name], cache_root(REPO / "build" / "test-cache"))[0]


@pytest.mark.parametrize("name", ["causal-conv1d-1.7.0", "mamba-ssm-2.3.2.post1"])
def test_hardcoded_gencodes_patched_on_the_real_sdist(name: str, tmp_path: Path) -> None:
    src = unpack_sdist(_sdist(name), tmp_path / "src")
    before = (src / "setup.py").read_text()
    assert len(hardcoded_gencodes(before)) == 9  # sm_75 .. sm_121
    knobs = arch_knobs(src, ArchList.parse("9.0"))
    assert knobs.hardcoded and knobs.own_variable is None
    patch = patch_sdist_tree(src, ArchList.parse("9.0"))
    assert patch is not None and len(patch.removed) == 9
    after = (src / "setup.py").read_text()
    ast.parse(after)
    added = [ln[1:] for ln in patch.diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln for ln in patch.diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert removed == [] and len(added) == 3
    assert added[-1].strip() == "cc_flag += ['-gencode', 'arch=compute_90,code=sm_90']"
    # the new lines close the gencode block at its own indentation, inside the CUDA branch
    last_literal = max(i for i, ln in enumerate(after.splitlines()) if "code=sm_121" in ln)
    block = after.splitlines()[last_literal + 1: last_literal + 4]
    assert block == [a.rstrip("\n") for a in added]
    assert all(ln.startswith(" " * 8) and not ln.startswith(" " * 9) for ln in block)
    # a second run on a patched tree is refused instead of stacking patches
    with pytest.raises(ValueError):
        patch_sdist_tree(src, ArchList.parse("9.0"))


def test_sdist_without_cuda_sources_is_an_error() -> None:
    with pytest.raises(NoCudaSourcesError) as exc:
        device_sources("mamba-ssm", "2.2.0", _sdist("mamba-ssm-2.2.0"))
    assert exc.value.exit_code == 62 and "--set mamba-ssm==" in (exc.value.fix or "")
    assert device_sources("mamba-ssm", "2.3.2.post1", _sdist("mamba-ssm-2.3.2.post1"))[0] >= 13  # 9 .cu + 4 .cuh


def test_headers_only_sdist_has_no_device_code() -> None:
    """transformer-engine-torch ships .cuh headers but no .cu: its wheel holds host code only, so the arch
    check must not demand GPU code from it (the kernels are in transformer-engine-cuXX's library)."""
    n_cuda, n_cu = device_sources("transformer-engine-torch", "2.14.0", _sdist("transformer-engine-torch-2.14.0"))
    assert n_cuda > 0 and n_cu == 0
    n_cuda, n_cu = device_sources("mamba-ssm", "2.3.2.post1", _sdist("mamba-ssm-2.3.2.post1"))
    assert n_cu == 9 and n_cuda > n_cu  # 9 .cu files beside its .cuh headers


DOCOPT = LockedFile(
    "https://files.pythonhosted.org/packages/a2/55/8f8cab2afd404cf578136ef2cc5dfb50baa1761b68c9da1fb1e4eed343c9/"
    "docopt-0.6.2.tar.gz", "49b3a825280bd66b3aa83585ef59c4a8c82f2c8a522dbe754a8bc8d08c85c491", 25901)


def test_bundle_prebuilds_a_pure_stage1_sdist(tmp_path: Path) -> None:
    """docopt 0.6.2 is sdist-only on PyPI (NeMo rows install it): the bundle carries a pure wheel
    built from it, recorded against the sdist's sha256, so the target needs no build backend."""
    import sys

    from envbuilder.bundle.prebuild import Prebuilt, prebuild

    sdist = fetch(DOCOPT, cache_root(REPO / "build" / "test-cache"))[0]
    got = prebuild("docopt", "0.6.2", sdist, DOCOPT.sha256, f"{sys.version_info[0]}.{sys.version_info[1]}",
                   tmp_path / "out", None, lambda _: None)
    assert isinstance(got, Prebuilt), got
    assert got.wheel.name == "docopt-0.6.2-py2.py3-none-any.whl" and got.sdist_sha256 == DOCOPT.sha256
    assert got.to_dict()["sha256"] == got.sha256 and len(got.sha256) == 64
