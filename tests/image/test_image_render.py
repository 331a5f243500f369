"""Dockerfile rendering: golden files, the top-level Dockerfile, arch lists, base choice.

Golden files: tests/golden/image/ (tests/golden_files.py says how to regenerate them; the same
switch regenerates /Dockerfile, which `make dockerfile` also writes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from golden_files import UPDATE_VAR, check_golden, updating

from envbuilder.archlist import ArchList
from envbuilder.choices import LockMode
from envbuilder.errors import InvalidOptionError
from envbuilder.image import images
from envbuilder.image.render import (
    RenderValues,
    render_dockerfile,
    render_toplevel,
)
from envbuilder.lock.record import LockRecord, LockTarget

REPO = Path(__file__).resolve().parents[2]

CASES = {
    "Dockerfile.hermetic-cuda": RenderValues(
        mode="hermetic", builder_base="nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04",
        runtime_base="nvidia/cuda:12.8.1-runtime-ubuntu24.04", python="3.12", python_from="uv",
        archs=ArchList.parse("8.0;9.0;10.0"), jobs=8),
    "Dockerfile.hermetic-smoke-secrets": RenderValues(
        mode="hermetic", builder_base="envbuilder/test-base:bookworm", runtime_base="envbuilder/test-base:bookworm",
        python="3.11", python_from="system", archs=None, jobs=2, secret_ids=("HF_TOKEN", "NGC_API_KEY")),
    "Dockerfile.ngc-base": RenderValues(
        mode="ngc-base", builder_base="nvcr.io/nvidia/pytorch:25.04-py3",
        runtime_base="nvcr.io/nvidia/pytorch:25.04-py3",
        python="3.12", python_from="system", archs=ArchList.parse("9.0"), jobs=4),
}


def _check_golden(name: str, text: str) -> None:
    check_golden(f"image/{name}", text)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_dockerfile_matches_golden(name: str) -> None:
    _check_golden(name, render_dockerfile(CASES[name]))


def test_hermetic_structure() -> None:
    text = render_dockerfile(CASES["Dockerfile.hermetic-cuda"])
    froms = [ln for ln in text.splitlines() if ln.startswith("FROM ")]
    assert froms == ["FROM ${BUILDER_BASE} AS stage1", "FROM stage1 AS builder", "FROM ${RUNTIME_BASE} AS runtime"]
    # stage 1 then stage 2, both frozen; the runtime stage copies the venv and runs no uv
    s1 = text.index("uv sync --frozen --no-install-project --python")
    s2 = text.index("uv sync --frozen --no-install-project --extra compile")
    assert text.index("AS stage1") < s1 < text.index("AS builder") < s2 < text.index("AS runtime")
    runtime = text[text.index("AS runtime"):]
    assert "uv sync" not in runtime and "COPY --from=builder /opt/venv /opt/venv" in runtime
    assert "import_check.py" in runtime
    # cache mount on every fetching step; the CA only as a secret mount, never COPY'd
    assert text.count("--mount=type=cache,target=/root/.cache/uv") == 3
    assert text.count("--mount=type=secret,id=ca") == 3
    assert "COPY" not in "".join(ln for ln in text.splitlines() if "ca-certificates" in ln or "secrets" in ln)
    for label in ("io.envbuilder.lock-sha256", "io.envbuilder.row", "io.envbuilder.version",
                  "io.envbuilder.source-date-epoch", "org.opencontainers.image.created"):
        assert label in runtime
    assert "ARG TORCH_CUDA_ARCH_LIST=8.0;9.0;10.0" in text and "ARG NVTE_CUDA_ARCHS=80;90;100" in text
    assert "ARG MAX_JOBS=8" in text


def test_user_secrets_are_mounted_and_exported_in_fetch_steps_only() -> None:
    text = render_dockerfile(CASES["Dockerfile.hermetic-smoke-secrets"])
    assert text.count("--mount=type=secret,id=HF_TOKEN") == 3
    assert text.count('export HF_TOKEN="$(cat /run/secrets/HF_TOKEN)"') == 3
    assert "secrets" not in text[text.index("AS runtime"):]


def test_ngc_base_keeps_container_torch_and_clears_pip_constraint() -> None:
    text = render_dockerfile(CASES["Dockerfile.ngc-base"])
    assert "FROM ${BUILDER_BASE} AS stage1" in text and "ENV PIP_CONSTRAINT=\"\"" in text
    assert "uv venv --system-site-packages" in text
    assert "pip install" not in text
    assert "uv python install" not in text


def test_toplevel_dockerfile_is_the_rendered_template() -> None:
    """/Dockerfile is the hermetic template rendered for a repo-root context: one source of truth."""
    builder, runtime = images.default_bases()
    text = render_toplevel(builder, runtime)
    path = REPO / "Dockerfile"
    if updating():
        path.write_text(text)
    assert path.read_text() == text, f"Dockerfile is stale: run `make dockerfile` (or {UPDATE_VAR}=1)"
    assert "ARG LOCKDIR=build/v2.3.0" in text and "COPY ${LOCKDIR}/ ./" in text


def _target(**kw: str | None) -> LockTarget:
    base = dict(python="3.12", requires_python="==3.12.*", cuda=None, cudnn=None, torch=None, torch_variant=None,
                torch_index=None, min_driver=None, glibc="2.35", platform="linux-x86_64", container=None)
    return LockTarget(**{**base, **kw})  # type: ignore[arg-type]


def test_bases_from_images_toml() -> None:
    choice = images.choose_bases(_target(cuda="12.8", python="3.12"), LockMode.HERMETIC, None)
    assert "devel" in choice.builder and "runtime" in choice.runtime and "12.8" in choice.builder
    assert choice.python_from == "uv" and not choice.digest_pinned and choice.warning()
    # every CUDA a committed lock targets has bases (26.04 and 26.06 lock torch cu130)
    from pathlib import Path

    for rec in sorted((Path(__file__).resolve().parents[2] / "locks").glob("*/envbuilder.lock.json")):
        target = LockRecord.from_json(rec.read_text()).target
        if target.cuda not in (None, "none"):
            assert images.choose_bases(target, LockMode.HERMETIC, None).builder, rec.parent.name
    cu13 = images.choose_bases(_target(cuda="13.0", python="3.12"), LockMode.HERMETIC, None)
    assert cu13.builder == "nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04"
    smoke = images.choose_bases(_target(cuda=None, python="3.11"), LockMode.HERMETIC, None)
    assert smoke.builder == images.test_base_tag() and smoke.python_from == "system"
    with pytest.raises(InvalidOptionError):
        images.choose_bases(_target(cuda="11.0"), LockMode.HERMETIC, None)
    ngc = images.choose_bases(_target(container="nvcr.io/nvidia/pytorch:25.04-py3"), LockMode.NGC_BASE, None)
    assert ngc.builder == "nvcr.io/nvidia/pytorch:25.04-py3"
    with pytest.raises(InvalidOptionError):
        images.choose_bases(_target(container="nvcr.io/nvidia/nemo:25.04"), LockMode.NGC_BASE, None)
    pinned = images.choose_bases(_target(), LockMode.HERMETIC, "repo/x:1@sha256:" + "0" * 64)
    assert pinned.digest_pinned and pinned.warning() is None


def test_images_toml_digests_are_verified_or_unknown() -> None:
    import tomllib

    data = tomllib.loads((REPO / "matrices" / "images.toml").read_text())
    for entry in data["cuda"]:
        for key in ("builder", "runtime"):
            digest = entry[key]["digest"]
            assert digest == "unknown" or (digest.startswith("sha256:") and len(digest) == 71)
            assert entry[key]["source"].startswith("https://")


def test_stage1_skips_deferred_stage2_packages() -> None:
    """nemo-toolkit 2.0/2.1 [all] requires mamba-ssm: stage 1 must not build it before torch exists."""
    from envbuilder.image.render import RenderValues, render_dockerfile

    text = render_dockerfile(RenderValues(mode="hermetic", builder_base="b", runtime_base="r", python="3.11",
                                          python_from="system", archs=ArchList.parse("9.0"), jobs=2,
                                          stage1_skip=("mamba-ssm",)))
    stage1 = next(ln for ln in text.splitlines() if "uv sync --frozen --no-install-project --python" in ln)
    assert stage1.endswith("--no-install-package mamba-ssm")
    stage2 = next(ln for ln in text.splitlines() if "--extra compile" in ln)
    assert "no-install-package" not in stage2
