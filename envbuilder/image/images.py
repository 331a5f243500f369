"""Base images: which builder/runtime image a lock builds on (matrices/images.toml, or --base)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.errors import InvalidOptionError, MatrixFileError
from envbuilder.paths import matrices_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

UNKNOWN = "unknown"
TEST_BASE_DEFAULT = "envbuilder/test-base:bookworm"


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


def _load(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MatrixFileError(f"{path}: {exc}", "fix the file or restore it from git") from exc


def _pinned(entry: dict[str, Any]) -> tuple[str, bool]:
    ref, digest = str(entry["value"]), str(entry.get("digest", UNKNOWN))
    if digest.startswith("sha256:"):
        return f"{ref}@{digest}", True
    return ref, False


def test_base_tag() -> str:
    data = _load(matrices_dir() / "images.toml")
    return str(data.get("test_base", {}).get("value", TEST_BASE_DEFAULT))


def choose_bases(target: dict[str, Any], mode: str, base: str | None,
                 images_file: Path | None = None) -> BaseChoice:
    """Pick the bases for a lock's target. `--base` overrides both builder and runtime."""
    if base:
        # digest pinned when the user gave one; python from the base if it has the right one
        # (decided later by probing the image: see pipeline.detect_python_from)
        return BaseChoice(base, base, "@sha256:" in base, "probe", "--base")
    if mode == "ngc-base":
        container = str(target.get("container") or "")
        if "/pytorch:" not in container:
            raise InvalidOptionError(
                f"the lock's target container is {container or 'none'}, not an NGC PyTorch image",
                "pass --base nvcr.io/nvidia/pytorch:YY.MM-py3 (the container the lock was made for)")
        return BaseChoice(container, container, "@sha256:" in container, "system", "lock target.container")
    data = _load(images_file or matrices_dir() / "images.toml")
    cuda = str(target.get("cuda") or "none")
    if cuda in ("none", "", UNKNOWN):
        tb = data.get("test_base", {})
        ref = str(tb.get("value", TEST_BASE_DEFAULT))
        return BaseChoice(ref, ref, False, "system", "images.toml [test_base] (the lock targets no CUDA)")
    for entry in data.get("cuda", []):
        if str(entry.get("cuda")) == cuda:
            builder, b_pinned = _pinned(entry["builder"])
            runtime, r_pinned = _pinned(entry["runtime"])
            py = "system" if str(entry.get("python", "none")) == str(target.get("python")) else "uv"
            return BaseChoice(builder, runtime, b_pinned and r_pinned, py, f"images.toml cuda={cuda}")
    known = ", ".join(str(e.get("cuda")) for e in data.get("cuda", []))
    raise InvalidOptionError(f"no base image for CUDA {cuda} in matrices/images.toml (known: {known})",
                             "pass --base IMAGE, or add the CUDA version to matrices/images.toml")


def default_bases(images_file: Path | None = None) -> tuple[str, str]:
    """The default CUDA's builder/runtime tags (the top-level Dockerfile's ARG defaults)."""
    data = _load(images_file or matrices_dir() / "images.toml")
    cuda = str(data.get("default_cuda"))
    for entry in data.get("cuda", []):
        if str(entry.get("cuda")) == cuda:
            return _pinned(entry["builder"])[0], _pinned(entry["runtime"])[0]
    raise MatrixFileError(f"images.toml: default_cuda {cuda} has no [[cuda]] entry", "fix matrices/images.toml")
