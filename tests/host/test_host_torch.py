"""--mode host-torch: lock on top of an interpreter's torch, record it, never replace it.

The HostTorch values below are plain input data (what `probe_torch` reads from an interpreter);
the probe itself runs for real in test_bundle_integration.py on a venv with the CPU torch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.errors import HostTorchMismatchError, InvalidOptionError, ResolveConflictError
from envbuilder.host.torchprobe import HostTorch, in_row_range
from envbuilder.kernels.torchenv import check_host_torch
from envbuilder.matrix import Matrix, load_matrix
from envbuilder.render.pyproject import render_pyproject
from envbuilder.resolve import ResolveRequest, resolve

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "matrix"
# the GPU machines' Python: 3.12 with torch 2.11.0+cu130
GPU_HOST = HostTorch("/usr/bin/python3", "3.12", "cp312", "2.11.0+cu130", "13.0", True, ("torch", "triton"))


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load_matrix(FIXTURE)


def test_row_range_is_major_minor() -> None:
    assert in_row_range("2.7.0a0+7c8ec84dab.nv25.03", "2.7.0") is True  # an NGC build
    assert in_row_range("2.11.0+cu130", "2.7.0") is False
    assert in_row_range("2.11.0", None) is None


def test_host_torch_lock_keeps_the_interpreter(m: Matrix) -> None:
    r = resolve(m, ResolveRequest(row="v2.3.0", mode="host-torch", host_torch=GPU_HOST))
    assert "torch" not in r.pins and "torch 2.11.0+cu130" in r.omitted["torch"]
    assert r.python == "3.12" and r.requires_python == "==3.12.*" and r.cuda == "13.0"
    assert r.provenance["torch"] == "host-torch:interpreter"
    assert any("is outside" in w and "v2.3.0" in w for w in r.warnings)
    # TE's core wheel follows the interpreter's CUDA major
    assert "transformer-engine-cu13" in r.pins
    text = render_pyproject(r, m, [], {})
    assert "override-dependencies = [" in text and "\"torch; sys_platform == 'never'\"" in text
    assert "\"triton; sys_platform == 'never'\"" in text and "pytorch-" not in text


def test_host_torch_conflicts(m: Matrix) -> None:
    with pytest.raises(InvalidOptionError):
        resolve(m, ResolveRequest(row="v2.3.0", mode="host-torch"))
    with pytest.raises(ResolveConflictError):
        resolve(m, ResolveRequest(row="v2.3.0", mode="host-torch", host_torch=GPU_HOST, torch="2.7.0"))
    with pytest.raises(ResolveConflictError):
        resolve(m, ResolveRequest(row="v2.3.0", mode="host-torch", host_torch=GPU_HOST, python="3.11"))


def test_build_or_install_on_another_torch_is_refused() -> None:
    want = GPU_HOST.recorded()  # the lock record's host.torch
    check_host_torch(want, GPU_HOST)
    other = HostTorch("/opt/py", "3.12", "cp312", "2.10.0+cu130", "13.0", True)
    with pytest.raises(HostTorchMismatchError) as exc:
        check_host_torch(want, other)
    assert "version 2.10.0+cu130 (lock: 2.11.0+cu130)" in exc.value.cause
    check_host_torch(None, other)  # a hermetic lock: nothing to compare


def test_host_torch_keeps_the_rows_drops() -> None:
    """The row's drop_packages and the interpreter's kept packages share one override list (neither is lost)."""
    real = load_matrix()
    r = resolve(real, ResolveRequest(row="26.04", row_option="release", mode="host-torch", host_torch=GPU_HOST,
                                     glibc="2.39"))
    assert r.dropped, "the 26.04 row drops emerging-optimizers"
    text = render_pyproject(r, real, [], {})
    for name in (*r.dropped, "torch", "triton"):
        assert f"\"{name}; sys_platform == 'never'\"" in text, name
    hermetic = render_pyproject(resolve(real, ResolveRequest(row="26.04", row_option="release", glibc="2.39")),
                                real, [], {})
    assert all(f"\"{n}; sys_platform == 'never'\"" in hermetic for n in r.dropped)


def test_torch_facts_file_is_what_the_probe_prints(tmp_path: Path) -> None:
    """`python -m envbuilder.host.torchprobe` on a target, read back by lock --host-torch-facts."""
    import json
    import subprocess
    import sys

    from envbuilder.errors import BuildTorchError
    from envbuilder.host.torchprobe import read_torch_facts

    printed = subprocess.run([sys.executable, "-m", "envbuilder.host.torchprobe"], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).resolve().parents[2]).stdout
    data = json.loads(printed)
    assert data["python"] == f"{sys.version_info[0]}.{sys.version_info[1]}" and "build_modules" in data
    probe = tmp_path / "probe.json"
    # the GPU machine's facts in the probe's own format
    data.update(torch="2.11.0+cu130", cuda="13.0", cxx11abi=True, present=["torch", "triton"],
                executable="/opt/torch/.venv/bin/python3", python="3.12", py_tag="cp312")
    data.pop("torch_error", None)
    probe.write_text(json.dumps(data))
    ht = read_torch_facts(probe)
    assert ht.to_dict() == GPU_HOST.to_dict() and ht.interpreter == "/opt/torch/.venv/bin/python3"
    no_torch = tmp_path / "none.json"
    no_torch.write_text(json.dumps({k: v for k, v in data.items() if k != "torch"} | {"torch_error": "ImportError"}))
    with pytest.raises(BuildTorchError, match="cannot import torch"):
        read_torch_facts(no_torch)
    bad = tmp_path / "bad.json"
    bad.write_text('{"python": "3.12"}')
    with pytest.raises(BuildTorchError, match="not a torch probe"):
        read_torch_facts(bad)
    bad.write_text("not json")
    with pytest.raises(BuildTorchError, match="not valid JSON"):
        read_torch_facts(bad)
