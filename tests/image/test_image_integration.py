"""`envbuilder build` against the real Docker engine (BuildKit) on the bootstrapped Debian base.

The smoke image (session fixture smoke_image) is really built: stage 1 installs torch and the
pure packages from the lock, stage 2 compiles causal-conv1d's sdist without build isolation
against that torch. These tests look inside it, check the labels, scan every layer for
secrets, and drive the error paths with a real engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.image import engine, layerscan
from envbuilder.image.secrets import SYSTEM_BUNDLE

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def in_image(tag: str, *cmd: str) -> tuple[int, str]:
    return engine.run_in_image(engine.client(), tag, list(cmd), timeout=600)


def test_smoke_image_labels_bind_to_the_lock(smoke_image: str, smoke_lockdir: Path) -> None:
    record = json.loads((smoke_lockdir / "envbuilder.lock.json").read_text())
    labels = engine.inspect(engine.client(), smoke_image)["Config"]["Labels"]
    assert labels["io.envbuilder.lock-sha256"] == record["lock_sha256"]
    assert labels["io.envbuilder.row"] == "smoke"
    assert labels["io.envbuilder.arch-list"] == "none"  # the smoke row compiles no CUDA kernels
    assert labels["io.envbuilder.source-date-epoch"] == str(record["source_date_epoch"])
    assert labels["io.envbuilder.version"] and labels["org.opencontainers.image.revision"]
    assert labels["org.opencontainers.image.created"].startswith("2026-07-15T")  # from exclude_newer


def test_smoke_image_import_check_passes_inside(smoke_image: str) -> None:
    status, out = in_image(smoke_image, "python", "/opt/envbuilder/tools/import_check.py", "--json")
    assert status == 0, out
    report = json.loads(out)
    mods = report["modules"]
    assert report["failed"] == []
    for name in ("torch", "einops", "numpy", "packaging"):
        assert mods[name]["status"] == "ok", mods[name]
    # built with CAUSAL_CONV1D_SKIP_CUDA_BUILD: the CUDA extension is absent, which the check
    # reports as needing a GPU build rather than passing or failing silently
    assert mods["causal_conv1d"]["status"] == "needs-gpu"
    assert "causal_conv1d_cuda" in mods["causal_conv1d"]["error"]


def test_stage2_sdist_was_built_against_stage1_torch(smoke_image: str, smoke_lockdir: Path) -> None:
    record = json.loads((smoke_lockdir / "envbuilder.lock.json").read_text())
    probe = ("import importlib.metadata as m, json, pathlib; d = m.distribution('causal-conv1d'); "
             "print(json.dumps({'version': d.version, 'torch': m.version('torch'), "
             "'wheel': (pathlib.Path(d._path) / 'WHEEL').read_text()}))")
    status, out = in_image(smoke_image, "python", "-c", probe)
    assert status == 0, out
    facts = json.loads(out.strip().splitlines()[-1])
    assert facts["version"] == record["pins"]["causal-conv1d"]["version"]
    assert facts["torch"].split("+")[0] == record["pins"]["torch"]["version"]
    assert "Generator: setuptools" in facts["wheel"]  # built here from the sdist (PyPI has no wheel)


def test_runtime_stage_has_venv_but_no_build_inputs(smoke_image: str) -> None:
    status, out = in_image(smoke_image, "sh", "-c",
                           "ls /opt/envbuilder/lock; test -e /opt/envbuilder/lock/wheels && echo WHEELS; "
                           "command -v uv || echo NO-UV; command -v gcc || echo NO-GCC; "
                           "ls /run/secrets 2>/dev/null || echo NO-SECRETS")
    assert status == 0, out
    assert "uv.lock" in out and "envbuilder.lock.json" in out
    assert "WHEELS" not in out and "NO-UV" in out and "NO-GCC" in out and "NO-SECRETS" in out


def _test_ca(tmp: Path) -> bytes:
    key, crt = tmp / "ca.key", tmp / "ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=envbuilder leak-test CA", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    return crt.read_bytes()


def test_no_ca_or_secret_in_any_layer(smoke_lockdir: Path, debian_base_image: str, tmp_path: Path) -> None:
    host_bundle = Path(os.environ.get("SSL_CERT_FILE") or SYSTEM_BUNDLE)
    test_ca = _test_ca(tmp_path)
    bundle = tmp_path / "bundle.pem"
    # the real proxy CA (needed to reach PyPI here) plus a CA made for this test
    bundle.write_bytes((host_bundle.read_bytes() if host_bundle.is_file() else b"") + b"\n" + test_ca)
    token = "envb-leak-test-" + os.urandom(12).hex()
    token_file = tmp_path / "token.txt"
    token_file.write_text(os.urandom(16).hex())
    tag = "envbuilder-test/smoke-secrets:latest"
    proc = run_cli("build", str(smoke_lockdir), "--tag", tag, "--base", debian_base_image, "--ca-bundle", str(bundle),
                   "--secret", "id=ENVB_TOKEN,env=ENVB_TEST_TOKEN", "--secret", f"id=ENVB_FILE,src={token_file}",
                   "--json", env={"ENVB_TEST_TOKEN": token})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["secrets"] == {"ca_bundle": True, "ids": ["ENVB_FILE", "ENVB_TOKEN"]}
    assert report["secret_scan"]["findings"] == [] and report["secret_scan"]["layers"] >= 3

    # An independent scan here, of every layer including the base's: the test CA, the
    # private certificates of the host bundle (the proxy CA) and both secret values.
    needles = layerscan.ca_needles(bundle.read_bytes())
    assert any(k.endswith("-pem") for k in needles)
    test_ca_body = layerscan.pem_bodies(test_ca)[0]
    needles["test-ca"] = test_ca_body[64:128]
    needles["token"] = token.encode()
    needles["file-secret"] = token_file.read_bytes()
    # positive control: a string that is in the image (uv.lock's text) must be found
    lock_line = next(ln for ln in (smoke_lockdir / "uv.lock").read_text().splitlines() if "causal-conv1d" in ln)
    needles["control"] = lock_line.encode()
    findings, stats = layerscan.scan_saved_image(engine.save_stream(engine.client(), tag), needles)
    assert stats["files"] > 1000 and stats["bytes"] > 100_000_000
    found = {f.needle for f in findings}
    assert "control" in found, "the scanner must find a string that is in the image"
    assert found == {"control"}, [f for f in findings if f.needle != "control"]


def test_failed_build_names_step_tail_and_advice(smoke_lockdir: Path, debian_base_image: str,
                                                 tmp_path: Path) -> None:
    # The same lock, but stage 2 asked to compile causal-conv1d's CUDA kernels on a base without
    # nvcc: a real stage-2 failure (stage 1 comes from the layer cache, so this fails fast).
    lockdir = tmp_path / "smoke-cuda"
    shutil.copytree(smoke_lockdir, lockdir)
    record_path = lockdir / "envbuilder.lock.json"
    record = json.loads(record_path.read_text())
    record["stage2_env"] = {**record["stage2_env"], "CAUSAL_CONV1D_SKIP_CUDA_BUILD": "FALSE"}
    record_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    proc = run_cli("build", str(lockdir), "--tag", "envbuilder-test/smoke-fail:latest",
                   "--base", debian_base_image, "--no-scan", "--json")
    assert proc.returncode == 32, proc.stderr[-2000:]
    err = json.loads(proc.stdout)
    assert err["error"] == "build-failed"
    assert err["details"]["step"].startswith("[builder ") and "--extra compile" in err["details"]["step"]
    assert "no CUDA toolkit" in err["cause"] and "--target stage1" in err["fix"]
    tail = err["details"]["log_tail"]
    assert 0 < len(tail) <= 30 and any("nvcc" in ln or "CUDA_HOME" in ln for ln in tail)
    assert Path(err["details"]["log"]).is_file()
    assert "build failed at [builder" in proc.stderr


def test_missing_base_image_is_its_own_error(smoke_lockdir: Path) -> None:
    proc = run_cli("build", str(smoke_lockdir), "--base", "envbuilder-test/no-such-base:never", "--no-pull")
    assert proc.returncode == 31, proc.stderr
    assert "envbuilder-test/no-such-base:never" in proc.stderr and "fix:" in proc.stderr


def test_no_daemon_is_its_own_error(smoke_lockdir: Path, tmp_path: Path) -> None:
    proc = run_cli("build", str(smoke_lockdir), env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"})
    assert proc.returncode == 30, proc.stderr
    assert "no Docker daemon answers" in proc.stderr


def test_target_builder_keeps_build_tools_and_runs_import_check(smoke_lockdir: Path, debian_base_image: str) -> None:
    proc = run_cli("build", str(smoke_lockdir), "--target", "builder", "--tag", "envbuilder-test/smoke-builder:latest",
                   "--base", debian_base_image, "--no-scan", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["import_check"] == "passed" and report["target"] == "builder"
    status, out = in_image("envbuilder-test/smoke-builder:latest", "sh", "-c",
                           "uv --version; ls /opt/envbuilder/lock/wheels")
    assert status == 0 and "uv 0." in out and "torch-" in out


def test_a_pin_change_of_the_same_size_reaches_the_image(smoke_lockdir: Path, debian_base_image: str,
                                                         tmp_path: Path, repo_root: Path) -> None:
    # einops 0.8.1 -> 0.8.0 leaves pyproject.toml and uv.lock the same size, and the context files
    # carry the lock's fixed mtime: a build must still see the new content (regression: BuildKit's
    # incremental context sync skipped such files when the context was passed as ".").
    matrices = tmp_path / "matrices"
    shutil.copytree(repo_root / "matrices", matrices)
    smoke = matrices / "smoke.toml"
    assert '"einops==0.8.1"' in smoke.read_text()
    smoke.write_text(smoke.read_text().replace('"einops==0.8.1"', '"einops==0.8.0"'))
    lockdir = tmp_path / "smoke-einops"
    args = ["lock", "--nemo", "smoke", "-o", str(lockdir), "--no-detect"]
    if any(Path("/opt/wheels").glob("torch-*.whl")):  # as the smoke_lockdir fixture does
        args += ["--find-links", "/opt/wheels"]
    locked = run_cli(*args, env={"ENVBUILDER_MATRICES": str(matrices)}, timeout=900)
    assert locked.returncode == 0, locked.stderr[-2000:]
    assert (lockdir / "uv.lock").stat().st_size == (smoke_lockdir / "uv.lock").stat().st_size
    tag = "envbuilder-test/smoke-pin:latest"
    proc = run_cli("build", str(lockdir), "--target", "stage1", "--tag", tag, "--base", debian_base_image,
                   "--no-scan")
    assert proc.returncode == 0, proc.stderr[-3000:]
    status, out = in_image(tag, "/opt/venv/bin/python", "-c",
                           "import importlib.metadata as m; print(m.version('einops'))")
    assert status == 0 and out.strip().splitlines()[-1] == "0.8.0", out
