"""The lock directory as the build sees it: the typed record plus the files the image needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envbuilder.errors import LockDirError
from envbuilder.lock.record import RECORD_NAME, LockRecord, LockTarget

REQUIRED = ("pyproject.toml", "uv.lock", RECORD_NAME)


@dataclass(frozen=True)
class LockDir:
    path: Path
    record: LockRecord

    @property
    def row(self) -> str:
        return self.record.row

    @property
    def mode(self) -> str:
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


def load_lockdir(path: Path) -> LockDir:
    path = Path(path)
    if not path.is_dir():
        raise LockDirError(f"{path} is not a directory", "pass a lock directory made by: envbuilder lock -o DIR")
    for name in REQUIRED:
        if not (path / name).is_file():
            raise LockDirError(f"{path} has no {name}", f"re-create it with: envbuilder lock --nemo TAG -o {path}")
    return LockDir(path=path, record=LockRecord.from_lockdir(path, verify=True))
