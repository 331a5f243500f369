"""The bundle manifest (`envbuilder-bundle.json`) and its checksum file, read and checked once.

Everything `install` takes from a bundle comes through `read_manifest`:
- the manifest's bytes are bound by a checked hash: the `SHA256SUMS` line for the manifest (both
  layouts) and, for a split bundle, the parts index's `manifest_sha256` (checked by the caller);
- every field has its type, every name joined to a path is a plain name (safetext), every file key a
  relative path of plain names;
- `bind_to_lock` recomputes the lock the bundle carries (its record checks every file hash) and
  refuses a manifest that claims another lock, row, Python or stage-2 set.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder.errors import BundleInvalidError, BundlePartMissingError, HashMismatchError
from envbuilder.jsonread import Fields, loads_json, read_bytes
from envbuilder.lock.record import LockRecord
from envbuilder.safetext import plain_relpath_problem, printable

MANIFEST = "envbuilder-bundle.json"
SUMS = "SHA256SUMS"
SCHEMA = 1
KINDS = ("wheel", "sdist", "git")  # git: a git-tag source packed as an archive
_FIX = "copy the bundle again, or re-make it with `envbuilder bundle`"
_VERSION = re.compile(r"\d+\.\d+(\.\d+)?")
#: a package name as uv.lock writes it (PEP 508 names)
_PACKAGE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class BundlePackage:
    name: str
    version: str
    kind: str   # "wheel" | "sdist" | "git"
    file: str   # a plain name under files/


@dataclass(frozen=True)
class PrebuiltWheel:
    package: str
    wheel: str   # a plain name under files/
    sha256: str


@dataclass(frozen=True)
class BundleManifest:
    """What `install` relies on, typed. `data` keeps the whole checked document."""

    sha256: str
    lock_sha256: str
    row: str | None
    mode: str | None
    python: str
    glibc: str | None
    stage2_packages: list[str]
    host_torch: dict[str, Any] | None
    packages: list[BundlePackage]
    prebuilt: list[PrebuiltWheel]
    files: dict[str, tuple[str, int]]   # relative path -> (sha256, size)
    data: dict[str, Any]
    # stage-1 sdists that travel unbuilt ("NAME==VERSION" -> why no wheel was made): offline they are built
    # on the target, which needs their build requirements and a compiler
    source_only: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> BundleManifest:
        doc = Fields.of(loads_json(raw, what=where, error=BundleInvalidError, fix=_FIX), where, BundleInvalidError,
                        _FIX)
        schema = doc.integer("schema")
        if schema != SCHEMA:
            doc.fail("schema", f"is {schema}; this envbuilder reads bundles of schema {SCHEMA}")
        python = doc.string("python", max_len=20)
        if not _VERSION.fullmatch(python):
            doc.fail("python", f"{printable(python)!r} is not a Python version like 3.12")
        files: dict[str, tuple[str, int]] = {}
        table = doc.obj("files")
        for rel in table:
            entry = table.obj(rel)
            if rel in (MANIFEST, SUMS):
                doc.fail("files", f"lists {rel}, which covers the list itself")
            problem = plain_relpath_problem(rel)
            if problem:
                doc.fail("files", f"names {printable(rel)!r}, which {problem}")
            files[rel] = (entry.sha256("sha256"), entry.integer("size", min=0))
        packages = []
        for p in doc.objs("packages"):
            packages.append(BundlePackage(_package(p, "name"), p.string("version", max_len=200),
                                          p.string("kind", choices=KINDS), p.string("file", plain=True)))
        prebuilt = [PrebuiltWheel(_package(p, "package"), p.string("wheel", plain=True), p.sha256("sha256"))
                    for p in doc.objs("prebuilt", default=[])]
        stage2 = doc.strings("stage2_packages", default=[])
        for i, name in enumerate(stage2):
            if not _PACKAGE.fullmatch(name):
                doc.fail(f"stage2_packages[{i}]", f"{printable(name)!r} is not a package name")
        host = doc.obj("host_torch", default=None)
        doc.obj("wheelhouse", default=None)
        source_only = doc.obj("source_only", default=None)
        reasons = {} if source_only is None else {k: source_only.string(k, max_len=1000) for k in source_only.data}
        return cls(sha256=hashlib.sha256(raw).hexdigest(), lock_sha256=doc.sha256("lock_sha256"),
                   row=doc.string("row", default=None, plain=True), mode=doc.string("mode", default=None, max_len=40),
                   python=python, glibc=doc.string("glibc", default=None, max_len=20), stage2_packages=stage2,
                   host_torch=None if host is None else dict(host.data), packages=packages, prebuilt=prebuilt,
                   files=files, data=doc.data, source_only=reasons)

    def check_references(self, where: str) -> None:
        """Every file a package or prebuilt wheel names is one the manifest lists (and so hash-checks)."""
        for p in self.packages:
            if f"files/{p.file}" not in self.files:
                raise BundleInvalidError(f"{where}: package {p.name} names files/{p.file}, which it does not list",
                                         _FIX)
        for pb in self.prebuilt:
            listed = self.files.get(f"files/{pb.wheel}")
            if listed is None or listed[0] != pb.sha256:
                raise BundleInvalidError(f"{where}: the prebuilt wheel {pb.wheel} is not listed with its sha256",
                                         _FIX)

    def bind_to_lock(self, record: LockRecord, where: str) -> None:
        """Refuse a manifest that claims anything other than what its lock directory says."""
        claims = {
            "lock_sha256": (self.lock_sha256, record.lock_sha256),
            "row": (self.row, record.row),
            "python": (self.python, str(record.target.python)),
            "mode": (self.mode, record.mode),
            "glibc": (self.glibc, str(record.target.glibc or "2.35")),
            "stage2_packages": (sorted(self.stage2_packages), sorted(record.stage2_packages)),
            "host_torch": (self.host_torch, record.host.torch.to_dict() if record.host.torch else None),
        }
        for name, (claimed, real) in claims.items():
            if claimed == real:
                continue
            if name == "lock_sha256":
                cause = f"{where} names lock {str(claimed)[:12]}, but the lock it carries is {str(real)[:12]}"
            else:
                cause = (f"{where} names {name} {printable(repr(claimed))}, but the lock it carries says "
                         f"{printable(repr(real))}")
            raise BundleInvalidError(cause, "the manifest was edited or belongs to another bundle: re-make it with "
                                            "`envbuilder bundle`")


def _package(f: Fields, key: str) -> str:
    name = f.string(key, max_len=200)
    if not _PACKAGE.fullmatch(name):
        f.fail(key, f"{printable(name)!r} is not a package name")
    return str(name)


def read_manifest(tree: Path, max_bytes: int = 64 << 20) -> BundleManifest:
    """The manifest of the bundle directory `tree`, its bytes checked against SHA256SUMS."""
    path = tree / MANIFEST
    if not path.exists() and not path.is_symlink():
        raise BundleInvalidError(f"{tree} is not an envbuilder bundle (no {MANIFEST} or envbuilder-bundle.parts.json)",
                                 "pass the directory `envbuilder bundle -o` wrote")
    raw = read_bytes(path, what="bundle manifest", max_bytes=max_bytes)
    manifest = BundleManifest.from_bytes(raw, f"bundle manifest {printable(path)}")
    check_sums(tree, manifest)
    return manifest


def sums_text(manifest_bytes: bytes, files: dict[str, dict[str, Any]]) -> str:
    """SHA256SUMS: every file's hash, and the manifest's own (`sha256sum -c` checks all of them)."""
    lines = [f"{e['sha256']}  {rel}\n" for rel, e in sorted(files.items())]
    return "".join(lines) + f"{hashlib.sha256(manifest_bytes).hexdigest()}  {MANIFEST}\n"


def check_sums(tree: Path, manifest: BundleManifest) -> None:
    """SHA256SUMS names the manifest's sha256 and agrees with every hash the manifest lists."""
    path = tree / SUMS
    if not path.is_file():
        raise BundlePartMissingError(f"{path} is missing (it holds the manifest's sha256)",
                                     "copy the whole bundle directory again, or re-make it with this envbuilder")
    text = read_bytes(path, what="checksum file", max_bytes=64 << 20).decode("utf-8", "replace")
    listed: dict[str, str] = {}
    for line in text.splitlines():
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            raise BundleInvalidError(f"{path}: {printable(line[:80])!r} is not a `sha256sum` line", _FIX)
        listed[rel] = digest
    if listed.get(MANIFEST) != manifest.sha256:
        raise HashMismatchError(f"{tree / MANIFEST} has sha256 {manifest.sha256[:12]}…, SHA256SUMS lists "
                                f"{str(listed.get(MANIFEST, 'none'))[:12]}: the manifest was changed",
                                "copy the bundle again from the machine that made it")
    want = {rel: sha for rel, (sha, _size) in manifest.files.items()}
    if {k: v for k, v in listed.items() if k != MANIFEST} != want:
        raise HashMismatchError(f"{path} and {MANIFEST} list different files or hashes",
                                "copy the bundle again from the machine that made it")
