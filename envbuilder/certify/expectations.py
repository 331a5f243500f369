"""Host side: turn a lock directory into the expectations JSON the environment checks against.

The environment only needs the standard library to read it: {name: version} of every
package uv installs on the target platform (evaluated from `uv export` markers), the
target's torch/CUDA/ABI/driver/arch facts, and GPU datasheet rates for the GEMM probe.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from envbuilder.canonical import sha256_file
from envbuilder.certify.certificate import Artifact
from envbuilder.certify.expect import DatasheetRate, Expectations, ExpectedTarget, normalize
from envbuilder.errors import LockDirError
from envbuilder.lock.lockdir import COPIED_OUT, LockDir, open_lockdir
from envbuilder.lock.record import RECORD_NAME, LockRecord
from envbuilder.matrix import load_matrix


def locked_packages(lockdir: Path, python: str, full_version: str | None = None) -> dict[str, str]:
    """{normalized name: version} of every package the lock installs on the target (lock.installset), the
    versions as uv.lock pins them; the lock's own project and editable sources are not installed packages.
    `full_version`: the certified interpreter's (3.11.7), for the markers on python_full_version."""
    from envbuilder.lock.installset import installed_packages
    from envbuilder.lock.uvlock import read_uv_lock

    pkgs = {normalize(p.name): p.version for p in read_uv_lock(lockdir / "uv.lock")
            if p.version and not ({"virtual", "editable"} & set(p.source))}
    names = {normalize(r.name) for r in installed_packages(lockdir, python, full_version=full_version)}
    return {n: v for n, v in pkgs.items() if n in names}


def datasheet(matrices: Path) -> tuple[DatasheetRate, ...]:
    """The dense bf16 rate of every GPU in the loaded matrix that has a datasheet figure."""
    out = []
    for g in load_matrix(matrices).gpus:
        tf = g.fact("bf16_dense_tflops")
        if tf is None or not tf.known or not isinstance(tf.value, (int, float)):
            continue
        out.append(DatasheetRate(tuple(sorted({g.name, *g.aliases})), float(tf.value)))
    return tuple(sorted(out, key=lambda e: e.names))


def torch_cxx11_abi(matrices: Path, torch_version: str | None) -> bool | None:
    """Whether the matrix's torch release (local tag ignored) is built with the C++11 ABI."""
    if not torch_version:
        return None
    info = load_matrix(matrices).torch.get(torch_version.split("+")[0])
    if info is None or not info.cxx11_abi.known:
        return None
    return info.cxx11_abi.value if isinstance(info.cxx11_abi.value, bool) else None


@dataclass(frozen=True)
class LockBinding:
    """What a certificate binds to: uv.lock's sha256, and the opened lock directory when it has a record."""

    path: Path
    lock_sha256: str
    lockdir: LockDir | None

    @property
    def record(self) -> LockRecord | None:
        return self.lockdir.record if self.lockdir else None


def read_lock(lockdir: Path, strict: bool = True) -> LockBinding:
    """The lock directory (opened and hash-verified once, through lock.lockdir), or only uv.lock's hash for a bare
    uv.lock directory.

    strict=False is for a lock copied out of an image: its local wheels/ stay behind, so only
    pyproject.toml and uv.lock are checked against the record.
    """
    lockdir = Path(lockdir)
    if not (lockdir / "uv.lock").exists():
        raise LockDirError(f"{lockdir} has no uv.lock", "pass the directory written by `envbuilder lock`")
    if (lockdir / RECORD_NAME).exists():
        opened = open_lockdir(lockdir, verify_only=None if strict else COPIED_OUT)
        return LockBinding(lockdir, opened.lock_sha256, opened)
    return LockBinding(lockdir, sha256_file(lockdir / "uv.lock"), None)


def framework_flags(packages: dict[str, str]) -> tuple[bool, bool]:
    """Which framework recipe smokes level 1 runs (nemo_locked, mbridge_locked): those whose distribution the
    lock installs."""
    return "nemo-toolkit" in packages, "megatron-bridge" in packages


def unimportable_modules(matrices: Path, packages: dict[str, str], python: str) -> tuple[str, ...]:
    """Modules of locked distributions that cannot import on this Python (matrices/unimportable.toml): the
    imports check lists them apart instead of failing on them."""
    return tuple(sorted(u.module for u in load_matrix(matrices).unimportable
                        if u.package in packages and u.applies(packages[u.package], python)))


def expectations_from_lock(lock: LockBinding, *, matrices: Path, artifact: Artifact,
                           python: str | None = None, python_full: str | None = None) -> Expectations:
    """What the environment is checked against, from a lock already opened and verified (read_lock).
    python_full: the certified interpreter's full version when known (a venv's, this host's)."""
    record = lock.record
    target = record.target if record else None
    py = python or (target.python if target else "") or f"{sys.version_info[0]}.{sys.version_info[1]}"
    same_minor = python_full is not None and python_full.split(".")[:2] == py.split(".")[:2]
    packages = locked_packages(lock.path, py, python_full if same_minor else None)
    torch_v = packages.get("torch") or (target.torch if target else None)
    nemo, mbridge = framework_flags(packages)
    # what the lock asked for (--arch-list, else the default for its CUDA and host); a lock without CUDA asks none
    arch = record.arch_list().torch if record and record.target.cuda not in (None, "none") else None
    return Expectations(
        lock_sha256=lock.lock_sha256,
        row=record.row if record else None,
        lock_name=record.name if record and record.name != record.row else None,
        packages=dict(sorted(packages.items())),
        target=ExpectedTarget(
            python=py, torch=torch_v, torch_variant=target.torch_variant if target else None,
            cuda=target.cuda if target else None, min_driver=target.min_driver if target else None,
            cxx11_abi=torch_cxx11_abi(matrices, torch_v), arch_list=arch),
        nemo_locked=nemo, mbridge_locked=mbridge,
        skip_imports=unimportable_modules(matrices, packages, py),
        datasheet=datasheet(matrices),
        artifact=artifact,
    )


def expectations_without_lock(*, matrices: Path, artifact: Artifact) -> Expectations:
    """No lock: drift and imports are skipped; the certificate binds to no lock (lock_sha256 null)."""
    return Expectations(datasheet=datasheet(matrices), artifact=artifact)
