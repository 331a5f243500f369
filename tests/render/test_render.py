"""The rendered two-stage pyproject: structure rules, determinism and golden files for v2.3.0."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from golden_files import check_golden

from envbuilder.matrix import Matrix, load_matrix
from envbuilder.render import render_pyproject
from envbuilder.resolve import ResolveRequest, parse_set, resolve

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "matrix"


@pytest.fixture(scope="module")
def fm() -> Matrix:
    return load_matrix(FIXTURE)


def _render(m: Matrix, **kw: object) -> dict:  # type: ignore[type-arg]
    sets = kw.pop("sets", ())
    res = resolve(m, ResolveRequest(row=str(kw.pop("nemo", "v2.3.0")), overrides=parse_set(list(sets)), **kw))  # type: ignore[arg-type]
    return tomllib.loads(render_pyproject(res, m))


def test_stage2_has_one_metadata_record_per_package_matching_the_pin(fm: Matrix) -> None:
    doc = _render(fm)
    compile_ = doc["project"]["optional-dependencies"]["compile"]
    pins = dict(r.split("==") for r in compile_)
    uv = doc["tool"]["uv"]
    assert sorted(uv["no-build-isolation-package"]) == sorted(pins)
    meta = uv["dependency-metadata"]
    assert sorted(m["name"] for m in meta) == sorted(pins)  # exactly one record each
    for rec in meta:
        assert rec["version"] == pins[rec["name"]]
    flash = next(m for m in meta if m["name"] == "flash-attn")
    assert flash["requires-dist"] == ["einops", "torch"]  # from build_packages.toml, not a guess
    # TE parts are explicit: the [pytorch] extra cannot be used with no-build-isolation
    assert {"transformer-engine", "transformer-engine-cu12", "transformer-engine-torch"} <= set(pins)
    assert not any("[" in r for r in compile_)


def test_stage1_carries_torch_and_stage2_build_requirements(fm: Matrix) -> None:
    deps = _render(fm)["project"]["dependencies"]
    names = {d.split("[")[0].split("=")[0].split("<")[0] for d in deps}
    assert "torch==2.7.0" in deps and "nemo-toolkit[all]==2.3.0" in deps
    assert {"psutil", "ninja", "packaging", "pybind11", "setuptools", "wheel"} <= names
    assert deps == sorted(deps, key=lambda d: d.split("[")[0].split("=")[0])


def test_tool_uv_settings(fm: Matrix) -> None:
    uv = _render(fm)["tool"]["uv"]
    assert uv["exclude-newer"] == "2025-05-20T00:00:00Z"
    assert uv["environments"] == ["sys_platform == 'linux' and platform_machine == 'x86_64'"]
    assert "index" not in uv and "override-dependencies" not in uv


def test_exact_variant_gets_an_explicit_torch_index(fm: Matrix) -> None:
    uv = _render(fm, torch_index="pytorch")["tool"]["uv"]
    assert uv["index"] == [{"name": "pytorch-cu128", "url": "https://download.pytorch.org/whl/cu128", "explicit": True}]
    assert uv["sources"]["torch"] == {"index": "pytorch-cu128"}


def test_ngc_base_never_replaces_torch(fm: Matrix) -> None:
    doc = _render(fm, mode="ngc-base")
    uv = doc["tool"]["uv"]
    assert uv["override-dependencies"] == ["torch; sys_platform == 'never'", "torchvision; sys_platform == 'never'",
                                           "triton; sys_platform == 'never'"]
    assert not any(d.startswith("torch==") for d in doc["project"]["dependencies"])


def test_git_source_renders_tags(fm: Matrix) -> None:
    doc = _render(fm, source="git")
    src = doc["tool"]["uv"]["sources"]
    assert src["nemo-toolkit"] == {"git": "https://github.com/NVIDIA/NeMo.git", "tag": "v2.3.0"}
    assert src["megatron-core"] == {"git": "https://github.com/NVIDIA/Megatron-LM.git", "tag": "core_v0.12.0"}
    assert "nemo-toolkit[all]" in doc["project"]["dependencies"]


def test_platform_constraints_are_rendered_sorted(fm: Matrix) -> None:
    res = resolve(fm, ResolveRequest(row="v2.3.0"))
    text = render_pyproject(res, fm, ["zz<2", "nvidia-resiliency-ext<0.5"])
    assert tomllib.loads(text)["tool"]["uv"]["constraint-dependencies"] == ["nvidia-resiliency-ext<0.5", "zz<2"]


def test_render_is_deterministic(fm: Matrix) -> None:
    res = resolve(fm, ResolveRequest(row="v2.3.0", source="git"))
    assert render_pyproject(res, fm) == render_pyproject(res, fm)


GOLDEN_CASES = {
    "v2.3.0-hermetic.toml": {},
    "v2.3.0-ngc-base.toml": {"mode": "ngc-base"},
    "v2.3.0-git.toml": {"source": "git"},
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_v2_3_0(repo_root: Path, name: str) -> None:
    """Real matrix, fixed inputs (tests/golden_files.py says how to regenerate after a matrix change)."""
    m = load_matrix(repo_root / "matrices")
    if m.find_release("v2.3.0") is None:
        pytest.skip("matrix has no v2.3.0 row")
    res = resolve(m, ResolveRequest(row="v2.3.0", **GOLDEN_CASES[name]))  # type: ignore[arg-type]
    check_golden(f"pyproject/{name}", render_pyproject(res, m))
