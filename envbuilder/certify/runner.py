"""Host side: start `python -m envbuilder.certify` inside an image, squashfs, SIF, venv or this interpreter.

The package directory envbuilder/ is mounted read-only into containers (it needs only the
standard library and the target's torch); expectations go in through a second read-only
mount and results come back through a writable one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from envbuilder import procs
from envbuilder.canonical import sha256_file
from envbuilder.errors import CertifyEnvironmentError, ImageNotFoundError, ToolMissingError
from envbuilder.lock.record import RECORD_NAME

PKG_MOUNT = "/opt/envbuilder-certify"
IN_MOUNT = "/opt/envbuilder-certify-in"
OUT_MOUNT = "/opt/envbuilder-certify-out"
_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass(frozen=True)
class Target:
    kind: str  # image | sqsh | sif | venv | in-place
    ref: str | None = None
    interpreter: str = "python"  # inside the container: a name on its PATH or an absolute path


def package_root() -> Path:
    """Directory that contains envbuilder/ (what gets mounted)."""
    return Path(__file__).resolve().parents[2]


def image_info(tag: str) -> tuple[str, dict[str, str]]:
    """(image id 'sha256:...', labels) from the local Docker engine."""
    try:
        import docker
        from docker.errors import DockerException, ImageNotFound
    except ImportError as exc:
        raise ToolMissingError("the docker Python SDK is not installed", "pip install docker") from exc
    try:
        client = docker.from_env()
        img = client.images.get(tag)
    except ImageNotFound as exc:
        raise ImageNotFoundError(f"image {tag} is not in the local Docker engine",
                                 f"build it with `envbuilder build LOCKDIR --tag {tag}` or docker load it") from exc
    except DockerException as exc:
        raise CertifyEnvironmentError(f"cannot reach the Docker engine: {exc}", "start dockerd") from exc
    return str(img.id), dict(img.labels or {})


def copy_lock_from_image(tag: str, dest: Path) -> Path:
    """The lock travels in the image at /opt/envbuilder/lock; copy it out when --lock is not given."""
    import io
    import tarfile

    import docker

    client = docker.from_env()
    container = client.containers.create(tag, command=["true"])
    try:
        stream, _ = container.get_archive("/opt/envbuilder/lock")
        buf = io.BytesIO(b"".join(stream))
    except Exception as exc:
        raise CertifyEnvironmentError(f"image {tag} carries no /opt/envbuilder/lock",
                                      "pass --lock DIR (the lock the image was built from)") from exc
    finally:
        container.remove(force=True)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buf) as tar:
        for m in tar.getmembers():
            if m.isfile() and Path(m.name).name in ("uv.lock", "pyproject.toml", RECORD_NAME):
                fh = tar.extractfile(m)
                assert fh is not None
                (dest / Path(m.name).name).write_bytes(fh.read())
    return dest


def artifact_record(t: Target) -> dict[str, str]:
    if t.kind == "image":
        assert t.ref
        digest, _ = image_info(t.ref)
        return {"kind": "image", "ref": t.ref, "digest": digest}
    if t.kind in ("sqsh", "sif"):
        assert t.ref
        p = Path(t.ref)
        if not p.is_file():
            raise CertifyEnvironmentError(f"{p} does not exist", f"export it first: envbuilder export --{t.kind}")
        return {"kind": t.kind, "ref": p.name, "sha256": sha256_file(p)}
    return {"kind": t.kind}


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise ToolMissingError(f"{tool} is not on PATH", f"install {tool} on this host, or use another target")
    return path


def build_command(t: Target, inner_args: list[str], in_dir: Path, out_dir: Path,
                  gpus: bool) -> tuple[list[str], dict[str, str], list[list[str]]]:
    """(argv, env, cleanup commands). inner_args use IN_MOUNT/OUT_MOUNT paths for containers."""
    env = os.environ.copy()
    for k, v in _SAFE_ENV.items():
        env.setdefault(k, v)
    pkg = str(package_root() / "envbuilder")
    module = ["-m", "envbuilder.certify", *inner_args]
    if t.kind in ("venv", "in-place"):
        env["PYTHONPATH"] = str(package_root()) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        if t.kind == "venv":
            assert t.ref
            py = Path(t.ref) / "bin" / "python"
            if not py.exists():
                raise CertifyEnvironmentError(f"{py} does not exist", "pass the venv root (the dir with bin/python)")
            return [str(py), *module], env, []
        return [sys.executable, *module], env, []
    inner_env = {"PYTHONPATH": PKG_MOUNT, "PYTHONDONTWRITEBYTECODE": "1", **_SAFE_ENV}
    if t.kind == "image":
        assert t.ref
        argv = [_need("docker"), "run", "--rm", "--ipc=host",
                "-v", f"{pkg}:{PKG_MOUNT}/envbuilder:ro", "-v", f"{in_dir}:{IN_MOUNT}:ro",
                "-v", f"{out_dir}:{OUT_MOUNT}"]
        if gpus:
            argv += ["--gpus", "all"]
        for k, v in inner_env.items():
            argv += ["-e", f"{k}={v}"]
        return [*argv, t.ref, t.interpreter, *module], env, []
    if t.kind == "sqsh":
        assert t.ref
        enroot = _need("enroot")
        name = f"envbuilder-certify-{uuid.uuid4().hex[:8]}"
        create = [enroot, "create", "--name", name, str(t.ref)]
        subprocess.run(create, check=True, capture_output=True)
        argv = [enroot, "start", "--mount", f"{pkg}:{PKG_MOUNT}/envbuilder:ro,x-create=dir",
                "--mount", f"{in_dir}:{IN_MOUNT}:ro,x-create=dir", "--mount", f"{out_dir}:{OUT_MOUNT}:x-create=dir"]
        for k, v in inner_env.items():
            argv += ["--env", f"{k}={v}"]
        if not gpus:
            env["NVIDIA_VISIBLE_DEVICES"] = "void"
        return [*argv, name, t.interpreter, *module], env, [[enroot, "remove", "--force", name]]
    if t.kind == "sif":
        assert t.ref
        app = shutil.which("apptainer") or _need("singularity")
        argv = [app, "exec", "--bind", f"{pkg}:{PKG_MOUNT}/envbuilder:ro,{in_dir}:{IN_MOUNT}:ro,{out_dir}:{OUT_MOUNT}"]
        if gpus:
            argv.append("--nv")
        for k, v in inner_env.items():
            argv += ["--env", f"{k}={v}"]
        return [*argv, str(t.ref), t.interpreter, *module], env, []
    raise CertifyEnvironmentError(f"unknown target kind {t.kind}", "use --image, --sqsh, --sif, --venv or --in-place")


def run_certify(t: Target, inner_args: list[str], in_dir: Path, out_dir: Path, gpus: bool) -> tuple[int, str]:
    """Run the in-environment entry point; stderr streams through, stdout (certificate JSON) is returned."""
    argv, env, cleanup = build_command(t, inner_args, in_dir, out_dir, gpus)
    try:
        proc = procs.run(argv, env=env, stdout=subprocess.PIPE, text=True)  # killed with envbuilder
    finally:
        for c in cleanup:
            subprocess.run(c, capture_output=True)
    return proc.returncode, proc.stdout


def inner_paths(t: Target, in_dir: Path, out_dir: Path) -> tuple[str, str]:
    """(expectations file, output dir) as the environment sees them."""
    if t.kind in ("venv", "in-place"):
        return str(in_dir / "expect.json"), str(out_dir)
    return f"{IN_MOUNT}/expect.json", OUT_MOUNT
