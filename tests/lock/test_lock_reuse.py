"""Lock fast paths: seeding staging with the current uv.lock, offline-first resolution, `lock --all`.

Unit tests build a real uv cache layout (simple-vN/<index>/<name>.rkyv files with chosen mtimes)
and a real uv.lock text; integration tests run the real uv against PyPI and real uv caches.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.errors import UvError
from envbuilder.lock import LockOptions, run_lock
from envbuilder.lock.batch import lock_all
from envbuilder.lock.interpreter import interpreter_for
from envbuilder.lock.reuse import lock_offline_first, seed_from, stale_pages
from envbuilder.lock.uvlock import _parse_toml, locked_versions, read_uv_lock
from envbuilder.matrix import load_matrix
from envbuilder.resolve import ResolveRequest

REPO = Path(__file__).resolve().parents[2]
FILES = ("pyproject.toml", "uv.lock", "envbuilder.lock.json")
CUTOFF = 1_750_000_000  # 2025-06-15

UV_LOCK = """version = 1
requires-python = ">=3.11"

[[package]]
name = "alpha"
version = "1.0"
source = { registry = "https://pypi.org/simple" }
dependencies = [{ name = "beta" }]
wheels = [{ url = "https://files/alpha-1.0-py3-none-any.whl", hash = "sha256:00" }]

[[package]]
name = "beta"
version = "2.0"
source = { registry = "https://pypi.org/simple" }
sdist = { url = "https://files/beta-2.0.tar.gz", hash = "sha256:11" }

[[package]]
name = "gamma"
version = "0.1"
source = { git = "https://example.invalid/gamma?tag=v0.1#abc" }
"""

LOG = "\n".join(f"DEBUG Searching for a compatible version of {n} (*)" for n in ("alpha", "Beta", "gamma", "delta"))


def _cache(tmp: Path, pages: dict[str, int]) -> Path:
    cache = tmp / "uv-cache"
    (cache / "simple-v3" / "pypi").mkdir(parents=True)  # an older layout: must be ignored
    (cache / "simple-v3" / "pypi" / "alpha.rkyv").write_bytes(b"old")
    os.utime(cache / "simple-v3" / "pypi" / "alpha.rkyv", (1, 1))
    index = cache / "simple-v28" / "pypi"
    index.mkdir(parents=True)
    for name, mtime in pages.items():
        (index / f"{name}.rkyv").write_bytes(b"page")
        os.utime(index / f"{name}.rkyv", (mtime, mtime))
    return cache


def test_stale_pages_accepts_pages_fetched_after_the_cutoff(tmp_path: Path) -> None:
    (tmp_path / "uv.lock").write_text(UV_LOCK)
    cache = _cache(tmp_path, {"alpha": CUTOFF + 10, "beta": CUTOFF + 10})
    # gamma comes from git (no index page); delta was consulted but is not in the lock and has no page
    assert stale_pages(LOG, tmp_path / "uv.lock", cache, CUTOFF) == []


def test_stale_pages_reports_old_and_missing_pages(tmp_path: Path) -> None:
    (tmp_path / "uv.lock").write_text(UV_LOCK)
    cache = _cache(tmp_path, {"alpha": CUTOFF - 10})
    assert stale_pages(LOG, tmp_path / "uv.lock", cache, CUTOFF) == [
        "alpha (index page fetched before the cutoff)", "beta (no index page in the cache)"]


def test_stale_pages_without_resolution_needs_no_cache(tmp_path: Path) -> None:
    (tmp_path / "uv.lock").write_text(UV_LOCK)
    assert stale_pages("Resolved 3 packages in 2ms", tmp_path / "uv.lock", None, CUTOFF) == []
    assert stale_pages(LOG, tmp_path / "uv.lock", None, CUTOFF) == ["uv has no cache directory"]


def test_seed_from_copies_only_an_existing_lock(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    assert seed_from(tmp_path / "old", tmp_path / "new") is False
    (tmp_path / "old" / "uv.lock").write_text(UV_LOCK)
    assert seed_from(tmp_path / "old", tmp_path / "new") is True
    assert (tmp_path / "new" / "uv.lock").read_text() == UV_LOCK


def test_parse_cache_round_trips_and_survives_corruption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuilder.lock import uvlock

    monkeypatch.setenv("ENVBUILDER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "uv.lock").write_text(UV_LOCK)
    uvlock._parse_uv_lock.cache_clear()
    first = read_uv_lock(tmp_path / "uv.lock")
    entries = list((tmp_path / "cache" / "uv-lock-parse").iterdir())
    assert len(entries) == 1
    uvlock._parse_uv_lock.cache_clear()
    assert read_uv_lock(tmp_path / "uv.lock") == first == list(_parse_toml(UV_LOCK))  # from the JSON entry
    entries[0].write_text("{not json")
    uvlock._parse_uv_lock.cache_clear()
    assert read_uv_lock(tmp_path / "uv.lock") == first  # re-parsed, not trusted


def test_offline_first_needs_a_cutoff(tmp_path: Path) -> None:
    # a project without dependencies: real uv locks it with or without the network
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "0"\nrequires-python = ">=3.11"\ndependencies = []\n')
    run = lock_offline_first(tmp_path, cutoff=0)
    assert not run.resolved_offline and run.fallback_reason == "the row has no exclude-newer cutoff"
    run = lock_offline_first(tmp_path, cutoff=CUTOFF)
    assert run.resolved_offline and run.fallback_reason == ""
    assert "DEBUG" not in run.log  # the -v chatter used for the check is not passed on
    run = lock_offline_first(tmp_path, cutoff=CUTOFF, offline_first=False)
    assert not run.resolved_offline and run.fallback_reason == "offline-first disabled"


# --- integration: real uv, real PyPI, real caches -------------------------------------------------


def _smoke_matrix(tmp: Path, edit: dict[str, str] | None = None) -> Path:
    mdir = tmp / "matrices"
    shutil.copytree(REPO / "matrices", mdir)
    smoke = mdir / "smoke.toml"
    text = smoke.read_text()
    for old, new in (edit or {}).items():
        assert old in text
        text = text.replace(old, new)
    smoke.write_text(text)
    return mdir


@pytest.mark.integration
def test_seeded_check_validates_without_resolving_and_matches_a_fresh_lock(tmp_path: Path) -> None:
    m = load_matrix(REPO / "matrices")
    req = ResolveRequest(row="smoke")
    scratch = run_lock(m, req, LockOptions(output=tmp_path / "scratch", reuse_lock=False, offline_first=False))
    assert not scratch.seeded and not scratch.resolved_offline
    shutil.copytree(tmp_path / "scratch", tmp_path / "relock")
    check = run_lock(m, req, LockOptions(output=tmp_path / "scratch", check=True, verbose_uv=True))
    assert check.seeded and not check.changed
    assert "Searching for a compatible version" not in check.uv_log  # uv validated, never resolved
    relock = run_lock(m, req, LockOptions(output=tmp_path / "relock", verbose_uv=True))
    assert relock.seeded and not relock.changed
    for name in FILES:
        assert (tmp_path / "relock" / name).read_bytes() == (tmp_path / "scratch" / name).read_bytes(), name


@pytest.mark.integration
def test_changed_pin_re_resolves_only_that_pin(tmp_path: Path) -> None:
    req = ResolveRequest(row="smoke")
    old = load_matrix(REPO / "matrices")
    run_lock(old, req, LockOptions(output=tmp_path / "lk"))
    before = locked_versions(tmp_path / "lk" / "uv.lock")
    assert before["einops"] == "0.8.1"
    new = load_matrix(_smoke_matrix(tmp_path, {'"einops==0.8.1"': '"einops==0.8.0"'}))
    res = run_lock(new, req, LockOptions(output=tmp_path / "lk"))  # seeded with the old lock
    assert res.seeded and res.changed
    after = locked_versions(tmp_path / "lk" / "uv.lock")
    assert {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} == {"einops"}
    # and it is exactly what a from-scratch lock of the new inputs gives
    run_lock(new, req, LockOptions(output=tmp_path / "fresh", reuse_lock=False, offline_first=False))
    for name in FILES:
        assert (tmp_path / "lk" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes(), name


@pytest.mark.integration
def test_offline_first_matches_online_and_falls_back_on_a_miss_or_stale_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = load_matrix(REPO / "matrices")
    req = ResolveRequest(row="smoke")
    # a private uv cache: starts empty, so the first lock must go online
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    online = run_lock(m, req, LockOptions(output=tmp_path / "online"))
    assert not online.resolved_offline and "offline resolution failed" in online.online_reason
    offline = run_lock(m, req, LockOptions(output=tmp_path / "offline"))
    assert offline.resolved_offline and not offline.seeded
    for name in FILES:
        assert (tmp_path / "offline" / name).read_bytes() == (tmp_path / "online" / name).read_bytes(), name
    # pages fetched before the row's cutoff may miss releases: the cache is not trusted
    cutoff = 1_783_987_200 - 86400  # a day before smoke's exclude-newer (2026-07-15)
    for page in (tmp_path / "uv-cache").glob("simple-v*/*/*.rkyv"):
        os.utime(page, (cutoff, cutoff))
    stale = run_lock(m, req, LockOptions(output=tmp_path / "stale"))
    assert not stale.resolved_offline and stale.online_reason.startswith("stale cache: ")
    assert (tmp_path / "stale" / "uv.lock").read_bytes() == (tmp_path / "online" / "uv.lock").read_bytes()


@pytest.mark.integration
def test_cli_json_says_which_path_was_taken(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "envbuilder", "lock", "--nemo", "smoke", "--no-detect", "--json"]
    first = subprocess.run([*cmd, "-o", str(tmp_path / "a")], capture_output=True, text=True, cwd=REPO, check=False)
    assert first.returncode == 0, first.stderr
    online = subprocess.run([*cmd, "-o", str(tmp_path / "b"), "--online"], capture_output=True, text=True,
                            cwd=REPO, check=False)
    again = subprocess.run([*cmd, "-o", str(tmp_path / "c")], capture_output=True, text=True, cwd=REPO, check=False)
    assert json.loads(online.stdout)["resolved_offline"] is False
    assert json.loads(again.stdout)["resolved_offline"] is True  # the cache now holds the row's pages
    assert "resolved offline" in again.stderr


def _rows_matrix(tmp: Path) -> Path:
    """Only smoke-derived rows, not test-only, so `lock --all` picks them up; one cannot resolve."""
    mdir = tmp / "matrices"
    shutil.copytree(REPO / "matrices", mdir)
    (mdir / "nemo.toml").unlink()
    (mdir / "mbridge.toml").unlink()  # the Megatron-Bridge rows too: only the smoke-derived rows remain
    text = (mdir / "smoke.toml").read_text()
    head, row = text.split("[[release]]", 1)
    rows = []
    for tag, einops in (("smoke-a", "0.8.1"), ("smoke-b", "0.8.0"), ("smoke-bad", "999.0")):
        r = row.replace('nemo = "smoke"', f'nemo = "{tag}"').replace("test_only = true", "test_only = false")
        rows.append("[[release]]" + r.replace('"einops==0.8.1"', f'"einops=={einops}"'))
    (mdir / "smoke.toml").write_text(head + "\n".join(rows))
    return mdir


@pytest.mark.integration
def test_lock_all_locks_every_row_and_reports_the_failed_one(tmp_path: Path) -> None:
    mdir = _rows_matrix(tmp_path)
    m = load_matrix(mdir)
    assert m.names() == ["smoke-a", "smoke-b", "smoke-bad"]
    result = lock_all(m, lambda tag: ResolveRequest(row=tag), tmp_path / "locks",
                      LockOptions(output=tmp_path / "locks"), parallel=2)
    assert [r.row for r in result.failed] == ["smoke-bad"]
    assert result.failed[0].error is not None and result.failed[0].error["error"] == UvError.kind
    assert locked_versions(tmp_path / "locks" / "smoke-a" / "uv.lock")["einops"] == "0.8.1"
    assert locked_versions(tmp_path / "locks" / "smoke-b" / "uv.lock")["einops"] == "0.8.0"
    assert not (tmp_path / "locks" / "smoke-bad").exists()
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == ["smoke-a", "smoke-b"]  # no staging left
    assert result.wall_seconds > 0 and result.sum_seconds >= max(r.seconds for r in result.rows)

    # the CLI: exit 110, per-row results in the error's JSON, and --check of the written rows passes
    env = {**os.environ, "ENVBUILDER_MATRICES": str(mdir)}
    cli = subprocess.run([sys.executable, "-m", "envbuilder", "lock", "--all", "--no-detect", "-o",
                          str(tmp_path / "locks"), "--parallel", "3", "--json"],
                         capture_output=True, text=True, cwd=REPO, env=env, check=False)
    assert cli.returncode == 110, cli.stderr
    err = json.loads(cli.stdout)
    assert err["error"] == "lock-all-failed" and err["details"]["failed"] == ["smoke-bad"]
    assert {r["row"]: r["changed"] for r in err["details"]["rows"]}.get("smoke-a") is False
    assert "2/3 rows locked" in cli.stderr


def test_reusable_constraints_only_for_the_same_inputs(tmp_path: Path) -> None:
    from envbuilder.lock.reuse import reusable_constraints

    record = json.loads((REPO / "tests/golden/lock/v2.3.0-hermetic.envbuilder.lock.json").read_text())
    record["constraints_added"] = [{"package": "nvidia-resiliency-ext", "constraint": "nvidia-resiliency-ext<0.5.0",
                                    "reason": "only manylinux_2_39 wheels"}]
    (tmp_path / "envbuilder.lock.json").write_text(json.dumps(record))
    (tmp_path / "pyproject.toml").write_text("deps\nnvidia-resiliency-ext<0.5.0\n")

    def render(cs: list[str]) -> str:
        return "deps\n" + "".join(c + "\n" for c in cs)

    py, glibc = record["inputs"]["python"], record["inputs"]["glibc"]
    assert reusable_constraints(tmp_path, render, py, glibc) == record["constraints_added"]
    assert reusable_constraints(tmp_path, render, py, "2.39") == []  # the platform check would differ
    assert reusable_constraints(tmp_path, lambda cs: "other\n", py, glibc) == []  # other inputs
    (tmp_path / "envbuilder.lock.json").write_text("{broken")
    assert reusable_constraints(tmp_path, render, py, glibc) == []


def test_sdist_reading_is_remembered_only_inside_the_sdist_cache(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import tarfile

    from envbuilder.lock.sdist import cache_dir, read_sdist

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    def make(path: Path, names: list[str]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz") as tar:
            for n in names:
                info = tarfile.TarInfo(n)
                data = b"Metadata-Version: 2.2\nName: k\nVersion: 1\n" if n.endswith("PKG-INFO") else b"x"
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

    cached = cache_dir() / ("ab" * 32) / "k-1.tar.gz"
    make(cached, ["k-1/PKG-INFO", "k-1/csrc/a.cu"])
    first = read_sdist(cached)
    memo = cached.with_name(cached.name + ".contents.json")
    assert memo.is_file() and first.cuda_sources == ("k-1/csrc/a.cu",)
    assert read_sdist(cached) == first and read_sdist(cached).pkg_info == first.pkg_info
    make(cached, ["k-1/PKG-INFO", "k-1/setup.py"])  # new bytes (and mtime): read again, not the memo
    os.utime(cached, ns=(1, 1))
    assert read_sdist(cached).cuda_sources == ()
    elsewhere = tmp_path / "mine" / "k-1.tar.gz"
    make(elsewhere, ["k-1/PKG-INFO"])
    read_sdist(elsewhere)
    assert sorted(p.name for p in elsewhere.parent.iterdir()) == ["k-1.tar.gz"]  # no side file for the user


# --- which interpreter uv lock runs with ----------------------------------------------------------------

MINOR = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _interpreter_world(tmp: Path, monkeypatch: pytest.MonkeyPatch, working_python3: bool) -> Path:
    """A PATH holding only what we put there, a pyenv root with one real interpreter, no uv-managed ones.

    The broken `pythonX.Y` is what an installed-but-inactive pyenv shim does when run (exit 127):
    it stops uv's own search. The working interpreter is this test's own Python (no other exists
    for sure on a fresh CI host); returns the path envbuilder should find for it.
    """
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    shim = bin_dir / f"python{MINOR}"
    shim.write_text(f"#!/bin/sh\necho 'pyenv: python{MINOR}: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    real = Path(os.path.realpath(sys.executable))
    if working_python3:
        (bin_dir / "python3").symlink_to(real)
    found = tmp / "pyenv" / "versions" / "x" / "bin" / f"python{MINOR}"
    found.parent.mkdir(parents=True)
    found.symlink_to(real)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("PYENV_ROOT", str(tmp / "pyenv"))
    monkeypatch.setenv("UV_PYTHON_INSTALL_DIR", str(tmp / "uv-python"))
    monkeypatch.delenv("UV_PYTHON", raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp))  # where a failed uv run would leave its log
    project = tmp / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "x"\nversion = "0"\nrequires-python = "=={MINOR}.*"\ndependencies = []\n')
    return found


def _not_running_in_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """envbuilder itself runs on a Python outside the row's range (e.g. 3.11 for a 3.12-only row).

    A CI host is not sure to have two Python versions, so the one we have stands for the other
    interpreter and envbuilder's own is declared out of range.
    """
    from envbuilder.lock import pipeline

    monkeypatch.setattr(pipeline, "own_interpreter", lambda requires_python: None)


def test_uv_lock_runs_with_envbuilders_own_python_without_searching(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuilder.lock import pipeline

    # only a broken shim on PATH: had uv searched, it would have failed
    _interpreter_world(tmp_path, monkeypatch, working_python3=False)
    monkeypatch.setattr(pipeline, "interpreter_for", lambda rp: pytest.fail("probed although our Python fits"))
    said: list[str] = []
    run, interpreter = pipeline._uv_lock(tmp_path / "project", CUTOFF, LockOptions(output=tmp_path / "out"),
                                         f"=={MINOR}.*", None, said.append)
    assert interpreter == sys.executable and run.resolved_offline and said == []
    # UV_PYTHON is the user's choice: uv gets no --python (and here finds nothing it can run)
    monkeypatch.setenv("UV_PYTHON", f"{tmp_path}/bin/python{MINOR}")
    monkeypatch.setattr(pipeline, "interpreter_for", interpreter_for)  # which also leaves UV_PYTHON alone
    with pytest.raises(UvError):
        pipeline._uv_lock(tmp_path / "project", CUTOFF, LockOptions(output=tmp_path / "out"),
                          f"=={MINOR}.*", None, said.append)


def test_uv_lock_finds_an_interpreter_only_after_uv_could_not_start(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuilder.lock.pipeline import _uv_lock

    found = _interpreter_world(tmp_path, monkeypatch, working_python3=False)
    _not_running_in_range(monkeypatch)
    said: list[str] = []
    opts = LockOptions(output=tmp_path / "out")
    run, interpreter = _uv_lock(tmp_path / "project", CUTOFF, opts, f"=={MINOR}.*", None, said.append)
    assert interpreter == str(found)
    assert run.resolved_offline and (tmp_path / "project" / "uv.lock").is_file()
    assert said == [f"uv lock runs with {found} (Python =={MINOR}.*)"]
    assert not list(tmp_path.glob("envbuilder-uv-lock-*.log"))  # the first run's failure log is not left behind
    # the next round reuses it without asking uv to search again
    run, again = _uv_lock(tmp_path / "project", CUTOFF, opts, f"=={MINOR}.*", interpreter, said.append)
    assert again == interpreter and len(said) == 1


def test_uv_lock_probes_no_interpreter_when_uv_finds_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuilder.lock import pipeline

    _interpreter_world(tmp_path, monkeypatch, working_python3=True)
    _not_running_in_range(monkeypatch)
    monkeypatch.setattr(pipeline, "interpreter_for", lambda rp: pytest.fail("probed although uv found python3"))
    said: list[str] = []
    run, interpreter = pipeline._uv_lock(tmp_path / "project", CUTOFF, LockOptions(output=tmp_path / "out"),
                                         f"=={MINOR}.*", None, said.append)
    assert interpreter is None and run.resolved_offline and said == []


def test_uv_lock_failure_other_than_the_interpreter_is_not_retried(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuilder.lock import pipeline

    _interpreter_world(tmp_path, monkeypatch, working_python3=True)
    _not_running_in_range(monkeypatch)
    (tmp_path / "project" / "pyproject.toml").write_text(
        f'[project]\nname = "x"\nversion = "0"\nrequires-python = "=={MINOR}.*"\ndependencies = ["a b c"]\n')
    probed: list[str] = []
    monkeypatch.setattr(pipeline, "interpreter_for", lambda rp: probed.append(rp))
    with pytest.raises(UvError):
        pipeline._uv_lock(tmp_path / "project", CUTOFF, LockOptions(output=tmp_path / "out"), f"=={MINOR}.*",
                          None, lambda _: None)
    assert probed == []
