"""Base images: which builder/runtime image a lock builds on (matrices/images.toml, or --base)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envbuilder.choices import LockMode
from envbuilder.errors import InvalidOptionError, MatrixFileError
from envbuilder.lock.record import LockTarget
from envbuilder.matrix.images import UNKNOWN, load_images


@dataclass(frozen=True)
class BaseChoice:
    builder: str        # image reference used in FROM (tag@digest when the digest is known)
    runtime: str
    digest_pinned: bool
    python_from: str    # "system": the base's python; "uv": `uv python install`
    source: str         # where the choice came from, for the build report

    def warning(self) -> str | None:
        if self.digest_pinned:
            return None
        return (f"base {self.builder} is pinned by tag only (no verified digest in matrices/images.toml); "
                "the image is reproducible only while that tag does not move")


def test_base_tag() -> str:
    return load_images().test_base


def choose_bases(target: LockTarget, mode: LockMode, base: str | None,
                 images_file: Path | None = None) -> BaseChoice:
    """Pick the bases for a lock's target. `--base` overrides both builder and runtime."""
    if base:
        # digest pinned when the user gave one; python from the base if it has the right one
        # (decided later by probing the image: see pipeline.detect_python_from)
        return BaseChoice(base, base, "@sha256:" in base, "probe", "--base")
    if mode.on_container:
        container = target.container or ""
        if "/pytorch:" not in container:
            raise InvalidOptionError(
                f"the lock's target container is {container or 'none'}, not an NGC PyTorch image",
                "pass --base nvcr.io/nvidia/pytorch:YY.MM-py3 (the container the lock was made for)")
        return BaseChoice(container, container, "@sha256:" in container, "system", "lock target.container")
    table = load_images(images_file)
    cuda = target.cuda or "none"
    if cuda in ("none", "", UNKNOWN):
        ref = table.test_base
        return BaseChoice(ref, ref, False, "system", "images.toml [test_base] (the lock targets no CUDA)")
    entry = table.for_cuda(cuda)
    if entry is not None:
        py = "system" if entry.python == target.python else "uv"
        return BaseChoice(entry.builder.pinned, entry.runtime.pinned,
                          entry.builder.digest_known and entry.runtime.digest_known, py, f"images.toml cuda={cuda}")
    known = ", ".join(e.cuda for e in table.cuda)
    raise InvalidOptionError(f"no base image for CUDA {cuda} in matrices/images.toml (known: {known})",
                             "pass --base IMAGE, or add the CUDA version to matrices/images.toml")


def default_bases(images_file: Path | None = None) -> tuple[str, str]:
    """The default CUDA's builder/runtime tags (the top-level Dockerfile's ARG defaults)."""
    table = load_images(images_file)
    entry = table.for_cuda(table.default_cuda)
    if entry is None:
        raise MatrixFileError(f"images.toml: default_cuda {table.default_cuda!r} has no [[cuda]] entry",
                              "fix matrices/images.toml")
    return entry.builder.pinned, entry.runtime.pinned
