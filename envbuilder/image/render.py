"""Render Dockerfiles from templates/Dockerfile.<mode>.j2 (jinja2).

The template holds the structure; per-lock values (bases, Python, arch list, jobs, labels)
are Dockerfile ARGs whose defaults are rendered in and which the build also passes with
--build-arg. The stage-2 environment is read from the lock record inside the build
(tools/stage2_env.py), so one template serves every lock, and the top-level Dockerfile is
this same template rendered for a repository-root context (render_toplevel).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from envbuilder.archlist import ArchList
from envbuilder.choices import MODES
from envbuilder.errors import InvalidOptionError
from envbuilder.lock import record
from envbuilder.matrix.archs import default_arch_list
from envbuilder.templating import template_env

# the io.envbuilder.* label names the templates write (defined beside the lock record)
IMAGE_LABELS = {
    "lock_sha256": record.LABEL_LOCK_SHA256, "row": record.LABEL_ROW, "mode": record.LABEL_MODE,
    "version": record.LABEL_VERSION, "source_date": record.LABEL_SOURCE_DATE, "stage": record.LABEL_STAGE,
    "arch_list": record.LABEL_ARCH_LIST,
}
_SECRET_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class RenderValues:
    mode: str
    builder_base: str
    runtime_base: str
    python: str
    python_from: str                     # "system" | "uv"
    archs: ArchList | None               # None: no CUDA, nothing compiled for a GPU
    jobs: int
    secret_ids: tuple[str, ...] = ()     # besides "ca", always mounted
    lock_src: str = "lock"                # pyproject.toml, uv.lock, wheels/
    record_src: str = f"record/{record.RECORD_NAME}"
    uv_src: str = "tools/uv"
    tools_src: str = "tools/envbuilder"
    gittree_src: str = "tools/gittree.py"  # kernels/gittree.py: the in-image git_sources.py imports it
    lockdir_arg: str | None = None       # top-level Dockerfile: ARG LOCKDIR default
    stage1_skip: tuple[str, ...] = ()    # the record's stage1_deferred: stage-2 sdists stage 1 depends on
    wheelhouse: bool = False             # stage 2 from prebuilt wheels (envbuilder wheels) in wheelhouse_src/
    wheelhouse_src: str = "wheelhouse"
    stage2_packages: tuple[str, ...] = ()  # with wheelhouse: installed from it, not compiled
    git_sources: bool = False            # the record's git-tag sources are in git_sources_src/ (bind-mounted)
    git_sources_src: str = "git-sources"
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def arch_list(self) -> str:
        """TORCH_CUDA_ARCH_LIST form: '8.0;9.0+PTX' ('' without CUDA)."""
        return self.archs.torch if self.archs else ""

    @property
    def nvte_archs(self) -> str:
        """Transformer Engine's NVTE_CUDA_ARCHS form: '80;90'."""
        return self.archs.semicolon_numbers if self.archs else ""


def default_jobs() -> int:
    """Parallel compile jobs: one per core, at most one per 4 GiB (flash-attn's nvcc needs ~4 GiB)."""
    cpus = os.cpu_count() or 1
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return cpus
    return max(1, min(cpus, int(mem_gib // 4)))


def render_dockerfile(values: RenderValues, tdir: Path | None = None) -> str:
    if values.mode not in MODES:
        raise InvalidOptionError(f"--mode {values.mode!r} is not one of {', '.join(MODES)}", "use hermetic or ngc-base")
    for sid in values.secret_ids:
        if not _SECRET_ID.match(sid) or sid == "ca":
            raise InvalidOptionError(f"secret id {sid!r} is not usable", "use letters, digits and _ (not 'ca')")
    template = template_env(tdir).get_template(f"Dockerfile.{values.mode}.j2")
    text = template.render(
        mode=values.mode, builder_base=values.builder_base, runtime_base=values.runtime_base,
        python=values.python, python_from=values.python_from, arch_list=values.arch_list or '""',
        nvte_archs=values.nvte_archs or '""', jobs=values.jobs, secret_ids=sorted(values.secret_ids),
        lock_src=values.lock_src, record_src=values.record_src, uv_src=values.uv_src, tools_src=values.tools_src,
        gittree_src=values.gittree_src,
        lockdir_arg=values.lockdir_arg, stage1_skip=list(values.stage1_skip), label=IMAGE_LABELS,
        wheelhouse=values.wheelhouse, wheelhouse_src=values.wheelhouse_src,
        stage2_packages=list(values.stage2_packages), git_sources=values.git_sources,
        git_sources_src=values.git_sources_src, **values.extra,
    )
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


# Paths of the top-level Dockerfile's build context: the repository root after `make setup`.
TOPLEVEL_UV = ".venv/bin/uv"
TOPLEVEL_TOOLS = "envbuilder/image/tools"
TOPLEVEL_GITTREE = "envbuilder/kernels/gittree.py"


def render_toplevel(builder_base: str, runtime_base: str, python: str = "3.12",
                    lockdir: str = "build/v2.3.0", tdir: Path | None = None) -> str:
    """The repository's /Dockerfile: the hermetic template for a repo-root context."""
    values = RenderValues(
        mode="hermetic", builder_base=builder_base, runtime_base=runtime_base, python=python,
        python_from="uv", archs=default_arch_list("12.8", None), jobs=4,
        lock_src="${LOCKDIR}", record_src=f"${{LOCKDIR}}/{record.RECORD_NAME}", uv_src=TOPLEVEL_UV,
        tools_src=TOPLEVEL_TOOLS, gittree_src=TOPLEVEL_GITTREE, lockdir_arg=lockdir,
    )
    return render_dockerfile(values, tdir)


def write_toplevel(path: Path | None = None) -> Path:
    """Regenerate the repository's /Dockerfile (`make dockerfile`)."""
    from envbuilder.atomic import write_atomic
    from envbuilder.image.images import default_bases
    from envbuilder.paths import REPO_ROOT

    target = path or REPO_ROOT / "Dockerfile"
    write_atomic(target, render_toplevel(*default_bases()))
    return target


if __name__ == "__main__":
    print(write_toplevel())
