"""The drift job makes rows, not lists: `matrix refresh --derive-from` turns a new Megatron-Bridge release on
PyPI into a derived row, `lock` locks it, scripts/drift-pr.sh opens the pull request with both. End to end
against a fixture tag: a local bare repository holding v0.6.0's files generated from its facts
(tests/release_facts.py, tests/release_repo.py) and the recorded PyPI snapshot of that day. GitHub's `gh`
cannot run here: a stand-in on PATH records what drift-pr.sh asks of it, and `origin` is a local bare
repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from release_facts import write_releases
from release_repo import SNAPSHOTS, megatron_lm_repo, release_repo

from envbuilder.lock.fidelity import our_versions
from envbuilder.matrix import load_matrix
from envbuilder.matrix.upstream_lock import load_extract

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = SNAPSHOTS / "pypi-snapshot-v0.6.0.json"
GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def _before_2608(project: Path) -> None:
    """matrices/ and locks/ as they were before Megatron-Bridge 0.6.0: no 26.08 row, extract or lock."""
    shutil.copytree(REPO / "matrices", project / "matrices")
    shutil.copytree(REPO / "locks", project / "locks", ignore=shutil.ignore_patterns("26.08", ".lock-all.json"))
    rows = project / "matrices" / "mbridge.toml"
    head, *blocks = rows.read_text().split("[[release]]\n")
    kept = [b for b in blocks if not b.startswith('release            = "26.08"')]
    rows.write_text(head + "".join("[[release]]\n" + b for b in kept))
    (project / "matrices" / "upstream" / "megatron-bridge-0.6.0.toml").unlink()


def _refresh(project: Path, mb: Path, lm: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envbuilder", "matrix", "refresh", "--snapshot", str(SNAPSHOT), "--derive-from",
         str(mb), "--megatron-lm", str(lm), "--write", "--draft", str(project / "matrices" / "drafts" / "up.toml"),
         "--json"], capture_output=True, text=True, timeout=600,
        env={**os.environ, "ENVBUILDER_MATRICES": str(project / "matrices")})


@pytest.fixture()
def upstream(tmp_path: Path) -> tuple[Path, Path]:
    lm, commits = megatron_lm_repo(tmp_path)
    return release_repo(tmp_path, write_releases(tmp_path, "v0.6.0"), commits), lm


def test_refresh_derives_and_writes_the_new_release(tmp_path: Path, upstream: tuple[Path, Path]) -> None:
    project = tmp_path / "project"
    _before_2608(project)
    assert load_matrix(project / "matrices").find_row(release="26.08") is None
    (project / "matrices" / "drafts").mkdir()
    proc = _refresh(project, *upstream)
    assert proc.returncode == 83, proc.stderr  # upstream moved: the drift job goes on to lock and open the PR
    out = json.loads(proc.stdout)
    derived = {d["version"]: d for d in out["derived"]}
    assert derived["0.6.0"]["release"] == "26.08" and derived["0.6.0"]["error"] is None
    # 0.6.2 is on PyPI but the fixture repository has no tag for it yet: reported, derived on a later run
    assert derived["0.6.2"]["release"] is None and "no tag v0.6.2" in derived["0.6.2"]["error"]["cause"]
    row = load_matrix(project / "matrices").find_row(release="26.08")
    assert row is not None and row.status == "derived" and row.megatron_bridge.value == "0.6.0"
    assert row.megatron_core.value == "0.19.0" and row.upstream_lock is not None
    # the previous row's hand-made cuBLAS fix is not derived: the new row says so, for the reviewer
    assert any("26.06.01, carries fixes" in n.text and "nvidia-cublas>=13.2,<13.3" in n.text for n in row.notes)
    # the same fact values as the committed row (derived from the mirror); sources differ where they name the
    # test repository's Megatron-LM commit, TE's tag (the committed row was derived with --te) and the lock's size
    real = load_matrix(REPO / "matrices").find_row(release="26.08")
    assert real is not None
    assert {k: f.value for k, f in row.facts.items()} == {k: f.value for k, f in real.facts.items()}


def test_drift_job_workflow_runs_daily_and_derives() -> None:
    import yaml

    wf = yaml.safe_load((REPO / ".github" / "workflows" / "drift.yml").read_text())
    assert wf[True]["schedule"] == [{"cron": "41 4 * * *"}]  # daily: a PyPI release gets its PR within a day
    make = (REPO / "Makefile").read_text()
    drift = make[make.index("\ndrift: setup"):make.index("-$(MAKE) locks")]
    assert "--derive-from $(MBRIDGE_SOURCE) --write" in drift


@pytest.mark.integration
def test_drift_end_to_end_opens_a_pull_request_with_the_row_and_its_lock(tmp_path: Path,
                                                                         upstream: tuple[Path, Path]) -> None:
    project = tmp_path / "project"
    _before_2608(project)
    (project / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "drift-pr.sh", project / "scripts" / "drift-pr.sh")
    env = {**os.environ, **GIT}
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "before 0.6.0"],
                ["remote", "add", "origin", str(origin)], ["push", "-q", "origin", "main"]):
        subprocess.run(["git", *cmd], cwd=project, check=True, env=env)
    (project / "matrices" / "drafts").mkdir()
    assert _refresh(project, *upstream).returncode == 83
    # the lock step of `make drift` (make locks re-locks every row; only the new one changes)
    lock = subprocess.run([sys.executable, "-m", "envbuilder", "lock", "--release", "26.08", "--no-detect",
                           "-o", str(project / "locks" / "26.08")], capture_output=True, text=True, timeout=1500,
                          env={**os.environ, "ENVBUILDER_MATRICES": str(project / "matrices")})
    assert lock.returncode == 0, lock.stderr[-3000:]
    assert "carries fixes a person added" in lock.stderr  # the review note is a lock warning too
    record = json.loads((project / "locks" / "26.08" / "envbuilder.lock.json").read_text())
    # fidelity over the packages both locks hold, expected from the generated release's facts: upstream's git
    # builds PyPI does not serve differ as git-only, its workspace member (package_info.py says 0.6.1) as the
    # row's override of the PyPI release, a release PyPI serves only as a wheel-stub (matrices/pypi_stubs.toml:
    # nvidia-modelopt 0.46.0rc1) as the row's override with the next release that has a wheel; every other
    # package agrees, and nothing is unexplained
    fid = record["fidelity"]
    extract = load_extract((project / "matrices" / "upstream" / "megatron-bridge-0.6.0.toml").read_text(), "x")
    both = {p.name for p in extract.pins} & set(our_versions(project / "locks" / "26.08" / "uv.lock"))
    stubs = {(s.package, s.version) for s in load_matrix(project / "matrices").pypi_stubs}
    expected = {**{p.name: "git-only" for p in extract.pins if p.kind == "git" and not p.on_pypi},
                **{p.name: "override" for p in extract.pins if (p.name, p.version) in stubs},
                "megatron-bridge": "override"}
    assert {d["package"]: d["reason"] for d in fid["differences"]} == {k: v for k, v in expected.items() if k in both}
    assert fid["both"] == len(both) and fid["agree"] == len(both) - len(fid["differences"])
    assert fid["percent"] == round(100 * fid["agree"] / fid["both"], 1)
    # drift-pr.sh with a stand-in gh that records its arguments
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "gh-calls"
    (bindir / "gh").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {calls}\necho https://example.invalid/pr/1\n')
    (bindir / "gh").chmod(0o755)
    pr = subprocess.run(["bash", str(project / "scripts" / "drift-pr.sh")], capture_output=True, text=True,
                        timeout=300, env={**env, "PATH": f"{bindir}:{os.environ['PATH']}"})
    assert pr.returncode == 0, pr.stderr
    args = calls.read_text()
    assert "pr\ncreate\n" in args and "drift: new rows 26.08" in args
    assert "`26.08`: locked;" in args and "agree with NVIDIA-NeMo/Megatron-Bridge:uv.lock@v0.6.0" in args
    # the branch on origin carries the row, its upstream-lock extract and its lock
    branch = next(b for b in subprocess.run(["git", "branch", "--format=%(refname:short)"], cwd=origin,
                                            capture_output=True, text=True, check=True).stdout.split()
                  if b.startswith("drift/"))
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", branch], cwd=origin, capture_output=True,
                           text=True, check=True).stdout.split()
    assert {"matrices/mbridge.toml", "matrices/upstream/megatron-bridge-0.6.0.toml", "locks/26.08/uv.lock",
            "locks/26.08/envbuilder.lock.json"} <= set(files)
    # a second run with nothing new opens nothing
    again = subprocess.run(["bash", str(project / "scripts" / "drift-pr.sh")], capture_output=True, text=True,
                           timeout=300, env={**env, "PATH": f"{bindir}:{os.environ['PATH']}"})
    assert again.returncode == 0 and "unchanged" in again.stderr
