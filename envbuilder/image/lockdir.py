"""The lock directory as the build sees it: the record plus the files the image needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.errors import LockDirError
from envbuilder.lock.record import read_record

REQUIRED = ("pyproject.toml", "uv.lock", "envbuilder.lock.json")


@dataclass(frozen=True)
class LockDir:
    path: Path
    record: dict[str, Any]

    @property
    def row(self) -> str:
        return str(self.record.get("row", "unknown"))

    @property
    def mode(self) -> str:
        return str(self.record.get("mode", "hermetic"))

    @property
    def lock_sha256(self) -> str:
        return str(self.record["lock_sha256"])

    @property
    def source_date_epoch(self) -> int:
        return int(self.record.get("source_date_epoch") or 0)

    @property
    def target(self) -> dict[str, Any]:
        return dict(self.record.get("target") or {})

    def files(self) -> list[Path]:
        """Files that go into the image's build context, relative to the lock dir, sorted."""
        rels = {Path(n) for n in REQUIRED}
        rels.update(Path(n) for n in self.record.get("files", {}))
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
    record = read_record(path, verify=True)
    for key in ("lock_sha256", "row", "mode"):
        if key not in record:
            raise LockDirError(f"{path}/envbuilder.lock.json has no '{key}'", "re-run envbuilder lock")
    return LockDir(path=path, record=record)
