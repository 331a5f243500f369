"""A kernel-less PyPI pin built from its git tag, for real: lock -> wheels -> bundle -> install -> image.

GitHub is not reachable from CI, so the repository is one the test creates and serves over file://:
causal-conv1d 1.2.2.post1's own PyPI sdist (which has no csrc/*.cu, the reason for the git route) plus a
stand-in .cu file for the tag's kernels and a marker module, so that what gets installed can be told
apart from the PyPI sdist. A copy of the real matrix pins the smoke row to 1.2.2.post1 and records that
repository's tag (commit and tree computed here). The smoke row builds causal-conv1d with
CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE against stage 1's CPU torch, so every step really runs setup.py.
The image is built on the bootstrapped Debian base through stage 2 (--target builder).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from envbuilder.lock.record import LockRecord, sha256_file
from envbuilder.lock.sdist import fetch_sdist
from envbuilder.lock.uvlock import read_uv_lock

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SMOKE_TORCH_WHEELS = Path("/opt/wheels")
BLOCKED = "http://127.0.0.1:9"
MARKER = "causal_conv1d/_envbuilder_from_git.py"


def _cli(args: list[str], env: dict[str, str], timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, **env})


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def _pypi_sdist(name: str, version: str) -> Path:
    """The sdist of name==version as the committed v2.3.0 lock names it (url and sha256)."""
    sdist = next(p.sdist for p in read_uv_lock(REPO / "locks" / "v2.3.0" / "uv.lock")
                 if (p.name, p.version) == (name, version))
    assert sdist is not None
    return fetch_sdist(sdist.url, sdist.sha256)


@pytest.fixture(scope="module")
def git_lock(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    tmp = tmp_path_factory.mktemp("gitsrc")
    work = tmp / "causal-conv1d"
    with tarfile.open(_pypi_sdist("causal-conv1d", "1.2.2.post1")) as tar:
        tar.extractall(tmp / "sdist", filter="data")
    shutil.copytree(tmp / "sdist" / "causal_conv1d-1.2.2.post1", work)
    (work / "csrc").mkdir(exist_ok=True)
    (work / "csrc" / "causal_conv1d_fwd.cu").write_text("// stands in for the tag's kernels\n")
    (work / MARKER).write_text("FROM_GIT = True\n")
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "v1.2.2.post1", cwd=work)
    _git("tag", "v1.2.2.post1", cwd=work)
    commit, tree = _git("rev-parse", "HEAD", cwd=work), _git("rev-parse", "HEAD^{tree}", cwd=work)
    served = tmp / "srv" / "causal-conv1d.git"
    _git("clone", "-q", "--bare", str(work), str(served), cwd=tmp)

    matrices = tmp / "matrices"
    shutil.copytree(REPO / "matrices", matrices)
    smoke = matrices / "smoke.toml"
    text = smoke.read_text()
    assert 'causal_conv1d      = { value = "1.6.2.post1"' in text
    smoke.write_text(text.replace('causal_conv1d      = { value = "1.6.2.post1"',
                                  'causal_conv1d      = { value = "1.2.2.post1"'))
    bp = matrices / "build_packages.toml"
    lines = []
    for line in bp.read_text().splitlines():
        if line.startswith("git_repo") and "causal-conv1d" in line:
            line = f'git_repo = {{ value = "{served.as_uri()}", source = "fixture" }}'
        elif line.startswith("git_tags") and "causal-conv1d" in line:
            line = (f'git_tags = {{ value = [{{ version = "1.2.2.post1", tag = "v1.2.2.post1", commit = "{commit}", '
                    f'tree = "{tree}" }}], source = "fixture" }}')
        lines.append(line)
    bp.write_text("\n".join(lines) + "\n")

    env = {"ENVBUILDER_MATRICES": str(matrices), "ENVBUILDER_CACHE_DIR": str(tmp / "cache"),
           "ENVBUILDER_GIT_MIRRORS": ""}
    lockdir = tmp / "lock"
    args = ["lock", "--nemo", "smoke", "-o", str(lockdir), "--no-detect"]
    if any(SMOKE_TORCH_WHEELS.glob("torch-*.whl")):
        args += ["--find-links", str(SMOKE_TORCH_WHEELS)]
    proc = _cli(args, env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"tmp": tmp, "lock": lockdir, "work": work, "served": served, "commit": commit, "tree": tree,
            "env": json.dumps(env)}


def _env(git_lock: dict[str, Path | str], **more: str) -> dict[str, str]:
    return {**json.loads(str(git_lock["env"])), **more}


def test_lock_records_the_tag_and_wheels_builds_it(git_lock: dict[str, Path | str]) -> None:
    record = LockRecord.from_lockdir(Path(git_lock["lock"]))
    assert record.kernel_less == []
    src = record.git_sources["causal-conv1d"]
    assert (src.url, src.tag, src.commit, src.tree) == (Path(git_lock["served"]).as_uri(), "v1.2.2.post1",
                                                        git_lock["commit"], git_lock["tree"])
    assert src.force_build_env == "CAUSAL_CONV1D_FORCE_BUILD"
    out = Path(git_lock["tmp"]) / "wh"
    proc = _cli(["wheels", str(git_lock["lock"]), "-o", str(out), "--json"], _env(git_lock))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "git fetch file://" in proc.stderr and "verified" in proc.stderr
    (pkg,) = json.loads(proc.stdout)["packages"]
    archive = (Path(git_lock["tmp"]) / "cache" / "git-sources" / str(git_lock["tree"])
               / src.archive_name("causal-conv1d"))
    assert pkg["sdist_sha256"] == sha256_file(archive)  # the archive stands in for the sdist, in the key too
    with zipfile.ZipFile(out / pkg["wheel"]) as whl:
        assert MARKER in whl.namelist()  # built from the tag's files, not from PyPI's sdist


def test_bundle_carries_the_tag_and_install_keeps_it(git_lock: dict[str, Path | str]) -> None:
    tmp = Path(git_lock["tmp"])
    bundle = tmp / "bundle"
    # the repository is unreachable now; the work tree serves as the mirror
    mirror = f"{Path(git_lock['served']).as_uri()}={git_lock['work']}"
    shutil.rmtree(tmp / "cache" / "git-sources", ignore_errors=True)
    shutil.move(str(git_lock["served"]), str(tmp / "gone.git"))
    try:
        proc = _cli(["bundle", str(git_lock["lock"]), "-o", str(bundle), "--git-mirror", mirror], _env(git_lock))
    finally:
        shutil.move(str(tmp / "gone.git"), str(git_lock["served"]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((bundle / "envbuilder-bundle.json").read_text())
    (entry,) = [p for p in manifest["packages"] if p["name"] == "causal-conv1d"]
    assert entry["kind"] == "git" and entry["git"]["commit"] == git_lock["commit"]
    assert f"files/{entry['file']}" in manifest["files"]
    assert not any(f.startswith("files/causal_conv1d-1.2.2.post1") for f in manifest["files"])  # no PyPI sdist
    venv = tmp / "venv"
    blocked = {k: BLOCKED for k in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")}
    proc = _cli(["install", str(bundle), "--venv", str(venv), "--skip-stage2"], _env(git_lock, **blocked))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (venv / "envbuilder-sdists" / entry["file"]).is_file()  # `wheels --sdists` builds it offline


def test_image_builds_the_tag_in_stage2(git_lock: dict[str, Path | str], debian_base_image: str) -> None:
    tag = f"envbuilder-test/gitsrc:{str(git_lock['commit'])[:12]}"
    proc = _cli(["build", str(git_lock["lock"]), "--tag", tag, "--base", debian_base_image, "--target", "builder",
                 "--no-scan", "--json"], _env(git_lock), timeout=3600)
    try:
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert "tree verified" in proc.stderr
        # (causal_conv1d 1.2.2.post1 imports its CUDA module on import: look at the installed files instead)
        probe = ("import importlib.metadata as m; print(m.version('causal-conv1d'), "
                 f"any(str(f) == {MARKER!r} for f in m.files('causal-conv1d')))")
        run = subprocess.run(["docker", "run", "--rm", tag, "/opt/venv/bin/python", "-c", probe],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["1.2.2.post1", "True"]
    finally:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True)
