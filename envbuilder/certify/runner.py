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
from typing import ClassVar

from envbuilder import procs
from envbuilder.canonical import sha256_file
from envbuilder.certify.certificate import Artifact
from envbuilder.choices import CERTIFY_TARGETS
from envbuilder.errors import CertifyEnvironmentError, ImageNotFoundError, ToolMissingError
from envbuilder.host.engine import engine_client
from envbuilder.lock.record import LABEL_LOCK_SHA256, RECORD_NAME

PKG_MOUNT = "/opt/envbuilder-certify"
IN_MOUNT = "/opt/envbuilder-certify-in"
OUT_MOUNT = "/opt/envbuilder-certify-out"
_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


Command = tuple[list[str], dict[str, str], list[list[str]]]  # argv, environment, cleanup commands


def _base_env() -> dict[str, str]:
    env = os.environ.copy()
    for k, v in _SAFE_ENV.items():
        env.setdefault(k, v)
    return env


def _module(inner_args: list[str]) -> list[str]:
    return ["-m", "envbuilder.certify", *inner_args]


_INNER_ENV = {"PYTHONPATH": PKG_MOUNT, "PYTHONDONTWRITEBYTECODE": "1", **_SAFE_ENV}


def package_root() -> Path:
    """Directory that contains envbuilder/ (what gets mounted)."""
    return Path(__file__).resolve().parents[2]


def image_info(tag: str) -> tuple[str, dict[str, str]]:
    """(image id 'sha256:...', labels) from the local Docker engine."""
    client = engine_client()
    from docker.errors import DockerException, ImageNotFound

    try:
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

    container = engine_client().containers.create(tag, command=["true"])
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


@dataclass(frozen=True)
class _HostTarget:
    """Runs on this host's filesystem: the package goes in through PYTHONPATH, paths are host paths."""

    ref: str | None = None
    interpreter: str = "python"
    on_host: ClassVar[bool] = True
    kind: ClassVar[str] = ""

    def artifact(self) -> Artifact:
        return Artifact(self.kind)

    def python(self) -> str:
        return sys.executable

    #: the caller's PYTHONPATH is part of what is certified (in-place), or envbuilder's own (a venv: it would
    #: put envbuilder's dependencies beside the venv's and fail drift with packages the venv never had)
    keep_pythonpath: ClassVar[bool] = True

    def command(self, inner_args: list[str], in_dir: Path, out_dir: Path, gpus: bool) -> Command:
        env = _base_env()
        inherited = env.get("PYTHONPATH") if self.keep_pythonpath else None
        env["PYTHONPATH"] = str(package_root()) + (os.pathsep + inherited if inherited else "")
        return [self.python(), *_module(inner_args)], env, []

    def inner_paths(self, in_dir: Path, out_dir: Path) -> tuple[str, str]:
        return str(in_dir / "expect.json"), str(out_dir)

    def lock_label(self) -> str | None:
        return None

    def lock_inside(self, dest: Path) -> Path | None:
        return None


@dataclass(frozen=True)
class InPlaceTarget(_HostTarget):
    """This interpreter (a bare GPU host, or inside a container already)."""

    kind: ClassVar[str] = "in-place"


@dataclass(frozen=True)
class VenvTarget(_HostTarget):
    """A virtual environment's root directory; its bin/python runs the checks."""

    kind: ClassVar[str] = "venv"
    keep_pythonpath: ClassVar[bool] = False

    def python(self) -> str:
        assert self.ref
        py = Path(self.ref) / "bin" / "python"
        if not py.exists():
            raise CertifyEnvironmentError(f"{py} does not exist", "pass the venv root (the dir with bin/python)")
        return str(py)


@dataclass(frozen=True)
class _ContainerTarget:
    """Runs inside a container: envbuilder/, the expectations and the output are mounted."""

    ref: str
    interpreter: str = "python"
    on_host: ClassVar[bool] = False
    kind: ClassVar[str] = ""

    def inner_paths(self, in_dir: Path, out_dir: Path) -> tuple[str, str]:
        return f"{IN_MOUNT}/expect.json", OUT_MOUNT

    def lock_label(self) -> str | None:
        return None

    def lock_inside(self, dest: Path) -> Path | None:
        return None

    def _file_artifact(self) -> Artifact:
        p = Path(self.ref)
        if not p.is_file():
            raise CertifyEnvironmentError(f"{p} does not exist", f"export it first: envbuilder export --format "
                                          f"{self.kind}")
        return Artifact(self.kind, p.name, sha256=sha256_file(p))


@dataclass(frozen=True)
class ImageTarget(_ContainerTarget):
    """An image in the local Docker engine (docker run; --gpus all for GPU levels)."""

    kind: ClassVar[str] = "image"

    def artifact(self) -> Artifact:
        digest, _ = image_info(self.ref)
        return Artifact("image", self.ref, digest=digest)

    def command(self, inner_args: list[str], in_dir: Path, out_dir: Path, gpus: bool) -> Command:
        pkg = str(package_root() / "envbuilder")
        argv = [_need("docker"), "run", "--rm", "--ipc=host",
                "-v", f"{pkg}:{PKG_MOUNT}/envbuilder:ro", "-v", f"{in_dir}:{IN_MOUNT}:ro",
                "-v", f"{out_dir}:{OUT_MOUNT}"]
        if gpus:
            argv += ["--gpus", "all"]
        for k, v in _INNER_ENV.items():
            argv += ["-e", f"{k}={v}"]
        return [*argv, self.ref, self.interpreter, *_module(inner_args)], _base_env(), []

    def lock_label(self) -> str | None:
        """The lock the image says it was built from (its io.envbuilder.lock-sha256 label)."""
        return image_info(self.ref)[1].get(LABEL_LOCK_SHA256)

    def lock_inside(self, dest: Path) -> Path | None:
        return copy_lock_from_image(self.ref, dest)


@dataclass(frozen=True)
class SqshTarget(_ContainerTarget):
    """An enroot squashfs (enroot create + start; the container is removed afterwards)."""

    kind: ClassVar[str] = "sqsh"

    def artifact(self) -> Artifact:
        return self._file_artifact()

    def command(self, inner_args: list[str], in_dir: Path, out_dir: Path, gpus: bool) -> Command:
        pkg = str(package_root() / "envbuilder")
        env = _base_env()
        enroot = _need("enroot")
        name = f"envbuilder-certify-{uuid.uuid4().hex[:8]}"
        procs.run([enroot, "create", "--name", name, str(self.ref)], check=True, capture_output=True)
        argv = [enroot, "start", "--mount", f"{pkg}:{PKG_MOUNT}/envbuilder:ro,x-create=dir",
                "--mount", f"{in_dir}:{IN_MOUNT}:ro,x-create=dir", "--mount", f"{out_dir}:{OUT_MOUNT}:x-create=dir"]
        for k, v in _INNER_ENV.items():
            argv += ["--env", f"{k}={v}"]
        if not gpus:
            env["NVIDIA_VISIBLE_DEVICES"] = "void"
        return [*argv, name, self.interpreter, *_module(inner_args)], env, [[enroot, "remove", "--force", name]]


@dataclass(frozen=True)
class SifTarget(_ContainerTarget):
    """An Apptainer / Singularity SIF (apptainer exec; --nv for GPU levels)."""

    kind: ClassVar[str] = "sif"

    def artifact(self) -> Artifact:
        return self._file_artifact()

    def command(self, inner_args: list[str], in_dir: Path, out_dir: Path, gpus: bool) -> Command:
        pkg = str(package_root() / "envbuilder")
        app = shutil.which("apptainer") or _need("singularity")
        argv = [app, "exec", "--bind", f"{pkg}:{PKG_MOUNT}/envbuilder:ro,{in_dir}:{IN_MOUNT}:ro,{out_dir}:{OUT_MOUNT}"]
        if gpus:
            argv.append("--nv")
        for k, v in _INNER_ENV.items():
            argv += ["--env", f"{k}={v}"]
        return [*argv, str(self.ref), self.interpreter, *_module(inner_args)], _base_env(), []


Target = InPlaceTarget | VenvTarget | ImageTarget | SqshTarget | SifTarget
TARGET_CLASSES: dict[str, type[Target]] = {
    cls.kind: cls for cls in (ImageTarget, SqshTarget, SifTarget, VenvTarget, InPlaceTarget)}
assert tuple(TARGET_CLASSES) == CERTIFY_TARGETS, "choices.CERTIFY_TARGETS and the target classes disagree"


def make_target(kind: str, ref: str | None = None, interpreter: str = "python") -> Target:
    cls = TARGET_CLASSES.get(kind)
    if cls is None:
        raise CertifyEnvironmentError(f"unknown target kind {kind}", "use --image, --sqsh, --sif, --venv or --in-place")
    if cls is InPlaceTarget:
        return InPlaceTarget(None, interpreter)
    if not ref:
        raise CertifyEnvironmentError(f"the {kind} target needs a reference", f"pass --{kind} REF")
    return cls(ref, interpreter)


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise ToolMissingError(f"{tool} is not on PATH", f"install {tool} on this host, or use another target")
    return path


def run_certify(t: Target, inner_args: list[str], in_dir: Path, out_dir: Path, gpus: bool) -> tuple[int, str]:
    """Run the in-environment entry point; stderr streams through, stdout (certificate JSON) is returned."""
    argv, env, cleanup = t.command(inner_args, in_dir, out_dir, gpus)
    try:
        proc = procs.run(argv, env=env, stdout=subprocess.PIPE, text=True)  # killed with envbuilder
    finally:
        for c in cleanup:
            procs.run(c, capture_output=True)
    return proc.returncode, proc.stdout
