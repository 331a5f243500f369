"""Assemble a build context: the lock files, the uv binary that made the lock, the in-image tools.

Layout (what the templates' default paths expect):
    Dockerfile
    lock/            pyproject.toml, uv.lock, wheels/ (if any): all stage 1 depends on
    record/          envbuilder.lock.json (stage 2 reads its stage2_env)
    tools/uv         the uv binary envbuilder runs (same version as the lock's uv_version)
    tools/envbuilder import_check.py, stage2_env.py, git_sources.py
    tools/gittree.py  envbuilder/kernels/gittree.py, which git_sources.py imports
    git-sources/     the lock's git-tag sources as checked archives (kernels/gitsource.py), when it has any:
                     bind-mounted into stage 2 only, so stage 1's layers never depend on them
Every file gets the lock's SOURCE_DATE_EPOCH as mtime, so COPY layers do not carry the time
the context happened to be assembled.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from envbuilder.errors import LockDirError
from envbuilder.lock.lockdir import LockDir
from envbuilder.lock.record import RECORD_NAME

TOOLS_DIR = Path(__file__).resolve().parent / "tools"
TOOLS = ("import_check.py", "stage2_env.py", "git_sources.py")
# the in-image git_sources.py recomputes trees with envbuilder's own module (standard library only)
GITTREE = Path(__file__).resolve().parents[1] / "kernels" / "gittree.py"
GIT_SOURCES_DIR = "git-sources"


def _copy(src: Path, dst: Path, mtime: int, mode: int = 0o644) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    os.chmod(dst, mode)
    os.utime(dst, (mtime, mtime))


def assemble(ctx: Path, lock: LockDir, dockerfile: str, uv: Path, wheelhouse: list[Path] | None = None,
             git_sources: list[Path] | None = None) -> list[str]:
    """Fill `ctx` (an empty directory); returns the context's files, relative and sorted."""
    mtime = lock.source_date_epoch
    for whl in wheelhouse or []:
        _copy(whl, ctx / "wheelhouse" / whl.name, mtime)
    for archive in git_sources or []:
        _copy(archive, ctx / GIT_SOURCES_DIR / archive.name, mtime)
    for rel in lock.files():
        src = lock.path / rel
        if not src.is_file():
            raise LockDirError(f"{lock.path}: {rel} is listed but missing", "re-run envbuilder lock")
        _copy(src, ctx / ("record" if str(rel) == RECORD_NAME else "lock") / rel, mtime)
    _copy(uv, ctx / "tools" / "uv", mtime, 0o755)
    for name in TOOLS:
        _copy(TOOLS_DIR / name, ctx / "tools" / "envbuilder" / name, mtime)
    _copy(GITTREE, ctx / "tools" / GITTREE.name, mtime)
    (ctx / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    os.utime(ctx / "Dockerfile", (mtime, mtime))
    for d in sorted(p for p in ctx.rglob("*") if p.is_dir()):
        os.utime(d, (mtime, mtime))
    return sorted(str(p.relative_to(ctx)) for p in ctx.rglob("*") if p.is_file())
