"""Local git repositories of generated release trees, for `matrix derive` and the drift job's tests.

tests/release_facts.py renders each Megatron-Bridge tag's files from a few facts; these helpers commit the
trees into fresh bare repositories, one commit per tag, so derive reads them exactly as it reads a mirror.
Git cannot make a commit with a given id, so the Megatron-LM repository's commits (each holding a
package_info.py with the version of the commit the real tag pins) get new ids, and the release's
3rdparty/Megatron-LM gitlink points at those.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from release_facts import MEGATRON_LM, package_info

# what stays committed under tests/fixtures/derive/: the recorded PyPI snapshots (README.md there)
SNAPSHOTS = Path(__file__).resolve().parent / "fixtures" / "derive"
GIT_ENV = {"GIT_AUTHOR_NAME": "fixture", "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
           "GIT_COMMITTER_NAME": "fixture", "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
           "GIT_AUTHOR_DATE": "2026-08-19T18:50:28+00:00", "GIT_COMMITTER_DATE": "2026-08-19T18:50:28+00:00"}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def release_repo(tmp: Path, trees: Mapping[str, Path], submodules: Mapping[str, str] | None = None,
                 name: str = "Megatron-Bridge.git") -> Path:
    """A bare repository with one commit per tag; `trees` maps a tag to the directory to commit
    (release_facts.write_releases), `submodules` a tag to the Megatron-LM commit its gitlink pins
    (megatron_lm_repo's ids)."""
    work = tmp / f"{name}.work"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    for tag, tree in trees.items():
        for p in list(work.iterdir()):
            if p.name != ".git":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        shutil.copytree(tree, work, dirs_exist_ok=True)
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
    """A bare Megatron-LM with one commit per pinned release (a package_info.py of that commit's version),
    and the release tag -> commit id map for release_repo's gitlinks."""
    work = tmp / "Megatron-LM.work"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    commits = {}
    for tag, (real, version) in MEGATRON_LM.items():
        dst = work / "megatron" / "core"
        dst.mkdir(parents=True, exist_ok=True)
        (dst / "package_info.py").write_text(package_info(version))
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "-m", f"package_info.py as at {real[:8]}, the commit {tag} pins")
        commits[tag] = _git(work, "rev-parse", "HEAD")
    bare = tmp / "Megatron-LM.git"
    _git(tmp, "clone", "-q", "--bare", str(work), str(bare))
    shutil.rmtree(work)
    return bare, commits
