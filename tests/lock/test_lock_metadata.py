"""Stage-2 dependency metadata from PKG-INFO, checked against matrices/build_packages.toml."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from envbuilder.lock.metadata import compare, derive_requires, install_requires, pkg_info_requires
from envbuilder.lock.sdist import read_sdist
from envbuilder.matrix import load_matrix

REPO = Path(__file__).resolve().parents[2]


def _sdist(tmp_path: Path, pkg_info: bytes) -> Path:
    """A real sdist archive holding `pkg_info` as its top-level PKG-INFO."""
    import io
    import tarfile

    out = tmp_path / "mamba_ssm-9.9.9.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for name, data in (("mamba_ssm-9.9.9/PKG-INFO", pkg_info), ("mamba_ssm-9.9.9/csrc/x.cu", b"//")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


STATIC = (b"Metadata-Version: 2.4\nName: mamba_ssm\nVersion: 9.9.9\nRequires-Dist: torch\nRequires-Dist: triton\n"
          b"Requires-Dist: einops\nRequires-Dist: causal-conv1d>=1.2.0; extra == \"causal-conv1d\"\n")
DYNAMIC = b"Metadata-Version: 2.4\nName: causal_conv1d\nVersion: 9.9.9\nDynamic: requires-dist\nRequires-Dist: torch\n"


def test_static_requires_dist_is_read_and_extras_are_not_installs(tmp_path: Path) -> None:
    info = pkg_info_requires("mamba-ssm", "9.9.9", read_sdist(_sdist(tmp_path, STATIC)))
    assert info.requires_dist is not None and "PKG-INFO (Metadata-Version 2.4)" in info.note
    assert install_requires(info.requires_dist) == ["einops", "torch", "triton"]
    assert compare(["torch", "triton", "einops"], info.requires_dist) == []
    assert compare(["torch", "einops", "ninja"], info.requires_dist) == ["table only: ninja", "PKG-INFO only: triton"]


def test_dynamic_requires_dist_is_not_trusted(tmp_path: Path) -> None:
    info = pkg_info_requires("causal-conv1d", "9.9.9", read_sdist(_sdist(tmp_path, DYNAMIC)))
    assert info.requires_dist is None and "Dynamic" in info.note


def test_derive_requires_reads_the_located_sdist(tmp_path: Path) -> None:
    path = _sdist(tmp_path, STATIC)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    info = derive_requires("mamba-ssm", "9.9.9", locate=lambda p, v, c: (path.as_uri(), sha))
    assert info.requires_dist is not None and "torch" in info.requires_dist
    none = derive_requires("mamba-ssm", "9.9.9", locate=lambda p, v, c: None)
    assert none.requires_dist is None and "no sdist" in none.note


def test_render_uses_derived_requires_for_an_uncovered_version() -> None:
    from envbuilder.render.pyproject import render_pyproject
    from envbuilder.resolve import ResolveRequest
    from envbuilder.resolve.resolver import resolve

    m = load_matrix(REPO / "matrices")
    res = resolve(m, ResolveRequest(row="26.04", row_option="release"))
    assert not m.build_packages["mamba-ssm"].covers("2.3.1")
    text = render_pyproject(res, m, derived_requires={"mamba-ssm": ["torch", "einops"]})
    assert 'name = "mamba-ssm"\nversion = "2.3.1"\nrequires-dist = ["einops", "torch"]' in text


@pytest.mark.integration
def test_table_is_a_checked_cache_of_real_pkg_info() -> None:
    """For PyPI sdists whose PKG-INFO states Requires-Dist, the table says the same."""
    m = load_matrix(REPO / "matrices")
    checked = 0
    for name, version in (("mamba-ssm", "2.2.5"), ("mamba-ssm", "2.3.0"), ("mamba-ssm", "2.3.1"),
                          ("flash-attn", "2.8.3"), ("causal-conv1d", "1.5.2")):
        info = derive_requires(name, version)
        if info.requires_dist is None:
            continue  # Dynamic: only the table can say
        table = m.build_packages[name].requires_dist(version)
        assert compare(table, info.requires_dist) == [], (name, version, info.note)
        checked += 1
    assert checked >= 2
