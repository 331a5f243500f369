"""Flatten an image's layer tars into one root filesystem tar, whiteouts applied.

Docker layers are tar diffs: a later layer adds or replaces paths, deletes a path
with an AUFS/OCI whiteout `DIR/.wh.NAME`, and hides everything a lower layer put
in DIR with the opaque marker `DIR/.wh..wh..opq`. We apply them ourselves (rather
than `docker export` of a container) so the result is exactly the image: no
/etc/hosts or /.dockerenv added by a container runtime.

The merged view is an index (path -> the layer member that wins); `write_merged_tar`
streams it as one tar with deterministic headers: sorted paths, fixed mtime, the
image's numeric uid/gid (never the host's), no user/group names, no xattrs. The tar is GNU
format: Debian 12's mksquashfs 4.5.1 (`-tar`) strips the leading `/` and `../` from PAX link
targets (every target over 100 bytes or non-ASCII), while GNU long-link records reach it intact.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Final, Protocol

WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
COPY_CHUNK = 1 << 20
SENDFILE_MIN = 1 << 18
# GNU, not PAX: Debian 12's mksquashfs 4.5.1 (-tar) strips the leading '/' from PAX link targets
TAR_FORMAT: Final = tarfile.GNU_FORMAT


def normalize(name: str) -> str:
    """Tar member name -> canonical relative path ('' is the root)."""
    path = posixpath.normpath("/" + name).lstrip("/")
    return "" if path == "." else path


def sort_key(path: str) -> tuple[str, ...]:
    """Parents before children, siblings in byte order: a stable, host-independent order."""
    return tuple(path.split("/"))


@dataclass
class Entry:
    """One path of the merged root filesystem."""

    path: str
    info: tarfile.TarInfo
    layer: int  # index of the layer that provided it; -1 for synthetic entries
    data: bytes | None = None  # contents of a synthetic regular file


@dataclass
class MergedTree:
    """The union of the layers: path -> Entry, with a children index for subtree deletes."""

    entries: dict[str, Entry] = field(default_factory=dict)
    children: dict[str, set[str]] = field(default_factory=dict)
    whiteouts_applied: int = 0
    opaque_dirs_applied: int = 0

    def _link_parent(self, path: str) -> None:
        parent = posixpath.dirname(path)
        self.children.setdefault(parent, set()).add(path)

    def remove(self, path: str) -> None:
        """Remove `path` and everything below it."""
        stack = [path]
        while stack:
            p = stack.pop()
            self.entries.pop(p, None)
            stack.extend(self.children.pop(p, ()))
        parent = posixpath.dirname(path)
        if parent in self.children:
            self.children[parent].discard(path)

    def clear_children(self, directory: str) -> None:
        for child in list(self.children.get(directory, ())):
            self.remove(child)

    def put(self, entry: Entry) -> None:
        old = self.entries.get(entry.path)
        if old is not None and not (old.info.isdir() and entry.info.isdir()):
            self.remove(entry.path)  # a file replacing a dir drops the dir's contents
        self.entries[entry.path] = entry
        if entry.path:
            self._link_parent(entry.path)

    def get(self, path: str) -> Entry | None:
        return self.entries.get(path)


def apply_layer(tree: MergedTree, layer_index: int, members: Iterable[tarfile.TarInfo]) -> None:
    """Apply one layer: first its whiteouts (they only ever hide lower layers), then its entries."""
    members = list(members)
    for m in members:
        path = normalize(m.name)
        base = posixpath.basename(path)
        if not base.startswith(WHITEOUT_PREFIX):
            continue
        parent = posixpath.dirname(path)
        if base == OPAQUE_MARKER:
            tree.clear_children(parent)
            tree.opaque_dirs_applied += 1
        elif base.startswith(WHITEOUT_PREFIX + WHITEOUT_PREFIX):
            continue  # other AUFS metadata (.wh..wh.plnk, .wh..wh.aufs): not content
        else:
            tree.remove(posixpath.join(parent, base[len(WHITEOUT_PREFIX) :]))
            tree.whiteouts_applied += 1
    for m in members:
        path = normalize(m.name)
        if posixpath.basename(path).startswith(WHITEOUT_PREFIX):
            continue
        tree.put(Entry(path=path, info=m, layer=layer_index))


def _dir_info(path: str, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.mtime = mtime
    return info


def synthetic_file(path: str, data: bytes, mode: int = 0o644) -> Entry:
    info = tarfile.TarInfo(path)
    info.type = tarfile.REGTYPE
    info.mode = mode
    info.size = len(data)
    return Entry(path=path, info=info, layer=-1, data=data)


def synthetic_dir(path: str, mode: int = 0o755) -> Entry:
    info = _dir_info(path, 0)
    info.mode = mode
    return Entry(path=path, info=info, layer=-1)


def synthetic_symlink(path: str, target: str) -> Entry:
    info = tarfile.TarInfo(path)
    info.type = tarfile.SYMTYPE
    info.mode = 0o777
    info.linkname = target
    return Entry(path=path, info=info, layer=-1)


class LayerReader(Protocol):
    """Where layer members and their bytes come from: a `docker save` archive (LayerSource)
    or the engine's layer directories (export.storage.StorageLayerSource)."""

    @property
    def layers(self) -> Sequence[object]: ...

    def members(self, layer: int) -> list[tarfile.TarInfo]: ...

    def member(self, layer: int, path: str) -> tarfile.TarInfo | None: ...

    def open(self, layer: int, member: tarfile.TarInfo) -> IO[bytes]: ...


class LayerSource:
    """Random access to the members of the image's layer tars (opened from `docker save`)."""

    def __init__(self, layers: list[tarfile.TarFile]) -> None:
        self.layers = layers
        self._by_name: list[dict[str, tarfile.TarInfo]] = []
        for tf in layers:
            index: dict[str, tarfile.TarInfo] = {}
            for m in tf.getmembers():
                index[normalize(m.name)] = m  # the last one wins, as in tar extraction
            self._by_name.append(index)

    def members(self, layer: int) -> list[tarfile.TarInfo]:
        return self.layers[layer].getmembers()

    def member(self, layer: int, path: str) -> tarfile.TarInfo | None:
        return self._by_name[layer].get(path)

    def open(self, layer: int, member: tarfile.TarInfo) -> IO[bytes]:
        fh = self.layers[layer].extractfile(member)
        if fh is None:
            raise ValueError(f"layer {layer}: {member.name} has no data")
        return fh


def merge_layers(source: LayerReader) -> MergedTree:
    tree = MergedTree()
    for i in range(len(source.layers)):
        apply_layer(tree, i, source.members(i))
    return tree


def _clean_header(entry: Entry, path: str, mtime: int) -> tarfile.TarInfo:
    src = entry.info
    out = tarfile.TarInfo(path)
    out.type = src.type
    out.mode = src.mode & 0o7777
    out.uid, out.gid = src.uid, src.gid
    out.uname = out.gname = ""  # names would be mapped through the host's passwd by readers
    out.mtime = mtime
    out.linkname = src.linkname
    out.devmajor, out.devminor = src.devmajor, src.devminor
    out.size = 0
    return out


def ordered_entries(tree: MergedTree, drop_dev_contents: bool = True) -> Iterator[Entry]:
    """Entries in sort order, with any missing parent directories filled in."""
    paths = sorted((p for p in tree.entries if p), key=sort_key)
    emitted: set[str] = set()
    for path in paths:
        if drop_dev_contents and path.startswith("dev/"):
            continue  # device nodes are the runtime's job (enroot excludes dev/* too)
        parent = posixpath.dirname(path)
        missing: list[str] = []
        while parent and parent not in emitted and parent not in tree.entries:
            missing.append(parent)
            parent = posixpath.dirname(parent)
        for p in reversed(missing):
            emitted.add(p)
            yield synthetic_dir(p)
        emitted.add(path)
        yield tree.entries[path]


def write_merged_tar(
    tree: MergedTree, source: LayerReader, out: IO[bytes], mtime: int, drop_dev_contents: bool = True
) -> dict[str, int]:
    """Stream the merged tree as one tar to `out`. Returns counts for the export report.

    Hard links: layer tars link to a path in the same layer. The group of paths sharing that
    inode is emitted as one regular file (the first path in sort order) plus links to it, so
    a link never points at a path a later layer replaced or deleted.
    """
    stats = _new_stats()
    with _TarWriter(out) as tar:
        for info, data, member in _tar_members(tree, source, mtime, drop_dev_contents, stats):
            if data is not None:
                tar.addfile(info, _BytesReader(data))
            elif member is not None:
                tar.addfile_from(info, source, member[0], member[1])
            else:
                tar.addfile(info)
    return stats


def merged_stats(tree: MergedTree, source: LayerReader, drop_dev_contents: bool = True) -> dict[str, int]:
    """The counts write_merged_tar reports, without writing (the directory feed's report)."""
    stats = _new_stats()
    for _ in _tar_members(tree, source, 0, drop_dev_contents, stats):
        pass
    return stats


def _new_stats() -> dict[str, int]:
    return {"files": 0, "dirs": 0, "symlinks": 0, "hardlinks": 0, "other": 0, "bytes": 0}


def _tar_members(tree: MergedTree, source: LayerReader, mtime: int, drop_dev_contents: bool, stats: dict[str, int]
                 ) -> Iterator[tuple[tarfile.TarInfo, bytes | None, tuple[int, tarfile.TarInfo] | None]]:
    """(header, synthetic data, (layer, member) holding the data) for each member of the merged tar."""
    first_of_group: dict[tuple[int, str], str] = {}
    for entry in ordered_entries(tree, drop_dev_contents):
        info = _clean_header(entry, entry.path, mtime)
        data_member: tarfile.TarInfo | None = None
        if entry.info.islnk():
            key = (entry.layer, normalize(entry.info.linkname))
            if key in first_of_group:
                info.type = tarfile.LNKTYPE
                info.linkname = first_of_group[key]
                stats["hardlinks"] += 1
                yield info, None, None
                continue
            target = source.member(entry.layer, key[1])
            if target is None or not target.isreg():
                raise ValueError(f"hard link {entry.path} -> {key[1]}: target missing in its layer")
            first_of_group[key] = entry.path
            info.type = tarfile.REGTYPE
            info.linkname = ""
            data_member = target
        elif entry.info.isreg() and entry.layer >= 0:
            key = (entry.layer, entry.path)
            if key in first_of_group:  # a link to this file sorted first and carries the data
                info.type = tarfile.LNKTYPE
                info.linkname = first_of_group[key]
                stats["hardlinks"] += 1
                yield info, None, None
                continue
            first_of_group[key] = entry.path
            data_member = entry.info
        if entry.info.isreg() or entry.info.islnk():
            stats["files"] += 1
            if entry.data is not None:
                info.size = len(entry.data)
                stats["bytes"] += info.size
                yield info, entry.data, None
            else:
                assert data_member is not None
                info.size = data_member.size
                stats["bytes"] += info.size
                yield info, None, (entry.layer, data_member)
        else:
            stats["dirs" if info.isdir() else "symlinks" if info.issym() else "other"] += 1
            yield info, None, None


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else min(len(self._data), self._pos + n)
        chunk = bytes(self._data[self._pos : end])
        self._pos = end
        return chunk


class _TarWriter:
    """A streaming tar writer for the merged tree, built for throughput.

    tarfile's stream mode copies data in 16 KiB reads and re-slices its 10 KiB record buffer
    on every write; here headers are batched into 1 MiB writes straight to the pipe's fd, and
    file data goes from the layer to the pipe in one sendfile(2) when the source can (layer
    directories) or in 1 MiB chunks otherwise. Headers come from TarInfo.tobuf, so the bytes
    are what tarfile would write in TAR_FORMAT.
    """

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._fd: int | None
        try:
            out.flush()
            self._fd = out.fileno()
        except (AttributeError, OSError, ValueError):  # BytesIO and friends: plain writes
            self._fd = None
        self._buf = bytearray()
        self._written = 0

    def __enter__(self) -> _TarWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.close()

    def _write(self, data: bytes) -> None:
        self._written += len(data)
        if self._fd is None:
            self._out.write(data)
            return
        self._buf += data
        if len(self._buf) >= COPY_CHUNK:
            self._flush()

    def _flush(self) -> None:
        if self._fd is None or not self._buf:
            return
        with memoryview(self._buf) as view:
            done = 0
            while done < len(view):
                done += os.write(self._fd, view[done:])
        self._buf.clear()

    def _pad(self, size: int) -> None:
        rest = size % tarfile.BLOCKSIZE
        if rest:
            self._write(tarfile.NUL * (tarfile.BLOCKSIZE - rest))

    def _header(self, info: tarfile.TarInfo) -> None:
        self._write(info.tobuf(TAR_FORMAT, tarfile.ENCODING, "surrogateescape"))

    def addfile(self, info: tarfile.TarInfo, fileobj: IO[bytes] | _BytesReader | None = None) -> None:
        self._header(info)
        if fileobj is None or not info.size:
            return
        left = info.size
        while left > 0:
            chunk = fileobj.read(min(left, COPY_CHUNK))
            if not chunk:
                raise ValueError(f"{info.name}: data ended {left} bytes early")
            self._write(chunk)
            left -= len(chunk)
        self._pad(info.size)

    def addfile_from(self, info: tarfile.TarInfo, source: LayerReader, layer: int,
                     member: tarfile.TarInfo) -> None:
        send = getattr(source, "send", None)
        if send is None or self._fd is None or info.size < SENDFILE_MIN:
            with source.open(layer, member) as fh:
                self.addfile(info, fh)
            return
        self._header(info)
        self._flush()
        send(layer, member, self._fd)
        self._written += info.size
        self._pad(info.size)

    def close(self) -> None:
        self._write(tarfile.NUL * (2 * tarfile.BLOCKSIZE))
        rest = self._written % tarfile.RECORDSIZE
        if rest:
            self._write(tarfile.NUL * (tarfile.RECORDSIZE - rest))
        self._flush()
        if self._fd is None:
            self._out.flush()
