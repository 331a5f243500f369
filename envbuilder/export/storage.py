"""Read an image's layers straight from the engine's overlay2 storage: no `docker save`.

`docker save` makes the engine re-tar every layer (and, before Docker 25, stage them in a
temp dir first); we then spool that archive to disk and read it back. When this process can
read the engine's own layer directories (a local engine with the overlay2 driver, and root or
a readable /var/lib/docker), the export reads each file once, straight from its layer, and
sends it to mksquashfs with sendfile(2): one pass, no extra copy, no re-tar.

A layer directory is an overlayfs "diff": deletions are 0/0 character devices and an opaque
directory carries the `trusted.overlay.opaque=y` xattr (`user.overlay.opaque` rootless). They
are presented to the merge as the OCI whiteout members a layer tar would carry (`.wh.NAME`,
`.wh..wh..opq`), and files sharing an inode inside one layer as tar hard links to the first
path in the order Docker's own tar writer walks the directory, so the merged result, and the
artifact, are byte-identical to the `docker save` path (a test holds us to that).
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
from pathlib import Path
from typing import IO, Any

from envbuilder.export.flatten import OPAQUE_MARKER, WHITEOUT_PREFIX, normalize
from envbuilder.export.image_source import ImageInfo

OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")


def storage_layer_dirs(image: Any) -> list[Path] | None:
    """The image's layer directories bottom first, or None when they cannot be read here.

    None (fall back to `docker save`) for another storage driver, a remote engine (paths that
    do not exist here), unreadable directories, or a layer count that does not match the
    image's rootfs.
    """
    attrs = image.attrs
    driver = attrs.get("GraphDriver") or {}
    if driver.get("Name") != "overlay2":
        return None
    data = driver.get("Data") or {}
    upper = data.get("UpperDir")
    lower = [p for p in (data.get("LowerDir") or "").split(":") if p]
    if not upper:
        return None
    dirs = [Path(p) for p in reversed(lower)] + [Path(upper)]
    diff_ids = (attrs.get("RootFS") or {}).get("Layers") or []
    if len(dirs) != len(diff_ids):
        return None
    for d in dirs:
        if not d.is_dir() or not os.access(d, os.R_OK | os.X_OK):
            return None
    return dirs


def info_from_inspect(image: Any, ref: str) -> ImageInfo:
    """The image config as `docker save` would give it, from the engine's inspect data."""
    attrs = image.attrs
    config = {
        "architecture": attrs.get("Architecture") or "amd64",
        "os": attrs.get("Os") or "linux",
        "config": attrs.get("Config") or {},
        "rootfs": {"type": "layers", "diff_ids": list((attrs.get("RootFS") or {}).get("Layers") or [])},
    }
    return ImageInfo(ref=ref, image_id=str(attrs.get("Id") or image.id), config=config,
                     size=int(attrs.get("Size") or 0))


def _is_opaque(path: str) -> bool:
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def tarinfo_of(name: str, st: os.stat_result, full: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    mode = st.st_mode
    info.mode = stat.S_IMODE(mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.mtime = int(st.st_mtime)
    if stat.S_ISREG(mode):
        info.type, info.size = tarfile.REGTYPE, st.st_size
    elif stat.S_ISDIR(mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(full)
    elif stat.S_ISCHR(mode):
        info.type = tarfile.CHRTYPE
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    elif stat.S_ISBLK(mode):
        info.type = tarfile.BLKTYPE
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    elif stat.S_ISFIFO(mode):
        info.type = tarfile.FIFOTYPE
    else:  # sockets: a tar cannot hold them either
        raise ValueError(f"{full}: unsupported file type")
    return info


def layer_members(root: Path, sockets: list[str] | None = None) -> list[tarfile.TarInfo]:
    """The members a layer tar of `root` would hold, in Docker's walk order (sorted, depth first).

    Sockets are left out (appended to `sockets` when given)."""
    members: list[tarfile.TarInfo] = []
    first_path: dict[tuple[int, int], str] = {}  # (dev, ino) -> first path with that inode

    def walk(directory: str, rel: str) -> None:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            name = f"{rel}{e.name}"
            st = e.stat(follow_symlinks=False)
            if stat.S_ISSOCK(st.st_mode):
                if sockets is not None:
                    sockets.append(name)
                continue  # Docker's layer tar writer skips sockets too
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # overlayfs whiteout
                wh = tarfile.TarInfo(f"{rel}{WHITEOUT_PREFIX}{e.name}")
                members.append(wh)
                continue
            info = tarinfo_of(name, st, e.path)
            if info.isreg() and st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                if key in first_path:
                    info.type, info.size, info.linkname = tarfile.LNKTYPE, 0, first_path[key]
                else:
                    first_path[key] = name
            members.append(info)
            if info.isdir():
                if _is_opaque(e.path):
                    members.append(tarfile.TarInfo(f"{name}/{OPAQUE_MARKER}"))
                walk(e.path, f"{name}/")

    walk(str(root), "")
    return members


class StorageLayerSource:
    """The LayerSource interface over layer directories: members, lookup by path, file data."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self.layers: list[Path] = dirs
        self._members: dict[int, list[tarfile.TarInfo]] = {}
        self._by_name: dict[int, dict[str, tarfile.TarInfo]] = {}
        self.sockets: list[str] = []  # in the layers read so far (a tar cannot hold them)

    def members(self, layer: int) -> list[tarfile.TarInfo]:
        if layer not in self._members:
            found = layer_members(self.dirs[layer], self.sockets)
            self._members[layer] = found
            self._by_name[layer] = {normalize(m.name): m for m in found}
        return self._members[layer]

    def member(self, layer: int, path: str) -> tarfile.TarInfo | None:
        self.members(layer)
        return self._by_name[layer].get(path)

    def open(self, layer: int, member: tarfile.TarInfo) -> IO[bytes]:
        return open(self.dirs[layer] / member.name, "rb")

    def send(self, layer: int, member: tarfile.TarInfo, out_fd: int) -> None:
        """Write the member's bytes to out_fd with sendfile(2): the data never enters this process."""
        with open(self.dirs[layer] / member.name, "rb") as fh:
            left, offset = member.size, 0
            while left > 0:
                try:
                    sent = os.sendfile(out_fd, fh.fileno(), offset, min(left, 1 << 30))
                except OSError as exc:
                    if exc.errno in (errno.EINVAL, errno.ENOSYS) and offset == 0:
                        _copy_fd(fh, out_fd, left)
                        return
                    raise
                if sent == 0:
                    raise ValueError(f"{member.name}: file shrank while it was exported")
                left -= sent
                offset += sent


def _copy_fd(fh: IO[bytes], out_fd: int, size: int) -> None:
    left = size
    while left > 0:
        chunk = fh.read(min(left, 1 << 20))
        if not chunk:
            raise ValueError("file shrank while it was exported")
        view = memoryview(chunk)
        while view:
            n = os.write(out_fd, view)
            view = view[n:]
        left -= len(chunk)

