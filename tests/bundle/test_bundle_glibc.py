"""The glibc a compiled wheel needs, read from its ELF version-needs tables (bundle/glibc.py), checked against
binutils' own reading of real binaries on this machine; a wheel built here is carried to an older-glibc target
when what it needs is there (pesq 0.0.4 built on glibc 2.36 needs 2.14)."""

from __future__ import annotations

import _json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from envbuilder.bundle.glibc import elf_glibc_need, wheel_glibc_need

DYNLOAD = Path(_json.__file__).parent  # the interpreter's compiled standard modules (a venv has none of its own)
REAL = sorted(DYNLOAD.glob("*.so"))[:6] + [Path(p).resolve() for p in (shutil.which("ls"), sys.executable) if p]


def _objdump_need(path: Path) -> tuple[int, ...]:
    out = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=True).stdout
    versions = {tuple(int(x) for x in m.split(".")) for m in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", out)}
    return max(versions, default=())


@pytest.mark.skipif(shutil.which("objdump") is None, reason="binutils' objdump is the independent reading")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_the_version_needs_agree_with_objdump(path: Path) -> None:
    assert elf_glibc_need(path.read_bytes()) == _objdump_need(path.resolve())


def test_what_is_no_elf_object_is_unknown() -> None:
    data = Path(shutil.which("ls") or sys.executable).read_bytes()
    assert elf_glibc_need(b"#!/bin/sh\necho hi\n") is None
    assert elf_glibc_need(data[:200]) is None  # the section headers are cut off
    assert elf_glibc_need(b"\x7fELF" + b"\x01" * 60) is None  # 32-bit


def test_a_wheel_needs_the_newest_of_its_shared_objects(tmp_path: Path) -> None:
    small = min(REAL[:-2], key=lambda p: elf_glibc_need(p.read_bytes()) or ())
    big = Path(shutil.which("ls") or sys.executable)
    wheel = tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("demo/__init__.py", "")
        z.write(small, "demo/_a.cpython-311-x86_64-linux-gnu.so")
        z.write(big, "demo/libb.so.1")
    want = max(elf_glibc_need(small.read_bytes()) or (), elf_glibc_need(big.read_bytes()) or ())
    assert want and wheel_glibc_need(wheel) == want
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr("demo/_broken.so", b"\x7fELF" + b"\x02\x01" + b"\x00" * 10)
    assert wheel_glibc_need(wheel) is None  # one unreadable object: the caller keeps its old rule
    pure = tmp_path / "pure-1.0-py3-none-any.whl"
    with zipfile.ZipFile(pure, "w") as z:
        z.writestr("pure/__init__.py", "")
    assert wheel_glibc_need(pure) == ()


CXX_PROGRAM = next((Path(p) for p in ("/usr/bin/cmake", "/usr/bin/ninja", "/usr/bin/gdb") if Path(p).is_file()), None)


@pytest.mark.skipif(CXX_PROGRAM is None or shutil.which("objdump") is None, reason="needs a C++ program and objdump")
def test_an_object_that_needs_a_versioned_cxx_runtime_is_unknown() -> None:
    """texterrors (pybind11) built here needs GLIBCXX_3.4.x: the target's glibc says nothing about its libstdc++."""
    assert CXX_PROGRAM is not None
    out = subprocess.run(["objdump", "-T", str(CXX_PROGRAM)], capture_output=True, text=True, check=True).stdout
    assert "GLIBCXX_" in out  # the independent reading: it does need libstdc++ symbol versions
    assert elf_glibc_need(CXX_PROGRAM.read_bytes()) is None
