"""Lock pipeline without the network: platform checks, atomicity, failure classification, CLI errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.errors import ForeignOutputDirError, LockDirError, NetworkError
from envbuilder.lock import LockOptions, open_lockdir, run_lock
from envbuilder.lock import reuse as reuse_mod
from envbuilder.lock.platform import PlatformProblem, check_platform, find_constraint, target_tags
from envbuilder.lock.uvlock import LockedPackage
from envbuilder.matrix import load_matrix
from envbuilder.resolve import ResolveRequest, resolve

REPO = Path(__file__).resolve().parents[2]
REG = {"registry": "https://pypi.org/simple"}


def pkg(name: str, version: str, wheels: list[str], sdist: bool = False) -> LockedPackage:
    return LockedPackage(name, version, REG, tuple(wheels), sdist)


def test_platform_check_flags_glibc_239_only_wheels() -> None:
    pkgs = [
        pkg("nvidia-resiliency-ext", "0.5.0", ["nvidia_resiliency_ext-0.5.0-cp312-cp312-manylinux_2_39_x86_64.whl"]),
        pkg("numpy", "2.2.0", ["numpy-2.2.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"]),
        pkg("flash-attn", "2.7.3", [], sdist=True),
        pkg("pure", "1.0", ["pure-1.0-py3-none-any.whl"]),
        pkg("macos-only", "1.0", ["macos_only-1.0-cp312-cp312-macosx_11_0_arm64.whl"]),
    ]
    problems = check_platform(pkgs, "3.12", "2.35")
    assert [(p.package, p.kind) for p in problems] == [("nvidia-resiliency-ext", "glibc"), ("macos-only", "no-file")]
    assert "manylinux_2_39_x86_64" in problems[0].detail
    assert check_platform(pkgs[:1], "3.12", "2.39") == []  # Ubuntu 24.04 is fine


def test_target_tags_cover_legacy_manylinux() -> None:
    tags = {str(t) for t in target_tags("3.11", "2.35")}
    assert "cp311-cp311-manylinux2014_x86_64" in tags and "cp311-cp311-manylinux_2_35_x86_64" in tags
    assert "cp311-cp311-manylinux_2_36_x86_64" not in tags and "py3-none-any" in tags


def test_find_constraint_picks_first_release_after_the_newest_installable() -> None:
    releases = {
        "0.3.0": [{"filename": "nvidia_resiliency_ext-0.3.0-cp312-cp312-manylinux_2_31_x86_64.whl",
                   "upload_time": "2025-03-01T00:00:00"}],
        "0.4.1": [{"filename": "nvidia_resiliency_ext-0.4.1-cp312-cp312-manylinux_2_31_x86_64.whl",
                   "upload_time": "2025-06-01T00:00:00"}],
        "0.5.0": [{"filename": "nvidia_resiliency_ext-0.5.0-cp312-cp312-manylinux_2_39_x86_64.whl",
                   "upload_time": "2025-09-01T00:00:00"}],
        "0.5.1rc1": [{"filename": "nvidia_resiliency_ext-0.5.1rc1.tar.gz", "upload_time": "2025-10-01T00:00:00"}],
    }
    prob = PlatformProblem("nvidia-resiliency-ext", "0.5.0", "glibc", "")
    assert find_constraint(prob, releases, "3.12", "2.35", "2025-12-01T00:00:00Z") == "nvidia-resiliency-ext<0.5.0"
    # a cutoff before 0.4.1 was uploaded: 0.3.0 is the newest usable, so stay below 0.4.1
    assert find_constraint(prob, releases, "3.12", "2.35", "2025-04-01T00:00:00Z") == "nvidia-resiliency-ext<0.4.1"
    assert find_constraint(prob, {"0.5.0": releases["0.5.0"]}, "3.12", "2.35", None) is None


def _fake_lockdir(path: Path) -> dict[str, bytes]:
    path.mkdir(parents=True)
    files = {"pyproject.toml": b"old pyproject\n", "uv.lock": b"old lock\n", "envbuilder.lock.json": b"{}\n"}
    for name, data in files.items():
        (path / name).write_bytes(data)
    return files


def test_network_failure_is_typed_and_leaves_previous_lock_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    out = tmp_path / "lock"
    before = _fake_lockdir(out)
    # a real uv against an index nobody listens on, with an empty cache: a genuine network failure
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    matrix = load_matrix(REPO / "matrices")
    with pytest.raises(NetworkError) as e:
        run_lock(matrix, ResolveRequest(row="smoke"), LockOptions(output=out))
    assert "could not reach a package index" in e.value.cause
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if ".staging." in p.name] == []


def test_interrupt_leaves_previous_lock_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "lock"
    before = _fake_lockdir(out)

    def interrupted(*_a: object, **_k: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(reuse_mod, "run_uv_lock", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_lock(load_matrix(REPO / "matrices"), ResolveRequest(row="smoke"), LockOptions(output=out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if ".staging." in p.name] == []


def test_refuses_to_swap_away_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("precious")
    with pytest.raises(ForeignOutputDirError, match="not an envbuilder lock directory"):
        run_lock(load_matrix(REPO / "matrices"), ResolveRequest(row="smoke"), LockOptions(output=tmp_path))
    assert (tmp_path / "mine.txt").read_text() == "precious"


def test_read_record_detects_tampering(tmp_path: Path) -> None:
    """(the typed record's own tests are in test_lock_record.py)"""
    import hashlib

    from envbuilder.lock.record import LockFindings, build_record

    m = load_matrix(REPO / "matrices")
    req = ResolveRequest(row="smoke")
    (tmp_path / "uv.lock").write_text("version = 1\n\n[[package]]\nname = \"x\"\nversion = \"1\"\n")
    (tmp_path / "pyproject.toml").write_text("p")
    rec = build_record(resolve(m, req), req, tmp_path, LockFindings("0.13.9"))
    (tmp_path / "envbuilder.lock.json").write_text(rec.to_json())
    assert open_lockdir(tmp_path).record.files == {
        n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("pyproject.toml", "uv.lock")}
    (tmp_path / "uv.lock").write_text("edited by hand")
    with pytest.raises(LockDirError, match="changed after locking"):
        open_lockdir(tmp_path)
    with pytest.raises(LockDirError, match=r"is not a directory"):
        open_lockdir(tmp_path / "nowhere")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=REPO, check=False)


@pytest.mark.parametrize(("args", "code", "needle"), [
    (["lock", "--nemo", "v9.9.9", "--no-detect"], 10, "unknown NeMo tag 'v9.9.9'"),
    (["lock", "--nemo", "smoke", "--set", "numpy==2", "--no-detect"], 13, "does not manage 'numpy'"),
    (["lock", "--nemo", "smoke", "--set", "flash-attn>2", "--no-detect"], 18, "not NAME==VERSION"),
    (["lock", "--nemo", "smoke", "--python", "3.10", "--no-detect"], 12, "Python 3.10 is outside"),
    (["lock", "--nemo", "smoke", "--driver", "abc"], 18, "not a driver version"),
    (["matrix", "show", "--nemo", "v0.0.1"], 10, "unknown NeMo tag"),
])
def test_cli_errors_are_one_line_with_distinct_codes(args: list[str], code: int, needle: str) -> None:
    proc = _cli(*args)
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith("error: ") and lines[1].startswith("  fix: ") and len(lines) == 2


def test_cli_json_error_and_malformed_matrix(tmp_path: Path) -> None:
    for f in (REPO / "matrices").glob("*.toml"):
        (tmp_path / f.name).write_text(f.read_text())
    shutil.copytree(REPO / "matrices" / "upstream", tmp_path / "upstream")  # the Megatron-Bridge rows' targets
    (tmp_path / "smoke.toml").write_text((tmp_path / "smoke.toml").read_text().replace('torch              = {',
                                                                                         'torch = "2.13.0"\n#{'))
    proc = _cli("lock", "--nemo", "smoke", "--no-detect", "--json", env={"ENVBUILDER_MATRICES": str(tmp_path)})
    assert proc.returncode == 11, proc.stderr
    err = json.loads(proc.stdout)
    assert err["error"] == "matrix-file" and err["details"]["field"] == "torch" and err["details"]["line"] > 1
    assert "smoke.toml:" in err["cause"]


def test_matrix_show_json_keys() -> None:
    proc = _cli("matrix", "show", "--nemo", "smoke", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("nemo", "container", "python", "torch", "cuda", "min_driver", "cudnn", "transformer_engine",
                "flash_attn", "mamba_ssm", "causal_conv1d", "megatron_core", "nemo_run", "exclude_newer", "sources"):
        assert key in data, key
    assert data["sources"]["torch"].startswith("https://pypi.org/project/torch/")


def test_stage1_closure_follows_extras_and_finds_deferred_stage2(tmp_path: Path) -> None:
    from envbuilder.lock.uvlock import read_uv_lock, stage1_closure

    (tmp_path / "uv.lock").write_text('''version = 1
[[package]]
name = "proj"
version = "0.0.0"
source = { virtual = "." }
dependencies = [{ name = "nemo-toolkit", extra = ["all"] }, { name = "torch" }]
[package.optional-dependencies]
compile = [{ name = "flash-attn" }, { name = "mamba-ssm" }]
[[package]]
name = "nemo-toolkit"
version = "2.0.0"
source = { registry = "https://pypi.org/simple" }
dependencies = [{ name = "numpy" }]
[package.optional-dependencies]
all = [{ name = "mamba-ssm" }]
asr = [{ name = "librosa" }]
[[package]]
name = "mamba-ssm"
version = "2.2.2"
source = { registry = "https://pypi.org/simple" }
dependencies = [{ name = "torch" }]
[[package]]
name = "flash-attn"
version = "2.6.3"
source = { registry = "https://pypi.org/simple" }
[[package]]
name = "torch"
version = "2.3.0"
source = { registry = "https://pypi.org/simple" }
[[package]]
name = "numpy"
version = "1.26.4"
source = { registry = "https://pypi.org/simple" }
[[package]]
name = "librosa"
version = "0.10.0"
source = { registry = "https://pypi.org/simple" }
''')
    reach = stage1_closure(read_uv_lock(tmp_path / "uv.lock"), "proj")
    assert reach == {"nemo-toolkit", "numpy", "mamba-ssm", "torch"}  # not flash-attn (extra), not librosa (asr)


def test_source_builds_split_compiled_from_sdist_only() -> None:
    from envbuilder.lock.platform import source_builds

    pkgs = [
        pkg("pyzmq", "23.2.1", ["pyzmq-23.2.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"], sdist=True),
        pkg("wget", "3.2", [], sdist=True),
        pkg("numpy", "1.26.4", ["numpy-1.26.4-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                                "numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"], sdist=True),
    ]
    assert source_builds(pkgs, "3.12", "2.35") == (["pyzmq==23.2.1"], ["wget==3.2"])
    assert source_builds(pkgs, "3.11", "2.35") == ([], ["wget==3.2"])


def test_marker_aware_closure_per_python(tmp_path: Path) -> None:
    from envbuilder.lock.uvlock import read_uv_lock, stage1_closure

    (tmp_path / "uv.lock").write_text('''version = 1
[[package]]
name = "proj"
version = "0.0.0"
source = { virtual = "." }
dependencies = [{ name = "numpy", version = "1.26.4", marker = "python_full_version < '3.12'" },
                { name = "numpy", version = "2.1.0", marker = "python_full_version >= '3.12'" },
                { name = "exceptiongroup", marker = "python_full_version < '3.11'" }]
[[package]]
name = "numpy"
version = "1.26.4"
source = { registry = "https://pypi.org/simple" }
[[package]]
name = "numpy"
version = "2.1.0"
source = { registry = "https://pypi.org/simple" }
[[package]]
name = "exceptiongroup"
version = "1.2.0"
source = { registry = "https://pypi.org/simple" }
''')
    from envbuilder.lock.uvlock import stage1_packages

    locked = read_uv_lock(tmp_path / "uv.lock")
    assert [(p.name, p.version) for p in stage1_packages(locked, "proj", "3.10")] == [
        ("exceptiongroup", "1.2.0"), ("numpy", "1.26.4")]
    assert [(p.name, p.version) for p in stage1_packages(locked, "proj", "3.12")] == [("numpy", "2.1.0")]
    assert stage1_closure(locked, "proj") == {"numpy", "exceptiongroup"}
