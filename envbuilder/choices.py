"""Every closed set of option values, spelled once.

The click choices (envbuilder/cli/options.py) and the validators in the stages read these
tuples, so a value cannot be accepted on the command line and refused by the code, or the
other way round. Base layer: imported by every stage, imports nothing of envbuilder.
"""

from __future__ import annotations

from enum import Enum


class LockMode(str, Enum):
    """How the environment is assembled, with what that means for each stage (a property per question, so no
    stage compares the spelling). The value is the spelling in the CLI, the lock record and the image label."""

    HERMETIC = "hermetic"       # everything from the lock (torch included) on a CUDA base image
    NGC_BASE = "ngc-base"       # on top of the row's NGC PyTorch container, keeping its torch and CUDA
    HOST_TORCH = "host-torch"   # on top of an existing interpreter that has torch (lock --interpreter); no image

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def parse(cls, value: str) -> LockMode:
        """The mode spelled `value`; ValueError naming the spellings when it is none."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a mode ({', '.join(m.value for m in cls)})") from None

    @property
    def torch_from_lock(self) -> bool:
        """The lock installs torch (from PyPI or the PyTorch index); the other modes keep the base's."""
        return self is LockMode.HERMETIC

    @property
    def on_container(self) -> bool:
        """Stage 1 and 2 run on the row's NGC container: its CUDA, its torch, its stack's driver floor."""
        return self is LockMode.NGC_BASE

    @property
    def on_interpreter(self) -> bool:
        """Installed into a venv over an interpreter that has torch (`install --system-site-packages`)."""
        return self is LockMode.HOST_TORCH

    @property
    def builds_image(self) -> bool:
        return self is not LockMode.HOST_TORCH


#: lock/build: how the environment is assembled (the modes an image is built in)
MODES = tuple(m.value for m in LockMode if m.builds_image)
DEFAULT_MODE = LockMode.HERMETIC.value
#: lock also: host-torch, installed with `envbuilder install --system-site-packages`; no image is built from it
LOCK_MODES = tuple(m.value for m in LockMode)

#: lock: the options that name a matrix row (--nemo TAG, --release 26.04, --mbridge VERSION); the lock record's
#: inputs keep the row under the one that was used
ROW_OPTIONS = ("nemo", "release", "mbridge")

#: lock: where NeMo, NeMo-Run, Megatron-LM, mamba and causal-conv1d come from
SOURCES = ("pypi", "git")
DEFAULT_SOURCE = "pypi"

#: lock: which index torch comes from
TORCH_INDEXES = ("pypi", "pytorch")
DEFAULT_TORCH_INDEX = "pypi"

#: build: the Dockerfile stage to stop at
BUILD_TARGETS = ("stage1", "builder", "runtime")
DEFAULT_BUILD_TARGET = "runtime"

#: export: artifact formats
EXPORT_FORMATS = ("sqsh", "sif")
#: file suffixes that name a format when --format is not given
FORMAT_SUFFIXES = {"sqsh": "sqsh", "squashfs": "sqsh", "sif": "sif"}

#: certify: the kinds of environment a certificate can be made in
CERTIFY_TARGETS = ("image", "sqsh", "sif", "venv", "in-place")
#: certify kinds that run on this host's filesystem (no container)
HOST_TARGETS = ("venv", "in-place")
#: certify --only: the check groups, in the order they run
CERTIFY_GROUPS = ("drift", "imports", "torch-build", "driver", "arch", "kernels", "gemm", "pretrain", "mcore", "nemo",
                  "mbridge", "nccl", "parallel")
#: certify levels: 0 no GPU, 1 one GPU, 2 several
CERTIFY_LEVELS = (0, 1, 2)
DEFAULT_CERTIFY_LEVEL = 1

#: check-parallel: gradient buffer dtype
GRAD_DTYPES = ("fp32", "bf16")

#: --color
COLORS = ("auto", "always", "never")

# export --compression (mksquashfs options per name: export.squashfs.COMPRESSIONS)
EXPORT_COMPRESSIONS = ("zstd", "lz4", "lzo", "gzip", "none")
# export --layers: the engine's overlay2 directories, `docker save`, or storage when readable
EXPORT_LAYER_SOURCES = ("auto", "storage", "save")
# how mksquashfs gets the merged tree: a read-only overlay mount of the layers, or a tar on stdin
EXPORT_FEEDS = ("auto", "mount", "tar")

#: --cache / --publish: the shared kernel-wheel cache's URL schemes (file: a directory or shared filesystem;
#: oci / oci+http: a registry over TLS / plain HTTP; http / https: a read-only PEP 503 index)
WHEEL_CACHE_SCHEMES = ("file", "oci", "oci+http", "http", "https")
