"""build --wheelhouse: stage 2 from `envbuilder wheels` output, and which wheelhouses a build accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuilder.archlist import ArchList
from envbuilder.errors import HashMismatchError, InvalidOptionError
from envbuilder.image.render import RenderValues, render_dockerfile
from envbuilder.kernels import wheelhouse_for_lock
from envbuilder.lock.record import sha256_file

BASE = dict(mode="hermetic", builder_base="envbuilder/test-base:bookworm", runtime_base="envbuilder/test-base:bookworm",
            python="3.11", python_from="system", archs=ArchList.parse("9.0"), jobs=2)


@pytest.mark.parametrize("mode", ["hermetic", "ngc-base"])
def test_wheelhouse_stage2_installs_wheels_and_skips_their_sdists(mode: str) -> None:
    plain = render_dockerfile(RenderValues(**{**BASE, "mode": mode}))  # type: ignore[arg-type]
    text = render_dockerfile(RenderValues(**{**BASE, "mode": mode}, wheelhouse=True,  # type: ignore[arg-type]
                                          stage2_packages=("causal-conv1d", "mamba-ssm")))
    assert "wheelhouse" not in plain  # without --wheelhouse the Dockerfile is what it was
    builder = text[text.index("AS builder"):text.index("AS runtime")]
    assert "--mount=type=bind,source=wheelhouse,target=/opt/envbuilder/wheelhouse" in builder
    assert "COPY wheelhouse" not in text  # mounted for the one step, never a layer
    sync = next(ln for ln in builder.splitlines() if "--extra compile" in ln)
    assert "--no-install-package causal-conv1d" in sync and "--no-install-package mamba-ssm" in sync
    assert "uv pip install --python /opt/venv/bin/python --no-deps --offline --no-index " \
           "/opt/envbuilder/wheelhouse/*.whl" in builder


def _wheelhouse(tmp: Path, lock: str = "a" * 64, torch: str = "2.13.0+cpu") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    whl = tmp / "demo-1.0+cputorch2.13cxx11abiTRUE-py3-none-any.whl"
    whl.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip
    rec = {"schema": 1, "lock_sha256": lock, "torch": {"version": torch, "cuda": None, "cxx11abi": True,
                                                       "python": "3.12", "kept": []}, "arch_list": "9.0",
           "packages": [{"name": "demo", "version": "1.0", "wheel": whl.name, "sha256": sha256_file(whl),
                         "cache_key": "c" * 64, "sdist_sha256": "d" * 64, "cuda_sources": 0, "arch_env": {},
                         "arch_check": "skipped: the sdist has no CUDA sources (C++ extension only)",
                         "archs": [], "patch": None}]}
    (tmp / "wheelhouse.json").write_text(json.dumps(rec))
    return tmp


def test_wheelhouse_for_lock_checks_lock_torch_and_hashes(tmp_path: Path) -> None:
    wh = _wheelhouse(tmp_path / "wh")
    wheels, names = wheelhouse_for_lock(wh, "a" * 64, "2.13.0")
    assert names == ["demo"] and [w.name for w in wheels] == ["demo-1.0+cputorch2.13cxx11abiTRUE-py3-none-any.whl"]
    with pytest.raises(InvalidOptionError, match="built for lock"):
        wheelhouse_for_lock(wh, "b" * 64, "2.13.0")
    with pytest.raises(InvalidOptionError, match=r"compiled against torch 2\.13\.0"):
        wheelhouse_for_lock(wh, "a" * 64, "2.11.0")
    wheels[0].write_bytes(b"changed")
    with pytest.raises(HashMismatchError):
        wheelhouse_for_lock(wh, "a" * 64, "2.13.0")
