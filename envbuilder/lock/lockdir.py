"""The lock directory: the one door every stage opens it through, verified once.

`open_lockdir` checks that the directory holds what `envbuilder lock` writes and recomputes every hash
the record lists (and that lock_sha256 is uv.lock's); the `LockDir` it returns carries the typed record,
the files an image needs, and what the lock installs on its target (`installed_packages`). build,
wheels, bundle, export, audit and certify open a lock here; a stage never re-verifies one it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envbuilder.choices import LockMode
from envbuilder.errors import LockDirError
from envbuilder.lock.installset import Requirement, installed_packages
from envbuilder.lock.record import RECORD_NAME, LockRecord, LockTarget

REQUIRED = ("pyproject.toml", "uv.lock", RECORD_NAME)
#: what a lock copied out of an image still has (its local wheels/ stay behind): verify only these
COPIED_OUT = ("pyproject.toml", "uv.lock")


@dataclass(frozen=True)
class LockDir:
    path: Path
    record: LockRecord

    @property
    def row(self) -> str:
        return self.record.row

    @property
    def mode(self) -> LockMode:
        return self.record.mode

    @property
    def lock_sha256(self) -> str:
        return self.record.lock_sha256

    @property
    def source_date_epoch(self) -> int:
        return self.record.source_date_epoch

    @property
    def target(self) -> LockTarget:
        return self.record.target

    def files(self) -> list[Path]:
        """Files that go into the image's build context, relative to the lock dir, sorted."""
        rels = {Path(n) for n in REQUIRED}
        rels.update(Path(n) for n in self.record.files)
        wheels = self.path / "wheels"
        if wheels.is_dir():
            rels.update(p.relative_to(self.path) for p in wheels.rglob("*") if p.is_file())
        return sorted(rels)

    def installed_packages(self, python: str | None = None) -> list[Requirement]:
        """What the lock installs on its target (or on CPython `python`): stage 1 and stage 2."""
        return installed_packages(self.path, python or self.target.python, stage2=bool(self.record.stage2_packages))


def open_lockdir(path: Path, verify_only: tuple[str, ...] | None = None) -> LockDir:
    """The lock directory at `path`, every hash its record lists recomputed (or only `verify_only`'s, for a lock
    copied out of an image: COPIED_OUT). LockDirError names what is missing or changed."""
    path = Path(path)
    if not path.is_dir():
        raise LockDirError(f"{path} is not a directory", "pass a lock directory made by: envbuilder lock -o DIR")
    for name in REQUIRED:
        if not (path / name).is_file():
            raise LockDirError(f"{path} has no {name}", f"re-create it with: envbuilder lock --nemo TAG -o {path}")
    return LockDir(path=path, record=LockRecord.from_lockdir(path, verify=True, verify_only=verify_only))
