"""A compiled stage-1 sdist (megatron-core 0.12 on Python 3.12, pesq, texterrors) travels as a wheel built here
when the target's glibc has every glibc symbol version the wheel needs (read from its ELF tables: pesq 0.0.4
built on glibc 2.36 needs 2.14), or, where that cannot be told (a C++ runtime), when the target's glibc is at
least this machine's; otherwise as its sdist, and the bundle says why."""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import pytest

from envbuilder.bundle.prebuild import Prebuilt, host_glibc, prebuild, runs_on

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_runs_on_compares_the_targets_glibc_with_this_machines() -> None:
    here = host_glibc()
    assert here is not None and len(here) >= 2
    newer = f"{here[0]}.{here[1] + 1}"
    older = f"{here[0]}.{here[1] - 1}"
    assert runs_on(newer) and runs_on(".".join(map(str, here))) and not runs_on(older) and not runs_on(None)


def _c_sdist(tmp: Path) -> Path:
    src = tmp / "cext-1.0"
    src.mkdir()
    (src / "setup.py").write_text(
        "from setuptools import setup, Extension\n"
        "setup(name='cext', version='1.0', ext_modules=[Extension('cext', ['cext.c'])])\n")
    (src / "cext.c").write_text(  # getrandom() is versioned GLIBC_2.25: the wheel needs glibc 2.25
        "#include <Python.h>\n#include <sys/random.h>\n"
        "static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, \"cext\", 0, -1, 0};\n"
        "PyMODINIT_FUNC PyInit_cext(void) { char b[1]; getrandom(b, 1, 0); return PyModule_Create(&m); }\n")
    (src / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: cext\nVersion: 1.0\n")
    sdist = tmp / "cext-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(src, arcname="cext-1.0")
    return sdist


@pytest.mark.integration
def test_a_compiled_wheel_is_carried_only_to_a_target_with_a_new_enough_glibc(tmp_path: Path) -> None:
    """Real `uv build` of a C extension (setuptools from PyPI)."""
    here = host_glibc()
    assert here is not None
    sdist = _c_sdist(tmp_path)
    refused = prebuild("cext", "1.0", sdist, "0" * 64, PY, tmp_path / "a", None, lambda _: None, "2.24")
    assert isinstance(refused, str) and "needs glibc 2.25, newer than the target's 2.24" in refused
    assert not (tmp_path / "a").exists()
    older = f"{here[0]}.{here[1] - 1}"  # older than this machine's, new enough for the wheel
    kept_older = prebuild("cext", "1.0", sdist, "0" * 64, PY, tmp_path / "b", None, lambda _: None, older)
    assert isinstance(kept_older, Prebuilt), kept_older
    kept = prebuild("cext", "1.0", sdist, "0" * 64, PY, tmp_path / "c", None, lambda _: None,
                    f"{here[0]}.{here[1] + 3}")
    assert isinstance(kept, Prebuilt), kept
    assert kept.wheel.name.endswith("linux_x86_64.whl") and kept.wheel.is_file()
