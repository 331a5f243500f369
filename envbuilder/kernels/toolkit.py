"""The CUDA compiler a stage-2 build uses: the host's when its major is torch's, else one assembled from packages.

torch refuses to build an extension with an nvcc whose CUDA major differs from its own, so a host with
CUDA 13 cannot build for a cu126 torch, and a CPU-only builder has no nvcc at all. The matrix
(matrices/cuda_toolkits.toml) names, per CUDA major.minor, the files a toolkit root is made of, each with its
sha256: NVIDIA's PyPI wheels, and for CUDA 12 (whose PyPI wheels carry no nvcc) Debian's nvidia-cuda-toolkit.
They are downloaded once, checked, and assembled into a CUDA_HOME-shaped directory in the cache:

    bin/      nvcc, ptxas, fatbinary, cudafe++, nvlink, bin2c, cuobjdump ... and an nvcc.profile of our own
    nvvm/     bin/cicc, libdevice/
    include/  the runtime headers, crt/, CCCL (thrust, cub, libcu++)
    lib64/    libcudart.so (extensions link it; nvcc only compiles, -c, in a torch extension build)
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from envbuilder import procs
from envbuilder.atomic import write_atomic
from envbuilder.canonical import major_minor
from envbuilder.errors import CudaToolkitError
from envbuilder.kernels.files import fetch
from envbuilder.lock.uvlock import LockedFile
from envbuilder.matrix.model import CudaToolkit, Matrix
from envbuilder.progress import Progress

MARKER = "envbuilder-toolkit.json"

# nvcc.profile of a standard toolkit layout, relative to the profile's own directory (_HERE_ is bin/)
_PROFILE = """TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""
_RELEASE = re.compile(r"release (\d+)\.(\d+), V([\d.]+)")


@dataclass(frozen=True)
class Toolkit:
    """The CUDA_HOME a build uses and where it came from."""

    root: Path
    nvcc: str                 # V-number nvcc reports, e.g. 12.4.131
    origin: str               # host | assembled
    source: str               # the CUDA_HOME/PATH it was found on, or the matrix entry's source

    @property
    def major(self) -> int:
        return int(self.nvcc.split(".", 1)[0])

    def to_dict(self) -> dict[str, str]:
        return {"root": str(self.root), "nvcc": self.nvcc, "origin": self.origin, "source": self.source}


def nvcc_version(root: Path) -> str | None:
    """What `ROOT/bin/nvcc --version` reports (e.g. 12.4.131), None without a working nvcc."""
    nvcc = root / "bin" / "nvcc"
    if not nvcc.is_file():
        return None
    try:
        out = procs.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _RELEASE.search(out)
    return m.group(3) if m else None


def host_toolkit(explicit: Path | None) -> Toolkit | None:
    """--cuda-home, else CUDA_HOME / CUDA_PATH, else the nvcc on PATH."""
    candidates: list[tuple[Path, str]] = []
    if explicit is not None:
        candidates.append((Path(explicit), "--cuda-home"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append((Path(os.environ[var]), var))
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append((Path(on_path).resolve().parent.parent, "PATH"))
    for root, how in candidates:
        version = nvcc_version(root)
        if version:
            return Toolkit(root, version, "host", f"{how} ({root})")
        if how == "--cuda-home":
            raise CudaToolkitError(f"--cuda-home {root} has no working bin/nvcc",
                                   "pass the root of a CUDA toolkit, or leave --cuda-home out to let envbuilder "
                                   "assemble one of torch's CUDA major")
    return None


def choose_toolkit(matrix: Matrix, torch_cuda: str) -> CudaToolkit:
    """The matrix's toolkit for torch's CUDA: the same major.minor, else the newest of the same major."""
    major = int(torch_cuda.split(".", 1)[0])
    same_major = [t for t in matrix.cuda_toolkits if t.major == major]
    for t in same_major:
        if t.cuda == major_minor(torch_cuda):
            return t
    if same_major:
        return same_major[0]
    known = ", ".join(t.cuda for t in matrix.cuda_toolkits) or "none"
    raise CudaToolkitError(f"no CUDA {major}.x compiler here and none the matrix can assemble (it has: {known})",
                           f"install a CUDA {major}.x toolkit and pass --cuda-home DIR")


def _unpack_deb(deb: Path, into: Path) -> None:
    """A .deb is an ar archive; its data.tar.* holds the files. Read with the standard library (no dpkg)."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise CudaToolkitError(f"{deb.name} is not a Debian package", "delete it from the cache and retry")
    pos = 8
    while pos + 60 <= len(data):
        name = data[pos:pos + 16].decode("ascii").strip().rstrip("/")
        size = int(data[pos + 48:pos + 58].decode("ascii").strip())
        body = data[pos + 60:pos + 60 + size]
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                # links into the host's /etc and /usr (nvcc.profile -> /etc/nvcc.profile) are dropped: the
                # layout below writes its own; everything else goes through tarfile's "data" safety filter
                members = [m for m in tar.getmembers() if not (m.issym() and m.linkname.startswith("/"))]
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(into, members=members, filter="data")
                else:  # pragma: no cover (Python < 3.10.12)
                    tar.extractall(into, members=members)
            return
        pos += 60 + size + (size % 2)
    raise CudaToolkitError(f"{deb.name} has no data.tar member", "delete it from the cache and retry")


def _merge(src: Path, dst: Path) -> None:
    """Copy the tree `src` into `dst`, keeping what is there (headers of several wheels share include/)."""
    if not src.is_dir():
        return
    for path in sorted(src.rglob("*")):
        target = dst / path.relative_to(src)
        if path.is_dir() and not path.is_symlink():
            target.mkdir(parents=True, exist_ok=True)
        elif not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target, follow_symlinks=False)


def _lay_out_deb(unpacked: Path, root: Path) -> None:
    """Debian's nvidia-cuda-toolkit: the nvcc driver, cicc and the stubs under usr/lib/nvidia-cuda-toolkit, the
    other tools in usr/bin, libdevice beside them (its /etc/nvcc.profile points at /usr: ours replaces it)."""
    top = unpacked / "usr" / "lib" / "nvidia-cuda-toolkit"
    (root / "nvvm" / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(top / "bin" / "cicc", root / "nvvm" / "bin" / "cicc")
    _merge(top / "libdevice", root / "nvvm" / "libdevice")
    _merge(top / "bin" / "crt", root / "bin" / "crt")
    shutil.copy2(top / "bin" / "nvcc", root / "bin" / "nvcc")
    for tool in sorted((unpacked / "usr" / "bin").iterdir()):
        if tool.is_file() and tool.name != "nvcc" and not (root / "bin" / tool.name).exists():
            shutil.copy2(tool, root / "bin" / tool.name)


def _lay_out_wheel(wheel: Path, work: Path, root: Path) -> None:
    """NVIDIA's wheels put one component under nvidia/<component>/ (cu12) or all of them under nvidia/cu13/."""
    unpacked = work / wheel.name
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
    for component in sorted((unpacked / "nvidia").iterdir()) if (unpacked / "nvidia").is_dir() else []:
        for part, dest in (("bin", "bin"), ("include", "include"), ("lib", "lib64"), ("lib64", "lib64"),
                           ("nvvm", "nvvm")):
            _merge(component / part, root / dest)


def _finish(root: Path) -> None:
    profile = _PROFILE
    if (root / "include" / "cccl").is_dir():  # CUDA 13 keeps CCCL there, as its own nvcc.profile says
        profile += 'SYSTEM_INCLUDES +=  "-isystem" "$(TOP)/include/cccl" $(_SPACE_)\n'
    (root / "bin" / "nvcc.profile").unlink(missing_ok=True)
    (root / "bin" / "nvcc.profile").write_text(profile, encoding="ascii")
    lib = root / "lib64"
    lib.mkdir(parents=True, exist_ok=True)
    for versioned in sorted(lib.glob("libcudart.so.*")):
        if not (lib / "libcudart.so").exists():
            (lib / "libcudart.so").symlink_to(versioned.name)
    for f in (root / "bin").iterdir():
        if f.is_file():
            f.chmod(0o755)
    for f in (root / "nvvm" / "bin").glob("*"):
        f.chmod(0o755)


def assemble(toolkit: CudaToolkit, cache: Path, progress: Progress, ca_bundle: Path | None = None) -> Toolkit:
    """The toolkit's root in the cache, made once: files fetched and hash-checked, laid out in a staging
    directory, checked by running its nvcc, then renamed into place (a killed run leaves no half toolkit)."""
    key = sha256_of_spec(toolkit)
    root = cache / "toolkits" / f"cuda-{toolkit.nvcc}-{key[:12]}"
    if (root / MARKER).is_file() and nvcc_version(root) == toolkit.nvcc:
        return Toolkit(root, toolkit.nvcc, "assembled", toolkit.source)
    progress(f"assembling CUDA {toolkit.release} (nvcc {toolkit.nvcc}) from {len(toolkit.files)} packages "
             f"into {root}")
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = root.parent / f".{root.name}.{os.getpid()}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        (staging / "bin").mkdir(parents=True)
        for f in toolkit.files:
            path, downloaded = fetch(LockedFile(f.url, f.sha256, None), cache, ca_bundle)
            if downloaded:
                progress(f"  downloaded {path.name}")
            if f.kind == "deb":
                unpacked = staging / ".deb" / path.name
                _unpack_deb(path, unpacked)
                _lay_out_deb(unpacked, staging)
            else:
                _lay_out_wheel(path, staging / ".wheels", staging)
        shutil.rmtree(staging / ".deb", ignore_errors=True)
        shutil.rmtree(staging / ".wheels", ignore_errors=True)
        _finish(staging)
        got = nvcc_version(staging)
        if got != toolkit.nvcc:
            raise CudaToolkitError(f"the assembled CUDA {toolkit.release} reports nvcc {got or 'nothing'}, "
                                   f"not {toolkit.nvcc}", "fix matrices/cuda_toolkits.toml")
        write_atomic(staging / MARKER, f'{{"cuda": "{toolkit.cuda}", "nvcc": "{toolkit.nvcc}", "key": "{key}"}}\n')
        shutil.rmtree(root, ignore_errors=True)
        os.replace(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Toolkit(root, toolkit.nvcc, "assembled", toolkit.source)


def sha256_of_spec(toolkit: CudaToolkit) -> str:
    return hashlib.sha256("\n".join(f"{f.kind} {f.sha256}" for f in toolkit.files).encode()).hexdigest()


def toolkit_for(torch_cuda: str | None, explicit: Path | None, matrix: Matrix, cache: Path, progress: Progress,
                ca_bundle: Path | None = None) -> Toolkit | None:
    """The CUDA_HOME to build against torch's CUDA: the host's when its major matches (an explicit --cuda-home
    must), else one assembled from the matrix. None for a CPU torch (nothing to compile for a GPU)."""
    if not torch_cuda:
        return None
    want = int(torch_cuda.split(".", 1)[0])
    found = host_toolkit(explicit)
    if found is not None and found.major == want:
        return found
    if explicit is not None and found is not None:
        raise CudaToolkitError(f"--cuda-home {explicit} is CUDA {found.nvcc}; torch is built with CUDA {torch_cuda} "
                               "and refuses an extension compiled by another major",
                               f"pass a CUDA {want}.x toolkit, or leave --cuda-home out")
    why = f"the host's nvcc is {found.nvcc} ({found.source})" if found else "the host has no nvcc"
    chosen = choose_toolkit(matrix, torch_cuda)
    progress(f"torch is built with CUDA {torch_cuda} and {why}: using CUDA {chosen.release} from "
             f"matrices/cuda_toolkits.toml")
    return assemble(chosen, cache, progress, ca_bundle)


def check_tree(root: Path) -> list[str]:
    """Files of a toolkit root a build needs that are missing (for tests and error messages)."""
    need = ["bin/nvcc", "bin/ptxas", "bin/fatbinary", "bin/cudafe++", "bin/nvlink", "nvvm/bin/cicc",
            "include/cuda_runtime.h", "include/crt/host_config.h", "lib64/libcudart.so"]
    return [n for n in need if not (root / n).exists()]

