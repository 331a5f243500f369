"""Lock inputs checked before anything slow runs (a full `uv lock` can take minutes)."""

from __future__ import annotations

import re
from pathlib import Path

from envbuilder.archlist import ArchList
from envbuilder.errors import InvalidOptionError, SecretSpecError, UnsupportedArchError
from envbuilder.jsonread import CA_BUNDLE_MAX_BYTES, read_bytes
from envbuilder.resolve.resolver import Resolution

_GLIBC_RE = re.compile(r"2\.(\d{1,2})")
# manylinux2014 (glibc 2.17) is the oldest platform tag uv and PyPI's GPU wheels still use
MIN_GLIBC_MINOR = 17


def check_glibc(glibc: str) -> None:
    m = _GLIBC_RE.fullmatch(glibc)
    if not m or int(m.group(1)) < MIN_GLIBC_MINOR:
        raise InvalidOptionError(
            f"--glibc {glibc!r} is not a glibc version envbuilder can target (2.{MIN_GLIBC_MINOR} or newer)",
            "pass the base OS's glibc: 2.35 (Ubuntu 22.04), 2.36 (Debian 12) or 2.39 (Ubuntu 24.04)")


def check_find_links(dirs: list[Path]) -> None:
    for d in dirs:
        if not Path(d).is_dir():
            raise InvalidOptionError(f"--find-links {d} is not a directory",
                                     "pass a directory that holds .whl files")


def check_ca_bundle(path: Path | None) -> None:
    if path is None:
        return
    try:
        head = read_bytes(path, what="CA bundle", max_bytes=CA_BUNDLE_MAX_BYTES)  # never /dev/zero whole
    except OSError as exc:
        raise SecretSpecError(f"--ca-bundle {path}: {exc.strerror}", "pass a readable PEM file") from exc
    if b"-----BEGIN CERTIFICATE-----" not in head:
        raise SecretSpecError(f"--ca-bundle {path}: no PEM certificate in it",
                              "pass a PEM bundle (-----BEGIN CERTIFICATE-----), e.g. the proxy's CA")


def check_target_arch(res: Resolution, arch_list: ArchList | None = None) -> None:
    """The row's CUDA must be able to compile for the target GPU and for every arch of --arch-list, or the
    stage-2 kernels cannot be built."""
    from envbuilder.matrix.archs import check_arch_list, cuda_lacks_sm

    if arch_list is not None:
        check_arch_list(arch_list, res.cuda)
    if not res.sm or not res.cuda or res.cuda in ("none", "unknown"):
        return

    why = cuda_lacks_sm(str(res.cuda), str(res.sm))
    if why is not None:
        raise UnsupportedArchError(f"{why}: the row {res.row} has no kernels for this GPU",
                                   "choose a --nemo row with a newer CUDA (envbuilder doctor --sm X.Y lists them)")
