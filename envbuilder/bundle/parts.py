"""A bundle as one deterministic tar stream cut into parts, and back.

Parts exist for transfer limits (64 MiB per call to the GPU machines). The tar is written in path
order with fixed owners, modes and times, so the same bundle gives the same parts. The index
(`envbuilder-bundle.parts.json`) lists every part's size and sha256; reading back checks all of them
before a single byte is extracted, so a missing or damaged part is reported by name and nothing is
unpacked.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from envbuilder.atomic import write_atomic
from envbuilder.errors import BundleInvalidError, BundlePartMissingError, HashMismatchError, InvalidOptionError
from envbuilder.jsonread import read_object
from envbuilder.lock.record import sha256_file
from envbuilder.safetext import plain_relpath_problem, printable

PARTS_INDEX = "envbuilder-bundle.parts.json"
PART_PREFIX = "bundle.tar."
SCHEMA = 1


def parse_size(text: str) -> int:
    """'60M' / '64MiB' / '1G' / '1000000' -> bytes (K, M, G are powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)(i?b)?\s*", text.lower())
    if not m:
        raise InvalidOptionError(f"--split {text!r} is not a size", "pass e.g. 60M or 1G")
    size = int(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " ")
    if size < 1024 * 1024:
        raise InvalidOptionError(f"--split {text}: parts under 1 MiB are not useful", "pass e.g. 60M")
    return size


class _PartWriter(io.RawIOBase):
    """A write-only stream that cuts what it receives into files of `size` bytes."""

    def __init__(self, directory: Path, size: int) -> None:
        self.directory, self.size = directory, size
        self.parts: list[dict[str, Any]] = []
        self._fh: BinaryIO | None = None
        self._hash = hashlib.sha256()
        self._written = 0
        self.total = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def _open_next(self) -> None:
        self._close_current()
        name = f"{PART_PREFIX}{len(self.parts):03d}"
        self._fh = open(self.directory / name, "wb")  # noqa: SIM115 (closed in _close_current)
        self._hash = hashlib.sha256()
        self._written = 0
        self.parts.append({"name": name})

    def _close_current(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self.parts[-1].update(size=self._written, sha256=self._hash.hexdigest())
            self._fh = None

    def write(self, b: Any) -> int:
        data = memoryview(b).cast("B")
        n = len(data)
        self.total.update(data)
        while len(data):
            if self._fh is None or self._written >= self.size:
                self._open_next()
            assert self._fh is not None
            take = min(len(data), self.size - self._written)
            self._fh.write(data[:take])
            self._hash.update(data[:take])
            self._written += take
            data = data[take:]
        return n

    def close(self) -> None:
        self._close_current()
        super().close()


def _tarinfo(path: Path, arcname: str, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.size = path.stat().st_size
    info.mtime = mtime
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_parts(src: Path, out: Path, size: int, meta: dict[str, Any], mtime: int = 0) -> dict[str, Any]:
    """Tar every file under src (path order) into parts of `size` bytes in out; writes and returns the index."""
    writer = _PartWriter(out, size)
    files = sorted(p for p in src.rglob("*") if p.is_file())
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for f in files:
            arcname = f.relative_to(src).as_posix()
            with open(f, "rb") as fh:
                tar.addfile(_tarinfo(f, arcname, mtime), fh)
    writer.close()
    index = {"schema": SCHEMA, **meta, "part_size": size, "tar_sha256": writer.total.hexdigest(),
             "tar_size": sum(p["size"] for p in writer.parts), "parts": writer.parts}
    write_atomic(out / PARTS_INDEX, json.dumps(index, indent=2, sort_keys=True) + "\n")
    return index


PART_NAME = re.compile(re.escape(PART_PREFIX) + r"\d{3,6}")
_INDEX_FIX = "copy the bundle's index file again, or re-make the bundle with `envbuilder bundle --split`"


@dataclass(frozen=True)
class PartsIndex:
    """envbuilder-bundle.parts.json, checked: every part a `bundle.tar.NNN` name with its size and sha256."""

    lock_sha256: str
    manifest_sha256: str
    tar_sha256: str
    parts: list[dict[str, Any]]  # {"name", "size", "sha256"}


def read_index(bundle: Path) -> PartsIndex:
    path = bundle / PARTS_INDEX
    doc = read_object(path, what="bundle parts index", error=BundleInvalidError, fix=_INDEX_FIX)
    schema = doc.integer("schema")
    if schema != SCHEMA:
        doc.fail("schema", f"is {schema}, not {SCHEMA}: make the bundle with this envbuilder version")
    parts = []
    for part in doc.objs("parts"):
        name = part.string("name", max_len=64)
        if not PART_NAME.fullmatch(name):
            part.fail("name", f"{printable(name)!r} is not a bundle part name (bundle.tar.NNN)")
        parts.append({"name": name, "size": part.integer("size", min=0), "sha256": part.sha256("sha256")})
    if not parts:
        doc.fail("parts", "is empty")
    if len({p["name"] for p in parts}) != len(parts):
        doc.fail("parts", "names one part twice")
    return PartsIndex(doc.sha256("lock_sha256"), doc.sha256("manifest_sha256"), doc.sha256("tar_sha256"), parts)


def verify_parts(bundle: Path, index: PartsIndex) -> list[Path]:
    """Every part present with its recorded size and sha256, or one error naming all that are not."""
    missing = [p["name"] for p in index.parts if not (bundle / p["name"]).is_file()]
    if missing:
        raise BundlePartMissingError(
            f"{len(missing)} of {len(index.parts)} bundle parts missing in {bundle}: {', '.join(missing)}",
            "copy every bundle.tar.NNN part named in envbuilder-bundle.parts.json into the bundle directory",
            missing=missing)
    bad = []
    for p in index.parts:
        f = bundle / p["name"]
        if f.stat().st_size != p["size"] or sha256_file(f) != p["sha256"]:
            bad.append(p["name"])
    if bad:
        raise HashMismatchError(f"bundle part(s) damaged (size or sha256 differs from the index): {', '.join(bad)}",
                                "copy these parts again from the machine that made the bundle", damaged=bad)
    return [bundle / p["name"] for p in index.parts]


class _Concat(io.RawIOBase):
    """The parts read one after another as one stream, hashed on the way (the index's tar_sha256)."""

    def __init__(self, paths: list[Path]) -> None:
        self._paths: Iterator[Path] = iter(paths)
        self._fh: io.BufferedReader | None = None
        self.sha256 = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while True:
            if self._fh is None:
                nxt = next(self._paths, None)
                if nxt is None:
                    return 0
                self._fh = open(nxt, "rb")  # noqa: SIM115 (closed when exhausted)
            n = self._fh.readinto(b)
            if n:
                self.sha256.update(memoryview(b)[:n])
                return n
            self._fh.close()
            self._fh = None


def extract_parts(parts: list[Path], dest: Path, tar_sha256: str | None = None) -> None:
    """Stream the concatenated parts through tar into dest: only regular files, each a relative path of
    plain names, each once; then the whole stream's sha256 must be the index's tar_sha256."""
    bad = "make the bundle with envbuilder bundle"
    stream = _Concat(parts)
    seen: set[str] = set()
    try:
        with tarfile.open(fileobj=io.BufferedReader(stream, 1 << 20), mode="r|") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if not member.isfile() or plain_relpath_problem(name) is not None:
                    raise BundleInvalidError(f"bundle member {printable(member.name)!r} is not a plain relative file",
                                             bad)
                if name in seen:
                    raise BundleInvalidError(f"bundle member {printable(name)!r} is in the parts twice", bad)
                seen.add(name)
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                assert src is not None
                with open(target, "xb") as fh:
                    while chunk := src.read(1 << 20):
                        fh.write(chunk)
            while stream.readinto(bytearray(1 << 16)):  # the tar's zero blocks after the last member
                pass
    except (tarfile.TarError, EOFError) as exc:
        raise BundleInvalidError(f"the bundle parts are not a tar archive ({exc})", bad) from None
    if tar_sha256 is not None and stream.sha256.hexdigest() != tar_sha256:
        raise HashMismatchError(f"the reassembled bundle has sha256 {stream.sha256.hexdigest()[:12]}…, the parts "
                                f"index's tar_sha256 is {tar_sha256[:12]}…", "copy every part and the index again")
