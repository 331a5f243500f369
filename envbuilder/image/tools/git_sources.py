"""Stage 2 of an image build: the lock's git-tag sources (record `git_sources`) built into the venv.

    git_sources.py envbuilder.lock.json DIR [--python PY]

A pin whose PyPI sdist ships no CUDA sources is built from its repository's tag (envbuilder's
kernels/gitsource.py). For each such pin: the archive `envbuilder build` put into DIR, or, when the
build was started without envbuilder (the top-level Dockerfile and plain `docker build`), GitHub's
archive of the recorded commit. Either way the files must recompute to the recorded git tree before
anything runs; then `uv pip install --no-build-isolation --no-deps` builds them against stage 1's
torch, with the package's own "never download a prebuilt wheel" variable set. A pin that is already
installed at its locked version (from a wheelhouse) is left as it is.

Runs inside the image build with the standard library only; gittree.py is its sibling.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gittree  # envbuilder/kernels/gittree.py, copied beside this file


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _files(name: str, version: str, src: dict[str, str], archives: Path) -> tuple[list[gittree.SourceFile], str]:
    archive = archives / f"{name}-{src['tag']}-git{src['commit'][:12]}.tar.gz"
    if archive.is_file():
        return gittree.files_of_archive(archive.read_bytes()), str(archive)
    url = gittree.github_archive_url(src["url"], src["commit"])
    if url is None:
        raise SystemExit(f"error: {name} {version} builds from {src['url']} {src['tag']}, which this build cannot "
                         f"fetch\nfix: build with `envbuilder build` (it puts {archive.name} into the context)")
    print(f"git-sources: {name}: downloading {url}", flush=True)
    with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "envbuilder"}),
                                timeout=300) as resp:
        return gittree.files_of_archive(resp.read()), url


def build(record: dict, archives: Path, python: str) -> int:
    sources = record.get("git_sources") or {}
    for name in sorted(sources):
        src, version = sources[name], record["pins"][name]["version"]
        have = _installed(name)
        if have is not None and have.split("+", 1)[0] == version:
            print(f"git-sources: {name} {have} is installed already (wheelhouse)", flush=True)
            continue
        files, origin = _files(name, version, src, archives)
        tree = gittree.tree_id(files)
        if tree != src["tree"]:
            raise SystemExit(f"error: {name}: the files from {origin} recompute to git tree {tree[:12]}, the lock "
                             f"records {src['tree'][:12]} ({src['url']} {src['tag']})\nfix: rebuild with "
                             "`envbuilder build`, which checks the source before it enters the context")
        print(f"git-sources: {name} {version}: {src['url']} {src['tag']} (commit {src['commit'][:12]}), "
              f"tree {tree[:12]} verified", flush=True)
        env = dict(os.environ)
        if src.get("force_build_env"):
            env[src["force_build_env"]] = "TRUE"
        with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
            root = gittree.extract(files, Path(tmp) / f"{name}-{version}")
            subprocess.run(["uv", "pip", "install", "--python", python, "--no-build-isolation", "--no-deps",
                            str(root)], env=env, check=True)
    return 0


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:]]
    python = "/opt/venv/bin/python"
    if "--python" in args:
        i = args.index("--python")
        python = args[i + 1]
        del args[i:i + 2]
    with open(args[0], encoding="utf-8") as fh:
        record = json.load(fh)
    return build(record, Path(args[1]), python)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
