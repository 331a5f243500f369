"""Lock directories belong to the user too: a re-lock replaces only envbuilder's files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from faultkit import OFFLINE_LOCK_ARGS, offline_env, offline_index

from envbuilder.atomic import COMMIT_NAME, commit_files, remove_stale_staging

REPO = Path(__file__).resolve().parents[2]


def _lock(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *OFFLINE_LOCK_ARGS, *args], env=env,
                          capture_output=True, text=True, cwd=cwd, check=False)


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, **offline_env(offline_index(tmp_path / "wheels"), tmp_path / "cache")}


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_relock_keeps_venv_notes_and_mode(tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "lk"
    assert _lock(env, "-o", str(out)).returncode == 0
    assert _mode(out) == 0o755 and all(_mode(p) == 0o644 for p in out.iterdir())
    assert (out / ".python-version").read_text() == "3.11\n"
    (out / ".venv" / "bin").mkdir(parents=True)
    (out / ".venv" / "bin" / "marker").write_text("x")
    (out / "NOTES.md").write_text("mine")
    out.chmod(0o750)
    inode = out.stat().st_ino
    old_record = (out / "envbuilder.lock.json").read_bytes()
    proc = _lock(env, "--glibc", "2.36", "-o", str(out))
    assert proc.returncode == 0 and "wrote" in proc.stderr, proc.stderr
    assert (out / "envbuilder.lock.json").read_bytes() != old_record
    assert (out / ".venv" / "bin" / "marker").read_text() == "x" and (out / "NOTES.md").read_text() == "mine"
    assert _mode(out) == 0o750 and out.stat().st_ino == inode
    assert [p.name for p in tmp_path.iterdir() if ".staging." in p.name] == []


def test_symlinked_output_is_followed(tmp_path: Path, env: dict[str, str]) -> None:
    real = tmp_path / "real"
    assert _lock(env, "-o", str(real)).returncode == 0
    link = tmp_path / "link"
    link.symlink_to(real)
    assert _lock(env, "--glibc", "2.36", "-o", str(link)).returncode == 0
    assert link.is_symlink() and '"glibc": "2.36"' in (real / "envbuilder.lock.json").read_text()
    assert [p.name for p in tmp_path.iterdir() if ".staging." in p.name] == []


def test_dot_inside_a_lock_dir(tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "lk"
    assert _lock(env, "-o", str(out)).returncode == 0
    proc = _lock(env, "--glibc", "2.36", "-o", ".", cwd=out)
    assert proc.returncode == 0, proc.stderr
    assert '"glibc": "2.36"' in (out / "envbuilder.lock.json").read_text()


def test_failed_first_lock_leaves_no_directory(tmp_path: Path, env: dict[str, str]) -> None:
    proc = _lock(env, "--set", "torch==2.12.0", "-o", str(tmp_path / "new" / "deeper"))
    assert proc.returncode == 14
    assert not (tmp_path / "new" / "deeper").exists()


def test_dropped_local_wheel_is_removed_but_user_wheels_stay(tmp_path: Path, env: dict[str, str]) -> None:
    wheels = tmp_path / "wheels"
    out = tmp_path / "lk"
    assert _lock(env, "--find-links", str(wheels), "-o", str(out)).returncode == 0
    owned = sorted(p.name for p in (out / "wheels").iterdir())
    assert owned, "stage-1 wheels from --find-links are copied into the lock"
    (out / "wheels" / "mine.txt").write_text("mine")
    assert _lock(env, "-o", str(out)).returncode == 0
    assert sorted(p.name for p in (out / "wheels").iterdir()) == ["mine.txt"]


def test_journalled_commit_is_finished_by_the_next_run(tmp_path: Path) -> None:
    """A run killed halfway through the swap: the next run completes it from the journal."""
    target = tmp_path / "out"
    target.mkdir()
    (target / "a").write_text("old a")
    (target / "b").write_text("old b")
    staging = tmp_path / ".out.staging.dead"
    staging.mkdir()
    (staging / "a").write_text("new a")
    (staging / "b").write_text("new b")
    (staging / COMMIT_NAME).write_text('{"put": ["a", "b"], "remove": []}')
    os.replace(staging / "a", target / "a")  # the kill came after the first rename
    remove_stale_staging(target)
    assert (target / "a").read_text() == "new a" and (target / "b").read_text() == "new b"
    assert not staging.exists()
    # and without a journal (killed before the commit began) nothing moves
    staging.mkdir()
    (staging / "a").write_text("newer a")
    remove_stale_staging(target)
    assert (target / "a").read_text() == "new a" and not staging.exists()


def test_commit_files_replaces_only_named_files(tmp_path: Path) -> None:
    target, staging = tmp_path / "t", tmp_path / "s"
    target.mkdir()
    staging.mkdir()
    (target / "keep").write_text("user")
    (target / "old").write_text("owned, dropped")
    (staging / "new").write_text("owned")
    commit_files(staging, target, ["new"], remove=["old", "keep-not-listed"])
    assert sorted(p.name for p in target.iterdir()) == ["keep", "new"]
    assert _mode(target / "new") == 0o644


def test_certify_output_dir_modes_and_user_files(tmp_path: Path, env: dict[str, str]) -> None:
    """certify -o: 0755 directory, 0644 files, a user's file beside the certificate survives a re-run."""
    lock = tmp_path / "lk"
    assert _lock(env, "-o", str(lock)).returncode == 0
    out = tmp_path / "cert"

    def certify() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "envbuilder", "certify", "--venv", sys.prefix, "--level", "0",
                               "--lock", str(lock), "-o", str(out)], env=env, capture_output=True, text=True,
                              cwd=REPO, check=False)

    first = certify()
    assert first.returncode in (0, 50), first.stderr  # this venv is not the locked one: drift may fail
    assert (out / "certificate.json").is_file() and _mode(out) == 0o755
    assert all(_mode(p) == 0o644 for p in out.rglob("*") if p.is_file())
    assert str(tmp_path) not in first.stderr.replace(str(out), "OUT").replace(str(lock), "LOCK"), \
        "no staging or temporary path is printed"
    (out / "my-notes.txt").write_text("mine")
    second = certify()
    assert second.returncode == first.returncode
    assert (out / "my-notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if ".staging." in p.name] == []


def test_abandoned_leftovers_are_told_from_live_ones(tmp_path: Path) -> None:
    """A live run holds a flock on its temp file; a SIGKILLed one's lock is gone with it."""
    from envbuilder.atomic import hold, remove_abandoned

    live, dead = tmp_path / ".x.sqsh.live.tmp", tmp_path / ".x.sqsh.dead.tmp"
    live.write_text("in progress")
    dead.write_text("left by kill -9")
    (tmp_path / "x.sqsh").write_text("the user's previous export")
    with hold(live):
        removed = remove_abandoned(tmp_path, ".x.sqsh.", ".tmp")
    assert removed == [dead] and live.exists() and (tmp_path / "x.sqsh").exists()


def test_promoted_directories_are_0755_or_keep_their_mode(tmp_path: Path) -> None:
    from envbuilder.atomic import promote_dir, staging_dir

    target = tmp_path / "bundle"
    with staging_dir(target) as st:
        (st / "f").write_text("x")
        promote_dir(st, target)
    assert _mode(target) == 0o755
    target.chmod(0o750)
    with staging_dir(target) as st:
        promote_dir(st, target)
    assert _mode(target) == 0o750
