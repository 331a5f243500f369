"""Reading sdists: file lists, CUDA sources, PKG-INFO; the no-CUDA-sources error."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from envbuilder.errors import NoCudaSourcesError, SdistFetchError
from envbuilder.lock.kernel_sources import check_kernel_sources, require_cuda_sources
from envbuilder.lock.sdist import fetch_sdist, read_sdist
from envbuilder.lock.uvlock import LockedFile, LockedPackage
from envbuilder.resolve.resolver import Pin

PKG_INFO = b"""Metadata-Version: 2.1
Name: causal_conv1d
Version: {v}
Requires-Dist: torch
Requires-Dist: packaging
Requires-Dist: ninja
Requires-Python: >=3.9
"""


def make_sdist(dest: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A real .tar.gz laid out like setuptools writes it: <name>-<version>/..."""
    path = dest / f"{name}-{version}.tar.gz"
    top = f"{name}-{version}"
    with tarfile.open(path, "w:gz") as tar:
        for rel, data in {"PKG-INFO": PKG_INFO.replace(b"{v}", version.encode()), **files}.items():
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_read_sdist_lists_files_cuda_sources_and_pkg_info(tmp_path: Path) -> None:
    path = make_sdist(tmp_path, "causal_conv1d", "1.6.0", {
        "setup.py": b"import torch\n", "csrc/causal_conv1d_fwd.cu": b"//", "csrc/static_switch.h": b"//",
        "csrc/reduce.cuh": b"//", "causal_conv1d.egg-info/PKG-INFO": b"Name: other\n"})
    contents = read_sdist(path)
    assert contents.cuda_sources == ("causal_conv1d-1.6.0/csrc/causal_conv1d_fwd.cu",
                                     "causal_conv1d-1.6.0/csrc/reduce.cuh")
    assert contents.pkg_info is not None
    assert contents.pkg_info["requires-dist"] == ["torch", "packaging", "ninja"]  # the top PKG-INFO, not egg-info
    assert contents.pkg_info["name"] == ["causal_conv1d"]
    require_cuda_sources("causal-conv1d", "1.6.0", contents)  # no error


def test_sdist_without_cuda_sources_is_a_typed_error_with_a_fix(tmp_path: Path) -> None:
    # the layout of PyPI's causal-conv1d 1.2.2.post1: python sources and setup.py, no csrc/
    path = make_sdist(tmp_path, "causal_conv1d", "1.2.2.post1", {
        "setup.py": b"import torch\n", "causal_conv1d/__init__.py": b"",
        "causal_conv1d/causal_conv1d_interface.py": b""})
    with pytest.raises(NoCudaSourcesError) as err:
        require_cuda_sources("causal-conv1d", "1.2.2.post1", read_sdist(path))
    assert err.value.exit_code == 62  # shared with `wheels`, which refuses the same sdists
    assert "holds no CUDA sources" in err.value.cause and "without kernels" in err.value.cause
    assert err.value.fix is not None and "--source git" in err.value.fix


def _res_with_stage2(name: str, version: str, git: bool = False, provenance: str = "test") -> object:
    class Res:
        def stage(self, n: int) -> list[Pin]:
            url = "https://github.com/x/y.git" if git else None
            return [Pin(name, version, 2, provenance, url, "v1" if git else None)] if n == 2 else []
    return Res()


def test_kernel_less_row_pin_is_recorded_but_a_set_pin_is_refused(tmp_path: Path) -> None:
    """The row's own pin locks (recorded as kernel-less, warned about); the user's --set pin is an error."""
    bad = make_sdist(tmp_path, "mamba_ssm", "2.2.0", {"setup.py": b"", "mamba_ssm/__init__.py": b""})
    pkg = LockedPackage("mamba-ssm", "2.2.0", {"registry": "https://pypi.org/simple"}, (), True,
                        sdist=LockedFile(bad.as_uri(), hashlib.sha256(bad.read_bytes()).hexdigest(), None))

    def fetch(url: str, sha: str | None, ca: Path | None) -> Path:
        return fetch_sdist(url, sha, ca, cache=tmp_path / "cache")

    said: list[str] = []
    kernel_less: list[str] = []
    row_pin = _res_with_stage2("mamba-ssm", "2.2.0", provenance="matrix:nemo.toml#v2.3.0.mamba_ssm")
    assert check_kernel_sources(row_pin, [pkg], progress=said.append, fetch=fetch,  # type: ignore[arg-type]
                                kernel_less=kernel_less) == []
    assert kernel_less == ["mamba-ssm"]
    assert any(m.startswith("warning: mamba-ssm 2.2.0") and "--set mamba-ssm==none" in m for m in said)
    set_pin = _res_with_stage2("mamba-ssm", "2.2.0", provenance="override:--set mamba-ssm==2.2.0")
    with pytest.raises(NoCudaSourcesError):
        check_kernel_sources(set_pin, [pkg], fetch=fetch, kernel_less=[])  # type: ignore[arg-type]


def test_check_kernel_sources_fetches_by_hash_and_refuses(tmp_path: Path) -> None:
    bad = make_sdist(tmp_path, "mamba_ssm", "2.2.0", {"setup.py": b"", "mamba_ssm/__init__.py": b""})
    digest = hashlib.sha256(bad.read_bytes()).hexdigest()
    pkg = LockedPackage("mamba-ssm", "2.2.0", {"registry": "https://pypi.org/simple"}, (), True,
                        sdist=LockedFile(bad.as_uri(), digest, None))
    cache = tmp_path / "cache"

    def fetch(url: str, sha: str | None, ca: Path | None) -> Path:
        return fetch_sdist(url, sha, ca, cache=cache)  # the real download path, over file://

    with pytest.raises(NoCudaSourcesError, match=r"mamba-ssm 2\.2\.0"):
        check_kernel_sources(_res_with_stage2("mamba-ssm", "2.2.0"), [pkg], fetch=fetch)  # type: ignore[arg-type]
    assert (cache / digest / bad.name).is_file()  # content-addressed cache
    # a git pin builds from the tag's tree: not checked
    assert check_kernel_sources(_res_with_stage2("mamba-ssm", "2.2.0", git=True), [pkg],  # type: ignore[arg-type]
                                fetch=fetch) == []
    # a wrong hash is a fetch error, never a silent pass
    wrong = LockedPackage("mamba-ssm", "2.2.0", {"registry": "x"}, (), True,
                          sdist=LockedFile(bad.as_uri(), "0" * 64, None))
    with pytest.raises(SdistFetchError, match="does not match"):
        check_kernel_sources(_res_with_stage2("mamba-ssm", "2.2.0"), [wrong], fetch=fetch)  # type: ignore[arg-type]


def test_check_kernel_sources_passes_an_sdist_with_kernels(tmp_path: Path) -> None:
    good = make_sdist(tmp_path, "mamba_ssm", "2.2.5", {"csrc/selective_scan/selective_scan_fwd_fp16.cu": b"//"})
    pkg = LockedPackage("mamba-ssm", "2.2.5", {"registry": "x"}, (), True,
                        sdist=LockedFile(good.as_uri(), hashlib.sha256(good.read_bytes()).hexdigest(), None))
    out = check_kernel_sources(_res_with_stage2("mamba-ssm", "2.2.5"), [pkg],  # type: ignore[arg-type]
                               fetch=lambda u, s, c: fetch_sdist(u, s, c, cache=tmp_path / "c"))
    assert [c.to_dict() for c in out] == [{"package": "mamba-ssm", "version": "2.2.5",
                                           "filename": "mamba_ssm-2.2.5.tar.gz", "files": 2, "cuda_sources": 1}]


@pytest.mark.integration
def test_pypi_mamba_ssm_220_and_causal_conv1d_1221_have_no_cuda_sources(tmp_path: Path) -> None:
    """The real PyPI sdists the v2.2/v2.3 rows pin (URLs and hashes as uv.lock records them)."""
    import json
    import urllib.parse
    import urllib.request

    for name, version in (("mamba-ssm", "2.2.0"), ("causal-conv1d", "1.2.2.post1"), ("mamba-ssm", "2.2.5")):
        with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=60) as resp:
            files = json.load(resp)["releases"][version]
        sdist = next(f for f in files if f["packagetype"] == "sdist")
        url = sdist["url"] if sdist["url"].startswith("http") else \
            urllib.parse.urljoin(f"https://pypi.org/pypi/{name}/json", sdist["url"])
        contents = read_sdist(fetch_sdist(url, sdist["digests"]["sha256"], cache=tmp_path))
        if version == "2.2.5":
            assert len(contents.cuda_sources) >= 10
        else:
            assert contents.cuda_sources == ()
            with pytest.raises(NoCudaSourcesError):
                require_cuda_sources(name, version, contents)


def test_offline_check_warns_instead_of_passing_silently(tmp_path: Path) -> None:
    pkg = LockedPackage("mamba-ssm", "2.2.0", {"registry": "x"}, (), True,
                        sdist=LockedFile((tmp_path / "missing.tar.gz").as_uri(), "0" * 64, None))
    said: list[str] = []
    out = check_kernel_sources(_res_with_stage2("mamba-ssm", "2.2.0"), [pkg], progress=said.append,  # type: ignore[arg-type]
                               fetch=lambda u, s, c: fetch_sdist(u, s, c, cache=tmp_path / "c"))
    assert out == [] and any("not checked for CUDA sources" in m for m in said)


def test_kernel_less_pin_with_a_recorded_tag_builds_from_git(tmp_path: Path) -> None:
    """The decision for v2.0-v2.5's Mamba pins: the matrix records the tag (commit and tree, cited), so the
    record says stage 2 builds the tag instead of the kernel-less sdist; a version without a recorded tag
    stays kernel-less (refused by build/wheels)."""
    from envbuilder.matrix import load_matrix

    matrix = load_matrix()

    def fetch(url: str, sha: str | None, ca: Path | None) -> Path:
        return fetch_sdist(url, sha, ca, cache=tmp_path / "cache")

    def pkg(version: str) -> LockedPackage:
        bad = make_sdist(tmp_path, "mamba_ssm", version, {"setup.py": b"", "mamba_ssm/__init__.py": b""})
        return LockedPackage("mamba-ssm", version, {"registry": "https://pypi.org/simple"}, (), True,
                             sdist=LockedFile(bad.as_uri(), hashlib.sha256(bad.read_bytes()).hexdigest(), None))

    said: list[str] = []
    kernel_less: list[str] = []
    git_sources: dict[str, object] = {}
    row_pin = _res_with_stage2("mamba-ssm", "2.2.0", provenance="matrix:nemo.toml#v2.3.0.mamba_ssm")
    check_kernel_sources(row_pin, [pkg("2.2.0")], progress=said.append, fetch=fetch,  # type: ignore[arg-type]
                         matrix=matrix, kernel_less=kernel_less, git_sources=git_sources)  # type: ignore[arg-type]
    assert kernel_less == [] and list(git_sources) == ["mamba-ssm"]
    src = git_sources["mamba-ssm"]
    assert (src.url, src.tag, src.commit, src.tree, src.force_build_env) == (  # type: ignore[attr-defined]
        "https://github.com/state-spaces/mamba.git", "v2.2.0", "95a2041e7b046df49b23cd3091309c8b464e50f2",
        "5bbfcaf13e57ca4b69f850a5f193bc0d4372a0cb", "MAMBA_FORCE_BUILD")
    assert "NVIDIA/NeMo:reinstall.sh@v2.3.0" in src.source  # type: ignore[attr-defined]
    assert any("stage 2 builds it from https://github.com/state-spaces/mamba.git v2.2.0" in m for m in said)
    # a --set pin of a version whose tag is recorded builds from it too
    set_pin = _res_with_stage2("mamba-ssm", "2.2.2", provenance="override:--set mamba-ssm==2.2.2")
    git_sources.clear()
    check_kernel_sources(set_pin, [pkg("2.2.2")], fetch=fetch, matrix=matrix,  # type: ignore[arg-type]
                         kernel_less=[], git_sources=git_sources)  # type: ignore[arg-type]
    assert git_sources["mamba-ssm"].tag == "v2.2.2"  # type: ignore[attr-defined]
    # no recorded tag (2.2.1): the row's pin is kernel-less, as before
    kernel_less.clear()
    git_sources.clear()
    check_kernel_sources(_res_with_stage2("mamba-ssm", "2.2.1", provenance="matrix:x"), [pkg("2.2.1")],
                         fetch=fetch, matrix=matrix, kernel_less=kernel_less,  # type: ignore[arg-type]
                         git_sources=git_sources)  # type: ignore[arg-type]
    assert kernel_less == ["mamba-ssm"] and git_sources == {}
