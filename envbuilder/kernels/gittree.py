"""A git tree's object id, recomputed from files; and a source tree packed as one deterministic archive.

A stage-2 package built from its repository's tag is bound to the lock by that tag's tree id (the
sha1 object id git gives the directory of the commit). Whoever hands over the files (a mirror, a
bundle, a download of GitHub's tag archive), the build recomputes the id from the bytes it is about to
compile; a file changed, added or dropped, or an executable bit flipped, changes it.

Standard library only: this file also runs inside image builds (copied beside the in-image tools),
where no envbuilder is installed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REGULAR, EXECUTABLE, SYMLINK, DIRECTORY = "100644", "100755", "120000", "40000"
#: the mtime every member of a packed archive gets (1980-01-01, the earliest a zip can hold)
PACKED_MTIME = 315532800


@dataclass(frozen=True)
class SourceFile:
    """One file of a source tree: its path below the top directory, git mode and content
    (the link target for a symlink)."""

    path: str
    mode: str
    data: bytes


def _object_id(kind: str, body: bytes) -> bytes:
    return hashlib.sha1(f"{kind} {len(body)}\0".encode() + body, usedforsecurity=False).digest()


def tree_id(files: Iterable[SourceFile]) -> str:
    """The git tree id (40 hex) of these files, as `git rev-parse COMMIT^{tree}` prints it."""
    root: dict[str, object] = {}
    for f in files:
        parts = f.path.split("/")
        node = root
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"{f.path}: a file and a directory share the path {part}")
            node = child
        if parts[-1] in node:
            raise ValueError(f"{f.path} appears twice")
        node[parts[-1]] = (f.mode, _object_id("blob", f.data))
    return _tree(root).hex()


def _tree(node: dict[str, object]) -> bytes:
    entries: list[tuple[str, str, str, bytes]] = []
    for name, value in node.items():
        if isinstance(value, dict):
            entries.append((name + "/", DIRECTORY, name, _tree(value)))
        else:
            assert isinstance(value, tuple)
            entries.append((name, str(value[0]), name, bytes(value[1])))
    # git sorts a directory as if its name ended in "/" ("a.b" before "a/" before "a0")
    body = b"".join(f"{mode} {name}\0".encode() + oid for _, mode, name, oid in sorted(entries))
    return _object_id("tree", body)


def _strip_top(names: list[str]) -> str:
    """The single top-level directory every member sits in ('' when there is none)."""
    tops = {n.split("/", 1)[0] for n in names}
    if len(tops) == 1 and all("/" in n for n in names):
        return tops.pop() + "/"
    return ""


def files_of_archive(data: bytes) -> list[SourceFile]:
    """The files of a tar (gzip or not) of one source tree, without its top directory.

    A tar written by `git archive` (also GitHub's tag archives) or by `pack`: regular files (the
    owner's executable bit decides 100755) and symlinks; directories carry nothing git hashes."""
    out: list[tuple[str, SourceFile]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.issym()]
        top = _strip_top([m.name for m in members])
        for m in members:
            if not m.name.startswith(top):
                raise ValueError(f"{m.name} is outside the archive's top directory {top}")
            rel = m.name[len(top):]
            if not rel or rel.startswith("/") or ".." in rel.split("/"):
                raise ValueError(f"unsafe path in the archive: {m.name}")
            if m.issym():
                out.append((rel, SourceFile(rel, SYMLINK, m.linkname.encode())))
            else:
                fh = tar.extractfile(m)
                body = fh.read() if fh is not None else b""
                out.append((rel, SourceFile(rel, EXECUTABLE if m.mode & 0o100 else REGULAR, body)))
    return [f for _, f in sorted(out)]


def files_of_directory(root: Path) -> list[SourceFile]:
    """The files below `root` as git would stage them (a .git directory is skipped)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = [d for d in dirnames if d != ".git" and d not in links]
        for name in filenames + links:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if os.path.islink(full):
                out.append(SourceFile(rel, SYMLINK, os.readlink(full).encode()))
            else:
                mode = EXECUTABLE if os.stat(full).st_mode & 0o100 else REGULAR
                out.append(SourceFile(rel, mode, Path(full).read_bytes()))
    return sorted(out, key=lambda f: f.path)


def pack(files: Iterable[SourceFile], prefix: str) -> bytes:
    """A deterministic .tar.gz of the files under `prefix/`: sorted, root-owned, fixed times; the same
    files give the same bytes (with the same zlib)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for f in sorted(files, key=lambda f: f.path):
            parts = f.path.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    tar.addfile(_info(f"{prefix}/{d}", tarfile.DIRTYPE, 0o755))
            if f.mode == SYMLINK:
                info = _info(f"{prefix}/{f.path}", tarfile.SYMTYPE, 0o777)
                info.linkname = f.data.decode()
                tar.addfile(info)
            else:
                info = _info(f"{prefix}/{f.path}", tarfile.REGTYPE, 0o755 if f.mode == EXECUTABLE else 0o644)
                info.size = len(f.data)
                tar.addfile(info, io.BytesIO(f.data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def _info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, PACKED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def extract(files: Iterable[SourceFile], dest: Path) -> Path:
    """Write the files below `dest` (which must not exist yet); returns dest."""
    dest.mkdir(parents=True)
    for f in files:
        target = dest / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if f.mode == SYMLINK:
            os.symlink(f.data.decode(), target)
        else:
            target.write_bytes(f.data)
            os.chmod(target, 0o755 if f.mode == EXECUTABLE else 0o644)
    return dest


def github_archive_url(url: str, commit: str) -> str | None:
    """GitHub's archive of one commit for a https://github.com/OWNER/REPO(.git) URL; None for other hosts."""
    for head in ("https://github.com/", "http://github.com/"):
        if url.startswith(head):
            path = url[len(head):].rstrip("/").removesuffix(".git")
            if path.count("/") == 1:
                return f"https://github.com/{path}/archive/{commit}.tar.gz"
    return None


def cuda_sources(files: Iterable[SourceFile]) -> Iterator[str]:
    """The .cu/.cuh files among them (what makes a kernel package's build compile device code)."""
    return (f.path for f in files if f.path.lower().endswith((".cu", ".cuh")))
