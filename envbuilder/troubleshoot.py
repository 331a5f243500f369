"""Turn a raw failure log (uv, docker build, certify) into advice, cibuildwheel-style.

Patterns are data: each is (regex, cause, fix). The first match wins, so put the
most specific first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Advice:
    cause: str
    fix: str


_PATTERNS: list[tuple[str, str, str]] = [
    # disk first: its messages quote wheel names and would match the patterns below
    (r"No space left on device|os error 28|ENOSPC",
     "the disk is full (uv cache, Docker build cache or the output directory)",
     "free space: `uv cache prune`, `docker builder prune`, or point UV_CACHE_DIR / -o elsewhere"),
    # uv needed an interpreter (to build an sdist's metadata) and downloads are off while locking
    (r"No interpreter found|no Python interpreter found|Failed to find a Python interpreter|"
     r"No Python at|Python interpreter not found",
     "uv needed a Python interpreter matching the lock's requires-python and found none",
     "install one (`uv python install 3.11`, or the distribution's python3.11), or set "
     "UV_PYTHON_DOWNLOADS=automatic to let uv fetch it"),
    # network
    (r"dns error|Name or service not known|failed to lookup address|Temporary failure in name resolution",
     "a package index or git host could not be resolved (DNS)",
     "check network access or set UV_INDEX_URL to a reachable mirror; git sources need the git host"),
    (r"invalid peer certificate|UnknownIssuer|certificate verify failed|CERTIFICATE_VERIFY_FAILED",
     "TLS verification failed: a proxy is probably re-signing traffic with its own CA",
     "pass the proxy CA with --ca-bundle FILE (envbuilder sets SSL_CERT_FILE for uv and builds)"),
    (r"Connection refused|connect error|timed out|Connection reset",
     "a package index could not be reached",
     "retry, or point UV_INDEX_URL / HTTPS_PROXY at a reachable mirror"),
    # builds
    (r"No module named 'torch'",
     "a torch-dependent sdist was built in an isolated environment without torch",
     "list it under [tool.uv] no-build-isolation-package and install stage 1 first"),
    (r"No module named 'packaging'|No module named 'ninja'|No module named 'psutil'",
     "a no-build-isolation sdist is missing a build dependency in stage 1",
     "add the missing module to stage 1 (the build_requires of matrices/build_packages.toml)"),
    # a CUDA library older than the one a package was built against: the symbol carries the library's
    # version tag (TE 2.14 cu13 needs cublasLtGroupedMatrixLayoutInit_internal, cuBLAS >= 13.2)
    (r"undefined symbol: \w+, version lib(cublas|cublasLt|cudnn\w*|cudart|nccl|nvrtc|cusparse|cufft|curand)\.so",
     "a CUDA library in the environment is older than the one a package was built against",
     "install a newer nvidia-* wheel for that library (e.g. nvidia-cublas>=13.2 for transformer-engine-cu13 "
     "2.14), or lock a package version built against the CUDA that torch brings"),
    (r"undefined symbol",
     "a compiled extension does not match the torch it was loaded with (ABI mismatch)",
     "rebuild the kernel packages against the locked torch (uv sync --extra compile --reinstall)"),
    (r"no kernel image is available for execution on the device",
     "the kernels were not compiled for this GPU's architecture",
     "add the GPU's sm to --arch-list and rebuild"),
    # image build: a kernel sdist needs nvcc, the builder base has none
    (r"nvcc was not found|CUDA_HOME environment variable is not set|nvcc: not found",
     "a stage-2 package compiles CUDA kernels but the builder base has no CUDA toolkit (nvcc)",
     "build on the CUDA devel base (the default for the lock's CUDA), or stop before stage 2 with --target stage1"),
    (r"Python\.h: No such file or directory|provides `Python\.h`",
     "an sdist's C extension needs the Python headers, which the builder base lacks",
     "install python3-dev (python3.X-dev) in the base; envbuilder does so on apt-based bases"),
    (r"gcc' failed: No such file or directory|g\+\+: not found|gcc: not found|error: command '[^']*(gcc|g\+\+)' failed",
     "an sdist needs a C/C++ compiler and the builder base has none",
     "use a base with build-essential (envbuilder installs it on apt-based bases) or the CUDA devel base"),
    # certify (GPU runs): before the compiler out-of-memory pattern below, which would also match
    (r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError",
     "the GPU ran out of memory during a certification run",
     "certify on an idle GPU (nvidia-smi shows other processes?) or with fewer GPUs sharing it"),
    (r"CUDA driver version is insufficient|cudaErrorInsufficientDriver",
     "the NVIDIA driver is older than the CUDA runtime torch was built with",
     "upgrade the driver to the lock's min_driver, or lock for this host: envbuilder lock --driver VERSION"),
    (r"NCCL error|ncclSystemError|ncclUnhandledCudaError|ncclInternalError|ncclRemoteError",
     "an NCCL collective failed",
     "rerun with NCCL_DEBUG=INFO; in containers use --ipc=host (or a large --shm-size); check NCCL_P2P_DISABLE"),
    (r"version `GLIBCXX_[0-9.]+' not found",
     "a compiled extension needs a newer libstdc++ than the runtime image has",
     "use a newer base OS, or build the extension against the runtime image's compiler"),
    (r"Killed|signal 9|out of memory|Cannot allocate memory|cc1plus: fatal error",
     "the compiler ran out of memory (flash-attn and mamba-ssm need several GB per job)",
     "lower --jobs (MAX_JOBS) or give the build more memory"),
    (r"(not supported on this platform|no wheels? with a matching platform tag|"
     r"has no wheels? (with|for) a (matching|compatible) platform).*manylinux_2_\d+|"
     r"manylinux_2_\d+.*(not supported on this platform|no matching platform)",
     "a wheel needs a newer glibc than the target base image has",
     "pin the package below the release that raised its manylinux tag, or use a newer base OS"),
]


def troubleshoot(log: str) -> Advice | None:
    for pattern, cause, fix in _PATTERNS:
        if re.search(pattern, log):
            return Advice(cause, fix)
    return None
