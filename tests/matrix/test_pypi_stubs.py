"""PyPI releases that are wheel-stub sdists (matrices/pypi_stubs.toml): rows never lock them, bundles refuse them.

A wheel-stub's build downloads the real wheel from another index, online and unhashed: a lock that pins one
cannot be installed offline (found on a GPU host: every 26.xx lock pinned nvdlfw-inspect 0.2.1)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import tomllib

from envbuilder.bundle.prebuild import prebuild, wheel_stub_index
from envbuilder.errors import WheelStubError
from envbuilder.matrix import load_matrix

REPO = Path(__file__).resolve().parents[2]


def _sdist(tmp: Path, name: str, pyproject: str) -> Path:
    path = tmp / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for member, text in ((f"{name}/pyproject.toml", pyproject), (f"{name}/PKG-INFO", "Metadata-Version: 2.1\n")):
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


STUB = ('[build-system]\nrequires = ["wheel-stub"]\nbuild-backend = "wheel_stub.buildapi"\n\n'
        '[tool.wheel_stub]\nindex_url = "https://pypi.nvidia.com/"\n')


def test_every_stub_is_cited_and_names_a_later_release() -> None:
    from packaging.version import Version

    stubs = load_matrix().pypi_stubs
    assert {(s.package, s.version) for s in stubs} >= {("nvdlfw-inspect", "0.2.1"), ("nvidia-modelopt", "0.46.0rc1")}
    for s in stubs:
        assert Version(s.instead) > Version(s.version)
        assert f"https://pypi.org/project/{s.package}/{s.version}/" in s.source
        assert f"https://pypi.org/project/{s.package}/{s.instead}/" in s.source


def test_no_committed_lock_pins_a_stub_and_every_affected_row_says_why() -> None:
    stubs = {(s.package, s.version): s for s in load_matrix().pypi_stubs}
    affected = 0
    for lock in sorted((REPO / "locks").glob("*/uv.lock")):
        pins = {(p["name"], p["version"]) for p in tomllib.loads(lock.read_text())["package"] if "version" in p}
        assert not pins & stubs.keys(), f"{lock.parent.name} pins a wheel-stub: {pins & stubs.keys()}"
    for row in load_matrix().releases:
        upstream = REPO / "matrices" / "upstream" / f"megatron-bridge-{row.megatron_bridge}.toml"
        if not upstream.is_file():
            continue
        pinned = {(p["name"], p["version"]) for p in tomllib.loads(upstream.read_text()).get("package", [])}
        for key in pinned & stubs.keys():
            stub = stubs[key]
            forced = [o for o in row.override_dependencies if o.requirement == f"{stub.package}=={stub.instead}"]
            assert forced and forced[0].reason == "row" and "wheel-stub" in forced[0].text, (row.name, key)
            affected += 1
    assert affected >= 7  # 26.02 ... 26.08 all pin nvdlfw-inspect 0.2.1 upstream


def test_wheel_stub_index_tells_a_stub_from_a_real_sdist(tmp_path: Path) -> None:
    assert wheel_stub_index(_sdist(tmp_path, "stub-0.1", STUB)) == "https://pypi.nvidia.com/"
    real = _sdist(tmp_path, "real-0.1", '[build-system]\nbuild-backend = "setuptools.build_meta"\n')
    assert wheel_stub_index(real) is None
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    assert wheel_stub_index(tmp_path / "junk.tar.gz") is None


def test_bundle_refuses_a_stub_before_building(tmp_path: Path) -> None:
    sdist = _sdist(tmp_path, "nvdlfw_inspect-0.2.1", STUB)
    with pytest.raises(WheelStubError) as e:
        prebuild("nvdlfw-inspect", "0.2.1", sdist, "0" * 64, "3.12", tmp_path / "out", None, lambda _: None)
    assert e.value.exit_code == 123 and "https://pypi.nvidia.com/" in str(e.value)
    assert not (tmp_path / "out").exists()
