"""Stage-2 sources from git tags: the tree id recomputed as git computes it, and the routes a source
comes by (a bare repository the test creates, served over file:// and as a mirror; carried archives;
the cache), each ending in the same check."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from envbuilder.errors import GitSourceMismatchError, GitSourceUnavailableError
from envbuilder.kernels import gitsource, gittree
from envbuilder.lock.record import GitSource


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd or Path.cwd())}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def make_repo(root: Path, files: dict[str, bytes], tag: str = "v1.0") -> tuple[Path, str, str]:
    """A work tree with `files` committed and tagged; (work tree, commit, tree)."""
    root.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=root)
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "one", cwd=root)
    git("tag", tag, cwd=root)
    return root, git("rev-parse", "HEAD", cwd=root), git("rev-parse", "HEAD^{tree}", cwd=root)


KERNEL_FILES = {"setup.py": b"from setuptools import setup\nsetup()\n", "kern/__init__.py": b"__version__ = '1.0'\n",
                "csrc/k_fwd.cu": b"// kernel\n", "csrc/k.h": b"//\n"}


def test_tree_id_is_gits_for_files_modes_links_and_name_order(tmp_path: Path) -> None:
    files = {"a.b": b"1", "a/x": b"2", "a0": b"3", "a/deep/er/f.txt": b"", "run.sh": b"#!/bin/sh\n",
             "z/y": b"\xff\x00binary"}
    work, _, tree = make_repo(tmp_path / "w", files)
    os.chmod(work / "run.sh", 0o755)
    os.symlink("a/x", work / "link")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "two", cwd=work)
    tree = git("rev-parse", "HEAD^{tree}", cwd=work)
    from_dir = gittree.files_of_directory(work)
    assert gittree.tree_id(from_dir) == tree
    archive = subprocess.run(["git", "-C", str(work), "archive", "--format=tar", "--prefix=p-1/", "HEAD"],
                             check=True, capture_output=True).stdout
    from_tar = gittree.files_of_archive(archive)
    assert gittree.tree_id(from_tar) == tree
    packed = gittree.pack(from_tar, "p-1")
    assert packed == gittree.pack(list(reversed(from_tar)), "p-1")  # deterministic: order and time do not matter
    assert gittree.tree_id(gittree.files_of_archive(packed)) == tree
    out = gittree.extract(gittree.files_of_archive(packed), tmp_path / "x")
    assert gittree.tree_id(gittree.files_of_directory(out)) == tree
    # one flipped executable bit is another tree
    flipped = [gittree.SourceFile(f.path, gittree.REGULAR if f.path == "run.sh" else f.mode, f.data) for f in from_tar]
    assert gittree.tree_id(flipped) != tree


def test_github_archive_url_only_for_github() -> None:
    assert gittree.github_archive_url("https://github.com/state-spaces/mamba.git", "ab" * 20) == \
        f"https://github.com/state-spaces/mamba/archive/{'ab' * 20}.tar.gz"
    assert gittree.github_archive_url("file:///srv/mamba.git", "ab" * 20) is None


def test_mirror_values_and_names() -> None:
    m = gitsource.parse_mirrors(["https://github.com/Dao-AILab/causal-conv1d.git=/m/cc", "/mirrors"],
                                {gitsource.MIRRORS_ENV: "/other, git@github.com:a/b.git=/m/b"})
    assert [(str(x.path), x.url) for x in m] == [
        ("/m/cc", "https://github.com/Dao-AILab/causal-conv1d.git"), ("/mirrors", None), ("/other", None),
        ("/m/b", "git@github.com:a/b.git")]
    assert m[0].candidates("https://github.com/dao-ailab/causal-conv1d") == [Path("/m/cc")]
    assert m[0].candidates("https://github.com/state-spaces/mamba.git") == []
    assert Path("/mirrors/state-spaces+mamba/repo") in m[1].candidates("https://github.com/state-spaces/mamba.git")


@pytest.fixture()
def served(tmp_path: Path) -> tuple[Path, GitSource]:
    """A bare repository holding a tagged kernel package, and the record entry naming it by file:// URL."""
    work, commit, tree = make_repo(tmp_path / "work", KERNEL_FILES)
    bare = tmp_path / "srv" / "kern.git"
    git("clone", "-q", "--bare", str(work), str(bare))
    src = GitSource(url=bare.as_uri(), tag="v1.0", commit=commit, tree=tree, source="test", reason="test",
                    force_build_env="KERN_FORCE_BUILD")
    return bare, src


def test_obtain_by_git_fetch_then_from_the_cache(tmp_path: Path, served: tuple[Path, GitSource]) -> None:
    _, src = served
    said: list[str] = []
    got = gitsource.obtain("kern", "1.0", src, tmp_path / "cache", progress=said.append)
    assert got.origin.startswith("git fetch file://") and got.cuda_sources == 1
    assert got.path.name == f"kern-v1.0-git{src.commit[:12]}.tar.gz"
    assert gittree.tree_id(gittree.files_of_archive(got.path.read_bytes())) == src.tree
    # an sdist-like tree: one top directory named like the package's sdist
    with tarfile.open(got.path) as tar:
        assert {n.split("/")[0] for n in tar.getnames()} == {"kern-1.0"}
    again = gitsource.obtain("kern", "1.0", src, tmp_path / "cache")
    assert again.origin == "cache" and again.sha256 == got.sha256


def test_obtain_from_a_mirror_for_an_unreachable_url(tmp_path: Path, served: tuple[Path, GitSource]) -> None:
    bare, src = served
    far = GitSource(**{**src.to_dict(), "url": "https://git.invalid/acme/kern.git"})
    with pytest.raises(GitSourceUnavailableError) as err:
        gitsource.obtain("kern", "1.0", far, tmp_path / "c0")
    assert err.value.exit_code == 118 and "--git-mirror https://git.invalid/acme/kern.git=PATH" in str(err.value.fix)
    by_url = gitsource.parse_mirrors([f"https://git.invalid/acme/kern.git={bare}"], {})
    assert gitsource.obtain("kern", "1.0", far, tmp_path / "c1", by_url).origin == f"mirror {bare}"
    # a directory of mirrors laid out as the fetch tool does: OWNER+NAME/repo
    (tmp_path / "mirrors" / "acme+kern").mkdir(parents=True)
    os.symlink(bare, tmp_path / "mirrors" / "acme+kern" / "repo")
    by_dir = gitsource.parse_mirrors([], {gitsource.MIRRORS_ENV: str(tmp_path / "mirrors")})
    assert gitsource.obtain("kern", "1.0", far, tmp_path / "c2", by_dir).origin.startswith("mirror ")


def test_a_moved_tag_or_changed_files_are_refused(tmp_path: Path, served: tuple[Path, GitSource]) -> None:
    bare, src = served
    good = gitsource.obtain("kern", "1.0", src, tmp_path / "cache")
    # someone re-tags v1.0 on another commit
    work = tmp_path / "work"
    (work / "csrc" / "k_fwd.cu").write_bytes(b"// other kernel\n")
    git("commit", "-qam", "two", cwd=work)
    git("tag", "-f", "v1.0", cwd=work)
    git("push", "-qf", str(bare), "refs/tags/v1.0", cwd=work)
    with pytest.raises(GitSourceMismatchError, match="the tag was moved"):
        gitsource.obtain("kern", "1.0", src, tmp_path / "fresh-cache")
    # a carried archive whose files were changed is refused, whatever its name says
    carried = tmp_path / "carried"
    carried.mkdir()
    files = [gittree.SourceFile(f.path, f.mode, b"// patched\n" if f.path.endswith(".cu") else f.data)
             for f in gittree.files_of_archive(good.path.read_bytes())]
    (carried / good.path.name).write_bytes(gittree.pack(files, "kern-1.0"))
    with pytest.raises(GitSourceMismatchError) as err:
        gitsource.obtain("kern", "1.0", src, tmp_path / "cache", carried=[carried])
    assert err.value.exit_code == 119 and src.tree[:12] in err.value.cause
    # a damaged cache entry is fetched again (from the mirror), not trusted
    good.path.write_bytes(gittree.pack(files, "kern-1.0"))
    old = gitsource.parse_mirrors([f"{src.url}={tmp_path / 'work'}"], {})  # still holds the recorded commit
    assert gitsource.obtain("kern", "1.0", src, tmp_path / "cache", old).origin == f"mirror {tmp_path / 'work'}"


def test_a_tag_without_cuda_sources_is_refused(tmp_path: Path) -> None:
    work, commit, tree = make_repo(tmp_path / "w", {"setup.py": b"", "kern/__init__.py": b""})
    src = GitSource(url=work.as_uri(), tag="v1.0", commit=commit, tree=tree, source="t", reason="t")
    with pytest.raises(GitSourceMismatchError, match="no CUDA sources either"):
        gitsource.obtain("kern", "1.0", src, tmp_path / "cache")


def test_builds_never_see_an_outer_repository_and_run_without_git(tmp_path: Path) -> None:
    """flash-attn 2.7.3's setup.py runs `git submodule update --init csrc/cutlass` unconditionally: inside a
    cache that sits in some repository it must find none, and on a host without git it must get an error exit,
    not a missing executable (FileNotFoundError ends its setup.py)."""
    from envbuilder.kernels.pipeline import git_env

    outer, _, _ = make_repo(tmp_path / "outer", {"README": b"x"})
    work = outer / "cache" / "build" / "flash-attn-x"
    src = work / "src" / "flash_attn-2.7.3"
    src.mkdir(parents=True)
    env = {**os.environ, **git_env(work, outer / "cache", dict(os.environ))}
    found = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=src, env=env, capture_output=True, text=True)
    assert found.returncode != 0 and "not a git repository" in found.stderr
    plain = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=src, capture_output=True, text=True)
    assert plain.stdout.strip() == str(outer)  # what the build would have seen without the ceiling
    no_git = {"PATH": "/nonexistent"}
    shimmed = git_env(work, tmp_path / "cache", no_git)
    run = subprocess.run(["git", "submodule", "update", "--init", "csrc/cutlass"], cwd=src, capture_output=True,
                         text=True, env={**shimmed, "PATH": shimmed["PATH"] + ":/bin:/usr/bin"})
    assert run.returncode == 127 and "git is not installed" in run.stderr
