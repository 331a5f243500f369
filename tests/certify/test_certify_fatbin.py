"""The stdlib fat-binary reader behind the `arch` check (cross-checked against cuobjdump on the GPU machines)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from envbuilder.certify import gpu
from envbuilder.certify.certificate import GpuFacts, GpuInfo
from envbuilder.certify.expect import Expectations, ExpectedTarget
from envbuilder.certify.fatbin import fatbin_archs, runs_on
from envbuilder.certify.result import FAIL, PASS


def _entry(kind: int, sm: int, payload: bytes) -> bytes:
    # kind, version, header size (64), payload size, then the sm number at byte 28
    head = struct.pack("<HHIQ", kind, 0x0101, 64, len(payload)) + b"\0" * 12 + struct.pack("<I", sm)
    return head.ljust(64, b"\0") + payload


def _fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_reads_sass_and_ptx_entries(tmp_path: Path) -> None:
    so = tmp_path / "lib.so"
    # two fat binaries (two translation units) between unrelated bytes, one with a stray magic inside
    so.write_bytes(b"\x7fELF" + b"x" * 100 + _fatbin(_entry(2, 80, b"a" * 40), _entry(1, 80, b"p" * 8))
                   + b"junk\x50\xed\x55\xba" + b"y" * 50 + _fatbin(_entry(2, 90, b"b" * 24)))
    assert fatbin_archs(so) == {"sass": {80, 90}, "ptx": {80}}


def test_no_fatbin_and_unreadable_files(tmp_path: Path) -> None:
    plain = tmp_path / "plain.so"
    plain.write_bytes(b"\x7fELF" + b"\0" * 200)
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    for p in (plain, empty, tmp_path / "missing.so"):
        assert fatbin_archs(p) == {"sass": set(), "ptx": set()}


@pytest.mark.parametrize(("sass", "ptx", "sm", "ok"), [
    ({90}, set(), 90, True), ({80}, set(), 90, False), ({80}, {80}, 90, True),
    ({90}, set(), 100, False), ({100}, set(), 103, True), (set(), {100}, 90, False),
])
def test_runs_on(sass: set[int], ptx: set[int], sm: int, ok: bool) -> None:
    assert runs_on({"sass": sass, "ptx": ptx}, sm) is ok


def test_arch_fails_for_a_kernel_package_without_the_gpu_sm(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = GpuFacts(None, (GpuInfo("NVIDIA H100 80GB HBM3", "9.0"),))  # fake: no GPU here
    exp = Expectations(target=ExpectedTarget(arch_list="9.0"))
    monkeypatch.setattr(gpu, "installed_kernel_archs",
                        lambda: {"causal-conv1d": {"causal_conv1d_cuda.so": {"sass": {90}, "ptx": set()}}})
    assert gpu.check_arch(exp, facts).status == PASS
    monkeypatch.setattr(gpu, "installed_kernel_archs",
                        lambda: {"demo": {"demo_cuda.so": {"sass": {80}, "ptx": set()}}})
    c = gpu.check_arch(exp, facts)
    assert c.status == FAIL and "demo/demo_cuda.so" in (c.advice or "") and "--arch-list 9.0" in (c.advice or "")
    assert c.measured["kernel_packages"] == {"demo": {"demo_cuda.so": ["sm_80"]}}
