"""The CUDA compiler for stage-2 builds: the host's when its major is torch's, else one assembled from
matrices/cuda_toolkits.toml (NVIDIA's PyPI wheels; Debian's nvidia-cuda-toolkit for CUDA 12, whose PyPI wheels
carry no nvcc). The integration test assembles the real CUDA 12.4.1 toolkit and compiles a kernel for sm_90."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from envbuilder.errors import CudaToolkitError, MatrixFileError
from envbuilder.kernels import toolkit as tk
from envbuilder.matrix.load import load_matrix
from envbuilder.matrix.model import CudaToolkit, Matrix, ToolkitFile

REPO = Path(__file__).resolve().parents[2]


def _toolkit(cuda: str, nvcc: str) -> CudaToolkit:
    return CudaToolkit(cuda, cuda + ".0", nvcc, "test", (ToolkitFile("wheel", "https://x/y.whl", "0" * 64, "t"),))


def test_matrix_names_a_toolkit_for_every_torch_cuda_major_of_the_committed_locks() -> None:
    import json

    m = load_matrix()
    majors = {t.major for t in m.cuda_toolkits}
    for rec in sorted((REPO / "locks").glob("*/envbuilder.lock.json")):
        cuda = json.loads(rec.read_text())["target"].get("cuda")
        if cuda:
            assert int(cuda.split(".")[0]) in majors, f"{rec.parent.name}: no toolkit for CUDA {cuda}"
    # every file is pinned by sha256 and cited
    for t in m.cuda_toolkits:
        assert t.files and all(len(f.sha256) == 64 and f.source for f in t.files)


def test_choose_prefers_the_same_minor_then_the_newest_of_the_major() -> None:
    m = Matrix(releases=(), cuda_toolkits=(_toolkit("12.8", "12.8.93"), _toolkit("12.4", "12.4.131"),
                                             _toolkit("13.0", "13.0.88")))
    assert tk.choose_toolkit(m, "12.4").nvcc == "12.4.131"
    assert tk.choose_toolkit(m, "12.6").nvcc == "12.8.93"   # no 12.6: the newest 12.x
    assert tk.choose_toolkit(m, "13.0").nvcc == "13.0.88"
    with pytest.raises(CudaToolkitError, match=r"no CUDA 11\.x compiler"):
        tk.choose_toolkit(m, "11.8")


def _fake_nvcc(root: Path, version: str) -> None:
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    major, minor, _ = version.split(".", 2)
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {major}.{minor}, V{version}'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)


def test_the_host_toolkit_is_used_when_its_major_is_torchs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = tmp_path / "cuda"
    _fake_nvcc(host, "12.9.86")
    monkeypatch.setenv("CUDA_HOME", str(host))
    got = tk.toolkit_for("12.6", None, Matrix(releases=()), tmp_path / "cache", lambda _: None)
    assert got is not None and got.origin == "host" and got.nvcc == "12.9.86"
    assert tk.toolkit_for(None, None, Matrix(releases=()), tmp_path / "cache", lambda _: None) is None  # CPU torch


def test_an_explicit_cuda_home_of_another_major_is_refused(tmp_path: Path) -> None:
    host = tmp_path / "cuda13"
    _fake_nvcc(host, "13.0.88")
    with pytest.raises(CudaToolkitError, match="refuses an extension compiled by another major"):
        tk.toolkit_for("12.6", host, Matrix(releases=()), tmp_path / "cache", lambda _: None)
    with pytest.raises(CudaToolkitError, match="no working bin/nvcc"):
        tk.host_toolkit(tmp_path / "nothing")


def _deb(path: Path, files: dict[str, bytes], links: dict[str, str]) -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(body), 0o755
            tar.addfile(info, io.BytesIO(body))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b""), ("data.tar.xz", data.getvalue())]
    out = b"!<arch>\n"
    for name, body in members:
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body
        out += b"\n" if len(body) % 2 else b""
    path.write_bytes(out)


def test_a_deb_is_unpacked_without_dpkg_and_links_out_of_the_tree_are_dropped(tmp_path: Path) -> None:
    deb = tmp_path / "t.deb"
    _deb(deb, {"./usr/bin/ptxas": b"x", "./usr/lib/nvidia-cuda-toolkit/bin/nvcc": b"y"},
         {"./usr/lib/nvidia-cuda-toolkit/bin/nvcc.profile": "/etc/nvcc.profile"})
    tk._unpack_deb(deb, tmp_path / "out")
    assert (tmp_path / "out/usr/bin/ptxas").read_bytes() == b"x"
    assert not (tmp_path / "out/usr/lib/nvidia-cuda-toolkit/bin/nvcc.profile").is_symlink()
    (tmp_path / "bad.deb").write_bytes(b"PK\x03\x04 not an ar archive")
    with pytest.raises(CudaToolkitError, match="not a Debian package"):
        tk._unpack_deb(tmp_path / "bad.deb", tmp_path / "out2")


def test_a_toolkit_entry_without_sha256_or_source_is_a_matrix_error(tmp_path: Path) -> None:
    import shutil

    d = tmp_path / "m"
    shutil.copytree(REPO / "matrices", d)
    text = (d / "cuda_toolkits.toml").read_text()
    (d / "cuda_toolkits.toml").write_text(text.replace('sha256 = "cd5fe85a', 'sha256 = "zz5fe85a', 1))
    with pytest.raises(MatrixFileError, match=r"cuda_toolkits\.toml"):
        load_matrix(d)


@pytest.mark.integration
def test_the_real_cuda_12_toolkit_compiles_sm90_code(tmp_path: Path) -> None:
    """Downloads Debian's nvidia-cuda-toolkit 12.4.1 and NVIDIA's cu12 header wheels (~110 MB, hash-checked),
    assembles them, and compiles a kernel with cub for sm_90: the cubin is really sm_90."""
    cache = Path(os.environ.get("ENVBUILDER_CACHE_DIR") or Path.home() / ".cache" / "envbuilder")
    got = tk.assemble(tk.choose_toolkit(load_matrix(), "12.6"), cache, lambda _: None)
    assert got.nvcc == "12.4.131" and tk.check_tree(got.root) == []
    src = tmp_path / "k.cu"
    src.write_text("#include <cub/cub.cuh>\n#include <cuda_bf16.h>\n"
                   "__global__ void add(float* a, const float* b) { a[threadIdx.x] += b[threadIdx.x]; }\n")
    subprocess.run([str(got.root / "bin" / "nvcc"), "-c", "-gencode", "arch=compute_90,code=sm_90",
                    "-o", str(tmp_path / "k.o"), str(src)], check=True, capture_output=True)
    listing = subprocess.run([str(got.root / "bin" / "cuobjdump"), "--list-elf", str(tmp_path / "k.o")],
                             check=True, capture_output=True, text=True).stdout
    assert "sm_90" in listing
    # a second call reuses the assembled root
    again = tk.assemble(tk.choose_toolkit(load_matrix(), "12.6"), cache, lambda _: None)
    assert again.root == got.root
