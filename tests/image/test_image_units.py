"""Build helpers without an engine: secrets, BuildKit log parsing, layer scanning, lock dirs."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from envbuilder.errors import LockDirError, SecretSpecError
from envbuilder.image import layerscan
from envbuilder.image.buildlog import BuildLog
from envbuilder.image.secrets import parse_secret, proxy_settings, secret_files
from envbuilder.image.tools import stage2_env
from envbuilder.lock.lockdir import open_lockdir
from envbuilder.troubleshoot import troubleshoot


def test_secret_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOKEN", "s3cr3t-value")
    assert parse_secret("id=HF_TOKEN,env=MY_TOKEN").env == "MY_TOKEN"
    f = tmp_path / "tok"
    f.write_text("x")
    assert parse_secret(f"id=T,src={f}").src == f
    for bad in ("HF_TOKEN", "id=HF_TOKEN", "id=ca,env=MY_TOKEN", "id=a-b,env=MY_TOKEN", "id=T,env=UNSET_VAR_XYZ",
                f"id=T,src={tmp_path}/missing", f"id=T,env=MY_TOKEN,src={f}", "id=T,foo=bar"):
        with pytest.raises(SecretSpecError):
            parse_secret(bad)


def test_secret_files_are_private_and_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOKEN", "s3cr3t-value")
    spec = parse_secret("id=HF_TOKEN,env=MY_TOKEN")
    with secret_files(None, [spec], {"HTTPS_PROXY": "http://u:p@proxy:3128"}) as (argv, ids):
        assert ids == ["HF_TOKEN", "HTTPS_PROXY"]
        srcs = [Path(a.split("src=")[1]) for a in argv if "src=" in a]
        assert all((p.stat().st_mode & 0o777) == 0o600 for p in srcs)
        assert srcs[0].read_text() == "s3cr3t-value"
        assert all("s3cr3t" not in a for a in argv)  # the value never goes on a command line
    assert not any(p.exists() for p in srcs)


def test_proxy_with_credentials_is_a_secret() -> None:
    args, secret = proxy_settings({"HTTPS_PROXY": "http://user:pw@proxy:3128", "HTTP_PROXY": "http://proxy:3128",
                                   "NO_PROXY": "localhost"})
    assert args == {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "localhost"}
    assert secret == {"HTTPS_PROXY": "http://user:pw@proxy:3128"}


FAILED_LOG = """\
#1 [internal] load build definition from Dockerfile
#1 DONE 0.0s
#5 [builder 1/8] FROM docker.io/envbuilder/test-base:bookworm
#5 CACHED
#9 [builder 6/8] RUN --mount=type=cache,target=/root/.cache/uv,id=envbuilder-uv,sharing=locked \
--mount=type=secret,id=ca if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi \
&& uv sync --frozen --no-install-project --python "$PYTHON"
#9 0.31 Using CPython 3.11.2 interpreter at: /usr/bin/python3.11
#9 1.02 Resolved 17 packages
#9 DONE 17.6s
#10 [builder 7/8] RUN --mount=type=cache,target=/root/.cache/uv uv sync --frozen --extra compile
#10 3.10 Building flash-attn==2.7.4.post1
#10 812.2 cc1plus: fatal error: Killed signal terminated program cc1plus
#10 812.3 ninja: build stopped: subcommand failed.
#10 ERROR: executor failed running [/bin/sh -c uv sync]: exit code: 1
------
 > [builder 7/8] RUN uv sync:
------
error: failed to solve: executor failed running [/bin/sh -c uv sync]: exit code: 1
"""


def test_buildlog_finds_failing_step_tail_and_advice() -> None:
    log = BuildLog()
    for line in FAILED_LOG.splitlines():  # (backslash-newlines in the literal join the header line)
        log.feed(line)
    steps = {s.name: s for s in log.user_steps()}
    assert steps["builder 1/8"].status == "cached"
    assert steps["builder 6/8"].status == "done" and steps["builder 6/8"].seconds == 17.6
    assert steps["builder 6/8"].short == '[builder 6/8] RUN uv sync --frozen --no-install-project --python "$PYTHON"'
    failed = log.failed_step()
    assert failed is not None and failed.name == "builder 7/8"
    assert log.tail(2) == ["cc1plus: fatal error: Killed signal terminated program cc1plus",
                           "ninja: build stopped: subcommand failed."]
    assert log.solve_error and "exit code: 1" in log.solve_error
    advice = troubleshoot("\n".join(log.raw))
    assert advice is not None and "--jobs" in advice.fix


def test_stage2_env_exports_are_shell_safe() -> None:
    lines = stage2_env.export_lines({"stage2_env": {"B": "x y'z", "A": "TRUE"}})
    assert lines == ["export A=TRUE", "export B='x y'\"'\"'z'", "export ENVBUILDER_STAGE2_SKIP=''"]
    out = subprocess.run(["sh", "-c", "eval \"$1\"; printf %s \"$B\"", "sh", "\n".join(lines)],
                         capture_output=True, text=True, check=True).stdout
    assert out == "x y'z"
    # the pins stage 2 builds from their git tags: uv sync must not build their kernel-less sdists
    lines = stage2_env.export_lines({"stage2_env": {}, "git_sources": {"mamba-ssm": {}, "causal-conv1d": {}}})
    out = subprocess.run(["sh", "-c", "eval \"$1\"; printf '%s|' $ENVBUILDER_STAGE2_SKIP", "sh", "\n".join(lines)],
                         capture_output=True, text=True, check=True).stdout
    assert out == "--no-install-package|causal-conv1d|--no-install-package|mamba-ssm|"
    with pytest.raises(SystemExit):
        stage2_env.export_lines({"stage2_env": {"A;rm -rf /": "1"}})


def _layer_tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_layerscan_reads_every_file_of_every_layer() -> None:
    secret = b"tok-" + b"9" * 40
    clean = _layer_tar({"etc/a": b"nothing here"})
    dirty = _layer_tar({"etc/b": b"x" * (3 << 20) + secret + b"y", "etc/c": b"z"})  # past a chunk boundary
    saved = _layer_tar({"aaa/layer.tar": clean, "bbb/layer.tar": dirty, "cfg.json": b'{"Env": []}'})
    chunks = [saved[i:i + 7000] for i in range(0, len(saved), 7000)]
    findings, stats = layerscan.scan_saved_image(chunks, {"token": secret, "absent": b"not-there-at-all"})
    assert stats["layers"] == 2 and stats["files"] == 3
    assert [(f.path, f.needle) for f in findings] == [("etc/b", "token")]
    assert findings[0].layer == "sha256:" + hashlib.sha256(dirty).hexdigest()  # the layer's diff_id


def test_ca_needles_skip_public_roots() -> None:
    body_a, body_b = b"A" * 300, b"QkJC" * 80
    bundle = (b"-----BEGIN CERTIFICATE-----\n" + body_a + b"\n-----END CERTIFICATE-----\n"
              b"-----BEGIN CERTIFICATE-----\n" + body_b + b"\n-----END CERTIFICATE-----\n")
    needles = layerscan.ca_needles(bundle, public={body_a})
    assert set(needles) == {"ca-cert-1-pem", "ca-cert-1-der"} and needles["ca-cert-1-pem"] == body_b[64:128]


def test_lockdir_errors(tmp_path: Path) -> None:
    with pytest.raises(LockDirError):
        open_lockdir(tmp_path / "missing")
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    with pytest.raises(LockDirError):
        open_lockdir(tmp_path)
    (tmp_path / "uv.lock").write_text("version = 1\n\n[[package]]\nname = \"x\"\nversion = \"1\"\n")
    (tmp_path / "envbuilder.lock.json").write_text(json.dumps({"schema": 1, "row": "x", "mode": "hermetic"}))
    with pytest.raises(LockDirError, match="lacks"):
        open_lockdir(tmp_path)
    from envbuilder.lock.record import LockFindings, build_record
    from envbuilder.matrix import load_matrix
    from envbuilder.resolve import ResolveRequest, resolve

    req = ResolveRequest(row="smoke")
    rec = build_record(resolve(load_matrix(), req), req, tmp_path, LockFindings("0.13.9"))
    (tmp_path / "envbuilder.lock.json").write_text(rec.to_json())
    assert open_lockdir(tmp_path).record == rec
    (tmp_path / "uv.lock").write_text("version = 2\n")
    with pytest.raises(LockDirError, match="changed after locking"):
        open_lockdir(tmp_path)


def test_cli_bad_secret_and_bad_lockdir_exit_codes(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "envbuilder", "build", *args], capture_output=True, text=True)

    (tmp_path / "lock").mkdir()
    bad_secret = run(str(tmp_path / "lock"), "--secret", "nonsense")
    assert bad_secret.returncode == 33 and "Traceback" not in bad_secret.stderr
    bad_dir = run(str(tmp_path / "lock"))
    assert bad_dir.returncode == 19 and "fix:" in bad_dir.stderr


def test_stage2_cache_key_follows_what_kernels_are_compiled_against() -> None:
    rec = {"stage2_env": {"CAUSAL_CONV1D_SKIP_CUDA_BUILD": "TRUE"}}
    env = {"TORCH_CUDA_ARCH_LIST": "8.0;9.0", "NVTE_CUDA_ARCHS": "80;90", "MAX_JOBS": "2"}
    key = stage2_env.cache_key(rec, env)
    assert key == stage2_env.cache_key(dict(rec), {**env, "MAX_JOBS": "16"})  # jobs do not change the output
    assert key != stage2_env.cache_key(rec, {**env, "TORCH_CUDA_ARCH_LIST": "9.0"})
    assert key != stage2_env.cache_key({"stage2_env": {"CAUSAL_CONV1D_SKIP_CUDA_BUILD": "FALSE"}}, env)


@pytest.mark.parametrize(("log", "needle"), [
    ("csrc/x.c:1:10: fatal error: Python.h: No such file or directory\n"
     "error: command '/usr/bin/x86_64-linux-gnu-gcc' failed with exit code 1", "python3-dev"),
    ("error: command 'x86_64-linux-gnu-gcc' failed: No such file or directory", "build-essential"),
    ("RuntimeError: causal_conv1d was requested, but nvcc was not found.", "--target stage1"),
])
def test_build_failures_get_advice(log: str, needle: str) -> None:
    advice = troubleshoot(log)
    assert advice is not None and needle in advice.fix
