"""The exported smoke SIF in the real Apptainer (Debian sid's 1.4.x, unprivileged, user namespaces).

Apptainer comes from the cached sid rootfs (scripts/apptainer-rootfs.sh) and runs through
scripts/bin/apptainer as uid 1000: exec, run and inspect of the SIF, `envbuilder certify --sif`
(level 0 plus the CPU pretrain, every check inside Apptainer), an image built from a generated
.def, and `export --compare` when Apptainer itself fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_fixtures import REPO, run_apptainer, runner_dir
from test_export_docker import tiny_image

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.runtime]
__all__ = ["tiny_image"]  # session fixture shared with test_export_docker


def test_exec_run_inspect(apptainer: str, smoke_sif: Path, smoke_lockdir: Path) -> None:
    r = run_apptainer(apptainer, "exec", str(smoke_sif), "python", "-c",
                      "import sys, torch; print(sys.prefix, torch.__version__)")
    assert r.returncode == 0, r.stderr[-2000:]
    prefix, torch_version = r.stdout.split()
    assert prefix == "/opt/venv" and torch_version.startswith("2.")
    # run: CMD is /bin/bash, so `run IMAGE -c CMD` hands -c to bash (it failed as a command before)
    r = run_apptainer(apptainer, "run", str(smoke_sif), "-c", "echo ran in $0 as $(id -u)")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "ran in /bin/bash as 1000"
    r = run_apptainer(apptainer, "inspect", "--json", str(smoke_sif))
    assert r.returncode == 0, r.stderr[-2000:]
    labels = json.loads(r.stdout)["data"]["attributes"]["labels"]
    record = json.loads((smoke_lockdir / "envbuilder.lock.json").read_text())
    assert labels["io.envbuilder.row"] == "smoke"
    assert labels["io.envbuilder.lock-sha256"] == record["lock_sha256"]
    r = run_apptainer(apptainer, "inspect", "--runscript", str(smoke_sif))
    assert r.returncode == 0 and "exec /bin/bash" in r.stdout


def test_ca_certificate_links_resolve_inside_apptainer(apptainer: str, smoke_sif: Path) -> None:
    """The links mksquashfs 4.5.1 broke (non-ASCII target and its hash link) open in the container."""
    script = ("import os, glob; bad = [p for p in glob.glob('/etc/ssl/certs/*') if not os.path.exists(p)]; "
              "print(len(glob.glob('/etc/ssl/certs/*')), len(bad), bad[:3])")
    r = run_apptainer(apptainer, "exec", str(smoke_sif), "python", "-c", script)
    assert r.returncode == 0, r.stderr[-2000:]
    total, dangling, _ = r.stdout.split(" ", 2)
    assert int(total) > 100 and int(dangling) == 0, r.stdout


def _runner_readable(path: Path) -> bool:
    """Can uid 1000 (others) reach `path`? Every parent must be searchable by others."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


def test_certify_sif_level0_and_cpu_pretrain(apptainer_path_env: dict[str, str], smoke_sif: Path,
                                             smoke_lockdir: Path) -> None:
    work = runner_dir("certify")
    try:
        src = REPO
        env = dict(apptainer_path_env)
        if not _runner_readable(REPO / "envbuilder"):  # e.g. a clone under /root: certify binds the package
            src = work / "src"
            shutil.copytree(REPO / "envbuilder", src / "envbuilder")
            for d in ("templates", "matrices"):
                shutil.copytree(REPO / d, src / d)
            env["PYTHONPATH"] = str(src)
        out = work / "cert"
        proc = subprocess.run(
            [sys.executable, "-m", "envbuilder", "certify", "--sif", str(smoke_sif), "--lock", str(smoke_lockdir),
             "--cpu", "--level", "1", "--steps", "10", "-o", str(out), "--json"],
            capture_output=True, text=True, timeout=1200, env=env, cwd=src)
        assert proc.returncode == 0, proc.stderr[-4000:]
        cert = json.loads(proc.stdout)
        by = {c["name"]: c for c in cert["checks"]}
        assert cert["artifact"]["kind"] == "sif"
        level0 = [c for c in cert["checks"] if c["status"] == "fail"]
        assert not level0, level0
        pre = by["pretrain:torch-gpt-cpu-dp2"]
        assert pre["status"] == "pass" and pre["measured"]["layout"] == {"dp": 2}
        assert pre["losses"][-1] < pre["losses"][0]
        assert by["torch-build"]["measured"]["torch"].startswith("2.")
        assert (out / "certificate.json").exists()
    finally:
        shutil.rmtree(work, ignore_errors=True)


DEF_DOCKERFILE = """FROM {base}
LABEL io.envbuilder.row=smoke io.envbuilder.lock-sha256={lock} org.example.site=a
ENV GREETING="hello def" PATH=/opt/tool/bin:/usr/local/bin:/usr/bin:/bin
CMD ["/bin/sh", "-c", "echo $GREETING"]
"""


def test_build_from_generated_def(apptainer: str, tiny_image: str,
                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    """`apptainer build` from the .def export wrote (its docker-archive form, as its header says).

    Without --force, Apptainer warns "Label: X already exists and force option is false" for every
    %labels key the image already has (4 for a Debian-based image of this kind before the fix, 11 for
    the smoke image): the .def must list only the labels the image lacks. Then the built SIF and ours
    run alike. The tiny image (dash + coreutils) keeps the build to seconds."""
    from test_export_docker import _build, _content_tag

    from envbuilder.export.pipeline import ExportOptions, export_image

    dockerfile = DEF_DOCKERFILE.format(base=tiny_image, lock="5e" * 32)
    image = _build(_content_tag("envbuilder-test/def-labels", dockerfile), dockerfile,
                   tmp_path_factory.mktemp("defctx"))
    work = runner_dir("defbuild")
    try:
        ours = export_image(ExportOptions(image=image, fmt="sif", output=work / "d.sif"))
        archive = work / "image.tar"
        with open(archive, "wb") as fh:
            import docker

            for chunk in docker.from_env(timeout=1800).images.get(image).save(named=True):
                fh.write(chunk)
        archive.chmod(0o644)
        deffile = (work / "d.sif.def").read_text()
        assert "Bootstrap: docker-daemon" in deffile
        local = deffile.replace("Bootstrap: docker-daemon", "Bootstrap: docker-archive").replace(
            f"From: {image}", f"From: {archive}")
        (work / "d.def").write_text(local)
        r = run_apptainer(apptainer, "build", str(work / "built.sif"), str(work / "d.def"), timeout=1800, cwd=work)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        assert "already exists" not in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
        r = run_apptainer(apptainer, "inspect", "--json", str(work / "built.sif"))
        labels = json.loads(r.stdout)["data"]["attributes"]["labels"]
        assert labels["io.envbuilder.row"] == "smoke" and labels["io.envbuilder.image-id"] == ours.image_id
        for sif_file in (work / "built.sif", work / "d.sif"):  # Apptainer's build and our export alike
            r = run_apptainer(apptainer, "run", str(sif_file), cwd=work)
            assert (r.returncode, r.stdout) == (0, "hello def\n"), r.stderr[-2000:]
            r = run_apptainer(apptainer, "exec", str(sif_file), "sh", "-c", 'echo "$PATH"', cwd=work)
            assert r.stdout.strip().startswith("/opt/tool/bin:"), r.stdout + r.stderr[-1000:]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_compare_reports_apptainer_failure_with_its_output(apptainer_path_env: dict[str, str],
                                                            tiny_image: str) -> None:
    """--compare runs `apptainer build docker-daemon://`; the unprivileged runner cannot reach the
    engine's socket, so Apptainer fails: that is its own error (exit 101) with Apptainer's words."""
    work = runner_dir("compare")
    try:
        proc = subprocess.run([sys.executable, "-m", "envbuilder", "export", tiny_image, "-o",
                               str(work / "c.sif"), "--compare", "--no-snippets"],
                              capture_output=True, text=True, env=apptainer_path_env, timeout=900, cwd=REPO)
        assert proc.returncode == 101, proc.stderr[-3000:]
        assert "apptainer failed" in proc.stderr and "Traceback" not in proc.stderr
        assert "docker" in proc.stderr.lower()  # Apptainer's own message about the engine is shown
        assert (work / "c.sif").exists()  # the export itself finished
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_apptainer_rootfs_is_cached(apptainer_rootfs: Path) -> None:
    """A second call of the setup script reuses the rootfs (no mmdebstrap): well under a second."""
    import time

    t0 = time.monotonic()
    out = subprocess.run([str(REPO / "scripts" / "apptainer-rootfs.sh")], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert Path(out) == apptainer_rootfs and time.monotonic() - t0 < 2
    assert os.access(apptainer_rootfs / "usr/bin/apptainer", os.X_OK)
