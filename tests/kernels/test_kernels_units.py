"""Units of kernels/ and bundle/: arch lists, the gencode patch, ABI-named wheels, split parts.

No GPU, no network: the real compiler and real sdists are in test_kernels_cuda.py.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from envbuilder.bundle.parts import (
    PARTS_INDEX,
    extract_parts,
    parse_size,
    read_index,
    verify_parts,
    write_parts,
)
from envbuilder.errors import (
    ArchMismatchError,
    BundlePartMissingError,
    HashMismatchError,
    InvalidOptionError,
    all_error_classes,
)
from envbuilder.kernels.archs import ArchList, ObjectArchs, check_archs, mismatches
from envbuilder.kernels.packages import arch_knobs, default_jobs
from envbuilder.kernels.patch import patch_text
from envbuilder.kernels.wheelfile import add_local_version, local_tag


def test_arch_list_forms() -> None:
    a = ArchList.parse("sm_80, sm_90")
    assert a.torch == "8.0;9.0" and a.semicolon_numbers == "80;90" and a.tag == "sm80sm90"
    b = ArchList.parse("9.0+PTX")
    assert b.gencodes() == ["arch=compute_90,code=sm_90", "arch=compute_90,code=compute_90"]
    assert b.tag == "sm90ptx" and b.expected_ptx == {"90"}
    assert ArchList.parse("100").torch == "10.0"
    with pytest.raises(InvalidOptionError):
        ArchList.parse("hopper")


def test_arch_check_catches_extra_and_missing_archs() -> None:
    want = ArchList.parse("9.0")
    ok = [ObjectArchs("a.so", ("90a",), ())]  # arch-specific SASS counts as its family
    assert mismatches(want, ok) == []
    extra = [ObjectArchs("a.so", ("80", "90"), ())]
    assert mismatches(want, extra) and "a.so" in mismatches(want, extra)[0]
    with pytest.raises(ArchMismatchError):
        check_archs("pkg", want, [ObjectArchs("b.so", ("80",), ())])
    with pytest.raises(ArchMismatchError):  # a CUDA package whose .so holds no GPU code at all
        check_archs("pkg", want, [ObjectArchs("c.so", (), ())])


SETUP = '''import os
cc_flag = []
if True:
    cc_flag.append("-gencode")
    cc_flag.append("arch=compute_75,code=sm_75")
    if os.environ.get("X"):
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_121,code=sm_121")
print(cc_flag)
'''


def test_patch_replaces_literal_gencodes_and_runs() -> None:
    patched, removed = patch_text(SETUP, ArchList.parse("9.0")) or ("", [])
    assert removed == ["arch=compute_75,code=sm_75", "arch=compute_121,code=sm_121"]
    ns: dict[str, object] = {}
    exec(compile(patched.replace("print(cc_flag)", "result = cc_flag"), "setup.py", "exec"), ns)
    assert ns["result"] == ["-gencode", "arch=compute_90,code=sm_90"]
    assert patch_text("cc_flag = []\n", ArchList.parse("9.0")) is None
    with pytest.raises(ValueError):
        patch_text(patched, ArchList.parse("9.0"))


# the shape of causal-conv1d 1.6.1's and mamba-ssm 2.3.1's setup.py: the first and the last literals sit in
# `if` blocks that depend on the nvcc version
NESTED = '''cc_flag = []
if True:
    if V <= 12.9:
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_70,code=sm_70")
    cc_flag.append("-gencode")
    cc_flag.append("arch=compute_80,code=sm_80")
    if V >= 13.0:
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_121,code=sm_121")
result = cc_flag
'''


@pytest.mark.parametrize("nvcc", [12.8, 13.0])
def test_patch_holds_whichever_nested_block_runs(nvcc: float) -> None:
    patched, removed = patch_text(NESTED, ArchList.parse("9.0")) or ("", [])
    assert len(removed) == 3
    ns: dict[str, object] = {"V": nvcc}
    exec(compile(patched, "setup.py", "exec"), ns)
    assert ns["result"] == ["-gencode", "arch=compute_90,code=sm_90"]


def test_patch_that_would_break_setup_py_is_refused() -> None:
    # an `else:` of the last block: lines added at the block's outer indentation would split if from else
    text = NESTED.replace("result = cc_flag", "    else:\n        cc_flag = None\nresult = cc_flag")
    with pytest.raises(ValueError, match=r"would break setup\.py"):
        patch_text(text, ArchList.parse("9.0"))


def test_own_arch_variable_wins_over_patch(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text('import os\ndef cuda_archs():\n    return os.getenv("FLASH_ATTN_CUDA_ARCHS", '
                                       '"80;90").split(";")\ncc_flag=[]\ncc_flag.append("arch=compute_80,code=sm_80")\n')
    knobs = arch_knobs(tmp_path, ArchList.parse("9.0"))
    assert knobs.own_variable == "FLASH_ATTN_CUDA_ARCHS" and not knobs.hardcoded
    assert knobs.env == {"TORCH_CUDA_ARCH_LIST": "9.0", "FLASH_ATTN_CUDA_ARCHS": "90"}


def test_default_jobs_from_cores_and_memory() -> None:
    assert default_jobs("flash-attn", cores=16, memory_gb=48) == 8
    assert default_jobs("causal-conv1d", cores=16, memory_gb=48) == 16
    assert default_jobs("flash-attn", cores=16, memory_gb=3) == 1


def _wheel(path: Path) -> Path:
    whl = path / "demo_pkg-1.2.0-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("demo_pkg/__init__.py", "X = 1\n")
        zf.writestr("demo_pkg-1.2.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.2.0\n")
        zf.writestr("demo_pkg-1.2.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        zf.writestr("demo_pkg-1.2.0.dist-info/RECORD", "")
    return whl


def test_local_version_rewrites_wheel_deterministically(tmp_path: Path) -> None:
    tag = local_tag("13.0", "2.11.0+cu130", True, "sm90")
    assert tag == "cu130torch2.11cxx11abiTRUEsm90"
    assert local_tag(None, "2.13.0+cpu", True, "") == "cputorch2.13cxx11abiTRUE"
    src = _wheel(tmp_path)
    a = add_local_version(src, tag, tmp_path / "a")
    b = add_local_version(src, tag, tmp_path / "b")
    assert a.name == "demo_pkg-1.2.0+cu130torch2.11cxx11abiTRUEsm90-cp312-cp312-linux_x86_64.whl"
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as zf:
        info = "demo_pkg-1.2.0+cu130torch2.11cxx11abiTRUEsm90.dist-info"
        assert f"Version: 1.2.0+{tag}" in zf.read(f"{info}/METADATA").decode()
        record = zf.read(f"{info}/RECORD").decode()
        assert "demo_pkg/__init__.py,sha256=" in record and f"{info}/RECORD,," in record


def test_parse_size() -> None:
    assert parse_size("60M") == 60 * 2**20 and parse_size("1GiB") == 2**30
    with pytest.raises(InvalidOptionError):
        parse_size("sixty")


def _tree(root: Path) -> Path:
    (root / "files").mkdir(parents=True)
    (root / "files" / "big.bin").write_bytes(bytes(range(256)) * 12000)  # ~3 MB, spans parts
    (root / "a.txt").write_text("hello\n")
    return root


META = {"lock_sha256": "a" * 64, "manifest_sha256": "b" * 64}


def test_parts_roundtrip_deterministic(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    for out in ("p1", "p2"):
        (tmp_path / out).mkdir()
        write_parts(src, tmp_path / out, 2**20, META)
    i1, i2 = read_index(tmp_path / "p1"), read_index(tmp_path / "p2")
    assert i1 == i2 and len(i1.parts) >= 3
    parts = verify_parts(tmp_path / "p1", i1)
    extract_parts(parts, tmp_path / "back", i1.tar_sha256)  # the whole stream's sha256 is checked too
    assert (tmp_path / "back" / "files" / "big.bin").read_bytes() == (src / "files" / "big.bin").read_bytes()


def test_missing_and_corrupt_parts_are_typed(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    out = tmp_path / "p"
    out.mkdir()
    index = write_parts(src, out, 2**20, META)
    (out / index["parts"][1]["name"]).unlink()
    with pytest.raises(BundlePartMissingError) as missing:
        verify_parts(out, read_index(out))
    assert index["parts"][1]["name"] in missing.value.cause
    write_parts(src, out, 2**20, META)
    damaged = out / index["parts"][0]["name"]
    data = bytearray(damaged.read_bytes())
    data[100] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(HashMismatchError):
        verify_parts(out, read_index(out))
    assert json.loads((out / PARTS_INDEX).read_text())["schema"] == 1


def test_kernel_error_codes_in_their_range_and_distinct() -> None:
    codes = [c.exit_code for c in all_error_classes()]
    assert len(codes) == len(set(codes))
    ours = [c for c in all_error_classes() if c.__module__ == "envbuilder.errors" and 60 <= c.exit_code <= 69]
    assert len(ours) == 10


def test_library_headers_of_the_build_interpreters_nvidia_wheels(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The include dirs of the interpreter's NVIDIA library wheels (cudnn, cusparse: ATen/cuda/CUDAContext.h needs
    it) reach the compiler's CPLUS_INCLUDE_PATH, after what the user set; the toolkit's own parts (cuda_runtime)
    the compiler's own parts (cuda_nvcc) are left to the toolkit; nothing is added when there is none."""
    import sys

    from envbuilder.kernels.pipeline import wheel_include_dirs

    site = tmp_path / "site" / "nvidia"
    for name, header in (("cudnn", "cudnn.h"), ("cusparse", "cusparse.h"), ("cuda_nvrtc", "nvrtc.h"),
                         ("cuda_nvcc", "crt.h")):
        (site / name / "include").mkdir(parents=True)
        (site / name / "include" / header).write_text("/* header */\n")
    (site / "cublas" / "include").mkdir(parents=True)  # no header in it: not added
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    got = wheel_include_dirs(sys.executable)
    assert {str(site / n / "include") for n in ("cudnn", "cusparse", "cuda_nvrtc")} <= set(got)
    assert str(site / "cuda_nvcc" / "include") not in got and str(site / "cublas" / "include") not in got
    assert wheel_include_dirs(str(tmp_path / "no-python")) == []


def test_parallel_builds_share_the_cores_and_keep_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """--parallel N: N packages compile at once, each with its share of the default MAX_JOBS; the reports
    keep the lock's order whatever finishes first. (build_one is replaced: this checks the scheduling only;
    the real builds run in test_bundle_integration and on the GPU machines.)"""
    import threading
    import time as _time

    from envbuilder.kernels import pipeline

    running, peak, lock = [0], [0], threading.Lock()
    seen: dict[str, int | None] = {}

    def fake_build(name: str, files: object, ctx: pipeline.BuildContext) -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        seen[name] = ctx.opts.jobs
        _time.sleep({"a": 0.3, "b": 0.1, "c": 0.2}[name])
        with lock:
            running[0] -= 1
        return name

    monkeypatch.setattr(pipeline, "build_one", fake_build)
    monkeypatch.setattr(pipeline, "default_jobs", lambda name: 16)
    todo = [("a", None), ("b", None), ("c", None)]
    def ctx(parallel: int) -> pipeline.BuildContext:
        opts = pipeline.WheelsOptions(lockdir=Path("."), output=Path("."), parallel=parallel)
        return pipeline.BuildContext(None, None, None, opts, Path("."), None, Path("."),  # type: ignore[arg-type]
                                     lambda _: None, None)  # type: ignore[arg-type]

    got = pipeline._build_all(todo, ctx(3))  # type: ignore[arg-type]
    assert got == ["a", "b", "c"] and peak[0] == 3 and set(seen.values()) == {5}
    running[0] = peak[0] = 0
    pipeline._build_all(todo, ctx(1))  # type: ignore[arg-type]
    assert peak[0] == 1 and set(seen.values()) == {None}  # sequential: build_one picks its own default
