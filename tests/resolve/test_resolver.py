"""Resolver rules: consistent sets with provenance, and typed conflicts naming both sides and a fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.errors import (
    InvalidOptionError,
    ResolveConflictError,
    UnknownPackageError,
    UnknownTagError,
)
from envbuilder.matrix import Matrix, load_matrix
from envbuilder.resolve import HostFacts, ResolveRequest, parse_set, resolve

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "matrix"


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load_matrix(FIXTURE)


def req(**kw: object) -> ResolveRequest:
    sets = kw.pop("sets", ())
    return ResolveRequest(row=str(kw.pop("nemo", "v2.3.0")), overrides=parse_set(list(sets)), **kw)  # type: ignore


def test_default_resolution_has_provenance(m: Matrix) -> None:
    r = resolve(m, req())
    assert r.pins["torch"].version == "2.7.0" and r.pins["torch"].stage == 1
    assert r.pins["torch"].provenance == "matrix:nemo.toml#v2.3.0.torch"
    assert {p.name for p in r.stage(2)} == {"flash-attn", "mamba-ssm", "transformer-engine",
                                            "transformer-engine-cu12", "transformer-engine-torch"}
    assert r.python == "3.12" and r.requires_python == ">=3.10,<3.13"
    assert r.min_driver == "570.26"
    assert "causal-conv1d" in r.omitted and "unknown" in r.omitted["causal-conv1d"]
    # PyPI's torch 2.7.0 is cu126: same CUDA major as the row's cu128, so no extra index by default
    assert r.torch_index is None and r.torch_variant == "cu126"
    assert any("cu126" in w for w in r.warnings)


def test_override_provenance_and_exact_variant_index(m: Matrix) -> None:
    r = resolve(m, req(sets=["flash-attn==2.7.4.post1"], torch_index="pytorch"))
    assert r.pins["flash-attn"].provenance == "override:--set flash-attn==2.7.4.post1"
    assert r.torch_index == "https://download.pytorch.org/whl/cu128"


def test_host_driver_and_sm_recorded(m: Matrix) -> None:
    r = resolve(m, req(host=HostFacts(origin="detected", driver="570.133.20", sm="9.0", gpu_name="H100")))
    assert r.provenance["driver"] == "host:detected" and r.sm == "9.0"


def test_drop_component_with_none(m: Matrix) -> None:
    r = resolve(m, req(sets=["flash-attn==none"], host=HostFacts(origin="planned", sm="7.0", gpu_name="V100")))
    assert "flash-attn" not in r.pins and "flash-attn" in r.omitted
    assert any("FP8 needs sm89+" in w for w in r.warnings)


def test_prefer_and_warn_notes_surface(m: Matrix) -> None:
    r = resolve(m, req(nemo="v2.4.0"))
    assert any("prefer --nemo v2.4.1" in w for w in r.warnings)
    assert any("training bug" in w for w in r.warnings)


def test_ngc_base_keeps_container_torch(m: Matrix) -> None:
    r = resolve(m, req(mode="ngc-base"))
    assert "torch" not in r.pins and "kept from nvcr.io/nvidia/nemo:25.04" in r.omitted["torch"]


def test_git_source_tags(m: Matrix) -> None:
    r = resolve(m, req(source="git"))
    assert r.pins["megatron-core"].git_tag == "core_v0.12.0"
    assert r.pins["nemo-toolkit"].git_url == "https://github.com/NVIDIA/NeMo.git"
    assert r.pins["torch"].git_url is None


def test_minor_compat_downgrades_driver_conflict_to_warning(m: Matrix) -> None:
    host = HostFacts(origin="planned", driver="535.104.05")
    with pytest.raises(ResolveConflictError):
        resolve(m, req(host=host))
    r = resolve(m, req(host=host, allow_minor_compat=True))
    assert any("minor-version compatibility" in w for w in r.warnings)


# ---- conflicts: each names both sides and a fix -------------------------------------------------

CONFLICTS = [
    # (id, request kwargs, error type, substrings in cause, substring in fix)
    ("unknown-tag", {"nemo": "v9.9.9"}, UnknownTagError, ["unknown NeMo tag 'v9.9.9'", "v2.3.0", "v2.6.0"],
     "envbuilder matrix list"),
    ("unknown-set-package", {"sets": ["numpy==2.0"]}, UnknownPackageError, ["does not manage 'numpy'"],
     "flash-attn"),
    ("flash-outside-te", {"sets": ["flash-attn==2.8.3"]}, ResolveConflictError,
     ["flash-attn 2.8.3", "transformer-engine 2.2.0", "<=2.7.4.post1"], "drop --set flash-attn or use --nemo v2.6.0"),
    ("te-override-rejects-flash", {"nemo": "v2.6.0", "sets": ["transformer-engine==2.2.0"]}, ResolveConflictError,
     ["flash-attn 2.8.3", "transformer-engine 2.2.0"], "drop --set transformer-engine"),
    ("python-below-row", {"python": "3.9"}, ResolveConflictError, ["Python 3.9", "nemo v2.3.0", ">=3.10,<3.13"],
     "--python 3.12"),
    ("mcore-017-needs-312", {"nemo": "v2.6.0", "python": "3.11"}, ResolveConflictError,
     ["Python 3.11", "megatron-core 0.17.0", ">=3.12"], "--python 3.13"),
    ("mcore-017-in-old-row", {"sets": ["megatron-core==0.17.0"], "python": "3.10"}, ResolveConflictError,
     ["megatron-core 0.17.0"], "--python 3.12"),
    ("torch-no-cuda-variant", {"cuda": "12.4"}, ResolveConflictError,
     ["torch 2.7.0 ships no wheel for CUDA 12.4 (cu124)", "cu118, cu126, cu128"], "--cuda 12.8"),
    ("driver-too-old", {"host": HostFacts(origin="planned", driver="545.23.06")}, ResolveConflictError,
     ["driver 545.23.06", "570.26 needed by CUDA 12.8 (nemo v2.3.0)"], "forward compatibility"),
    ("driver-too-old-even-for-minor-compat", {"host": HostFacts(origin="planned", driver="470.57.02"),
                                              "allow_minor_compat": True}, ResolveConflictError,
     ["driver 470.57.02"], "upgrade the driver"),
    ("v100-flash-attn", {"host": HostFacts(origin="planned", sm="7.0", gpu_name="V100")}, ResolveConflictError,
     ["flash-attn 2.7.3 needs sm80+", "V100 is sm70"], "--set flash-attn==none"),
    ("ngc-base-with-torch", {"mode": "ngc-base", "torch": "2.7.1"}, ResolveConflictError,
     ["--torch 2.7.1 conflicts with --mode ngc-base", "nemo:25.04"], "--mode hermetic"),
    ("ngc-base-with-cuda", {"mode": "ngc-base", "cuda": "12.6"}, ResolveConflictError,
     ["--cuda 12.6 conflicts with --mode ngc-base"], "drop --cuda"),
    ("ngc-base-unknown-container", {"nemo": "v2.6.0", "mode": "ngc-base"}, ResolveConflictError,
     ["NGC container of nemo v2.6.0"], "--mode hermetic"),
    ("bad-version-in-set", {"sets": ["flash-attn==latest"]}, InvalidOptionError, ["'latest' is not a version"],
     "'none'"),
    ("torch-twice", {"torch": "2.7.1", "sets": ["torch==2.7.0"]}, InvalidOptionError, ["both given"], "one of"),
    ("bad-mode", {"mode": "docker"}, InvalidOptionError, ["--mode docker"], "hermetic"),
]


@pytest.mark.parametrize(("kw", "err", "in_cause", "in_fix"), [c[1:] for c in CONFLICTS], ids=[c[0] for c in CONFLICTS])
def test_conflicts(m: Matrix, kw: dict[str, object], err: type[Exception], in_cause: list[str], in_fix: str) -> None:
    with pytest.raises(err) as e:
        resolve(m, req(**kw))
    exc = e.value
    for s in in_cause:
        assert s in exc.cause, f"{s!r} not in {exc.cause!r}"  # type: ignore[attr-defined]
    assert in_fix in (exc.fix or ""), f"{in_fix!r} not in fix {exc.fix!r}"  # type: ignore[attr-defined]
    assert "\n" not in exc.cause  # type: ignore[attr-defined]


def test_parse_set_rejects_garbage() -> None:
    with pytest.raises(InvalidOptionError, match="not NAME==VERSION"):
        parse_set(["flash-attn>=2"])
    assert parse_set(["Flash_Attn==2.7.3", "lightning==2.5.0"]) == (
        ("flash-attn", "2.7.3"), ("lightning", "2.5.0"))
