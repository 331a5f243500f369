"""Local git repositories holding real upstream files, for `matrix derive` and the drift job's tests.

tests/fixtures/derive/ keeps files of NVIDIA-NeMo/Megatron-Bridge and NVIDIA/Megatron-LM at real tags
and commits (README.md there says which). These helpers commit them into fresh bare repositories, one
commit per tag, so derive reads them exactly as it reads a mirror. Git cannot make a commit with a given
id, so the Megatron-LM repository's commits (each holding the real package_info.py of the commit the
real tag pins) get new ids, and the release's 3rdparty/Megatron-LM gitlink points at those.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "derive"
# the submodule commit each real tag pins (git ls-tree TAG 3rdparty/Megatron-LM), by its fixture directory
SUBMODULE_FIXTURE = {"v0.4.0": "megatron-lm-d7288711", "v0.6.0": "megatron-lm-cd4afffa"}
GIT_ENV = {"GIT_AUTHOR_NAME": "fixture", "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
           "GIT_COMMITTER_NAME": "fixture", "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
           "GIT_AUTHOR_DATE": "2026-08-19T18:50:28+00:00", "GIT_COMMITTER_DATE": "2026-08-19T18:50:28+00:00"}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def release_repo(tmp: Path, tags: dict[str, str], submodules: dict[str, str] | None = None,
                 name: str = "Megatron-Bridge.git", root: Path = FIXTURES) -> Path:
    """A bare repository with one commit per tag; `tags` maps a tag to a fixture directory name,
    `submodules` a tag to the Megatron-LM commit its gitlink pins (megatron_lm_repo's ids)."""
    work = tmp / f"{name}.work"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    for tag, fixture in tags.items():
        for p in list(work.iterdir()):
            if p.name != ".git":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        shutil.copytree(root / fixture, work, dirs_exist_ok=True)
        _git(work, "add", "-A")
        commit = (submodules or {}).get(tag)
        if commit and (work / ".gitmodules").exists():
            _git(work, "update-index", "--add", "--cacheinfo", f"160000,{commit},3rdparty/Megatron-LM")
        _git(work, "commit", "-q", "--allow-empty", "-m", f"release {tag}")
        _git(work, "tag", tag)
    bare = tmp / name
    _git(tmp, "clone", "-q", "--bare", str(work), str(bare))
    shutil.rmtree(work)
    return bare


def megatron_lm_repo(tmp: Path) -> tuple[Path, dict[str, str]]:
    """A bare Megatron-LM with one commit per pinned fixture (the real package_info.py), and the
    release tag -> commit id map for release_repo's gitlinks."""
    work = tmp / "Megatron-LM.work"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    commits = {}
    for tag, fixture in SUBMODULE_FIXTURE.items():
        dst = work / "megatron" / "core"
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / fixture / "package_info.py", dst / "package_info.py")
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "-m", f"package_info.py as at the commit {tag} pins")
        commits[tag] = _git(work, "rev-parse", "HEAD")
    bare = tmp / "Megatron-LM.git"
    _git(tmp, "clone", "-q", "--bare", str(work), str(bare))
    shutil.rmtree(work)
    return bare, commits
