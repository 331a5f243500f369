"""Feed mksquashfs the image as a directory: a read-only overlay mount of its layer directories.

The tar feed (flatten.write_merged_tar into `mksquashfs -tar`) costs this process about two
CPU-seconds per GB of image: headers built in Python, every small file read in and written to
the pipe. On a machine whose cores mksquashfs's compressors already fill, that time adds straight
to the export. Mounting the engine's layer directories as one overlay and pointing mksquashfs at
it leaves the data path to the kernel and mksquashfs alone: the export then runs at what
`mksquashfs DIR` of the merged tree on disk does (bench/export_compare.py's limit).

What the merged tree changes on top of the layers goes into one more layer above them, built
here from the tree: the runtime's files, directories and symlinks as the tree has them, the
directories above those with the tree's attributes, a whiteout for every layer path the tree
dropped, and /dev made opaque (device nodes are the runtime's job: the tar feed drops them too).

The top layer is written before the layers are merged, from point lookups of the few paths the
runtime's files touch (`LookupTree`: overlayfs's own lookup rules over the layer directories), so
mksquashfs starts at once; the full merge that the report and the check of every path need runs
while it works. That check compares the artifact with the full merge, so a lookup that went wrong
cannot go unnoticed.

The mount exists only in a private mount namespace (`unshare --mount`) that holds mksquashfs and
nothing else: no other process sees it, and it vanishes with mksquashfs however the export ends,
so a killed export leaves no mount behind. Mounting needs root (CAP_SYS_ADMIN); without it, or
when anything here is refused, the export streams the tar instead.

The two feeds give different bytes for the same image (mksquashfs lays a directory out
differently from a tar stream); each is deterministic on its own. The feed is part of the export
cache key and of the export report.
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import stat
from pathlib import Path
from typing import Any

from envbuilder.export.flatten import Entry, MergedTree, sort_key
from envbuilder.export.storage import OPAQUE_XATTRS, tarinfo_of

OPAQUE_XATTR = "trusted.overlay.opaque"
# sh script run inside the new mount namespace: mount, then become mksquashfs. 97 = the mount failed.
MOUNT_FAILED = 97
_SCRIPT = ('mount -t overlay -o "ro,lowerdir=$1" overlay "$2" || { echo "envbuilder: overlay mount failed" >&2; '
           f'exit {MOUNT_FAILED}; }}; shift 2; exec "$@"')
# errnos that mean "not allowed or not supported here": fall back to the tar feed
FALLBACK_ERRNOS = frozenset({errno.EPERM, errno.EACCES, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


class Unsupported(Exception):
    """The tree holds something the overlay feed cannot express: use the tar feed."""


def unavailable_reason() -> str | None:
    """Why this process cannot mount an overlay; None when it can try."""
    if os.geteuid() != 0:
        return "mounting needs root"
    for tool in ("unshare", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    try:
        with open("/proc/filesystems", encoding="ascii") as fh:
            if not any(line.split()[-1:] == ["overlay"] for line in fh):
                return "the kernel has no overlay filesystem"
    except OSError:
        return "cannot read /proc/filesystems"
    return None


class _Lookups(dict[str, Entry]):
    """path -> Entry: entries put here, else what the layers show at that path (looked up, then kept)."""

    def __init__(self, dirs: list[Path]) -> None:
        super().__init__()
        self._dirs = dirs

    def __contains__(self, path: object) -> bool:
        return self.get(path) is not None

    def get(self, path: Any, default: Any = None) -> Any:
        if dict.__contains__(self, path):
            return self[path]
        found = lookup(self._dirs, path) if isinstance(path, str) and path else None
        if found is None:
            return default
        self[path] = found
        return found


class LookupTree(MergedTree):
    """A MergedTree that knows only the paths asked for: enough for the runtime's files and the top layer."""

    def __init__(self, dirs: list[Path]) -> None:
        super().__init__()
        self.entries = _Lookups(dirs)


def lookup(dirs: list[Path], path: str) -> Entry | None:
    """What an overlay of `dirs` (bottom first) shows at `path`: the top-most layer's entry, None if none.

    overlayfs rules: along the path, the top-most layer holding a component decides; a whiteout
    (0/0 character device) or a non-directory there hides every lower layer, and an opaque
    directory hides the lower layers' contents of that directory.
    """
    visible = list(range(len(dirs) - 1, -1, -1))  # layers that can still contribute, top first
    parts = path.split("/")
    found: tuple[int, os.stat_result] | None = None
    for depth in range(len(parts)):
        prefix = "/".join(parts[: depth + 1])
        found, below = None, []
        for layer in visible:
            full = dirs[layer] / prefix
            try:
                st = full.lstat()
            except (FileNotFoundError, NotADirectoryError):
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                break  # whiteout: gone here and below
            if stat.S_ISSOCK(st.st_mode):
                break  # the merge leaves sockets out (a tar cannot hold one): as if absent
            if found is None:
                found = (layer, st)
            if not stat.S_ISDIR(st.st_mode) or not stat.S_ISDIR(found[1].st_mode):
                break  # a non-directory hides the layers below
            below.append(layer)
            if any(_xattr(full, name) == b"y" for name in OPAQUE_XATTRS):
                break
        if found is None:
            return None
        if depth < len(parts) - 1 and not stat.S_ISDIR(found[1].st_mode):
            return None  # a file where the path needs a directory
        visible = below
    assert found is not None
    layer, st = found
    return Entry(path=path, info=tarinfo_of(path, st, str(dirs[layer] / path)), layer=layer)


def _xattr(path: Path, name: str) -> bytes | None:
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError:
        return None


def dropped_paths(layer_paths: set[str], tree: MergedTree) -> list[str]:
    """Paths the layers hold that the artifact must not: removed from the tree after the merge,
    top-most only (a whiteout hides what is below it)."""
    gone = layer_paths - tree.entries.keys()
    return sorted((p for p in gone if posixpath.dirname(p) not in gone), key=sort_key)


def build_top_layer(tree: MergedTree, layer_paths: set[str], top: Path, drop_dev_contents: bool = True) -> None:
    """Write the layer that turns the image's layers into exactly `tree` (see the module doc)."""
    top.mkdir()
    made: set[str] = {""}

    def parents(path: str) -> None:
        missing = []
        parent = posixpath.dirname(path)
        while parent and parent not in made:
            missing.append(parent)
            parent = posixpath.dirname(parent)
        for d in reversed(missing):
            entry = tree.get(d)
            mode, uid, gid = (0o755, 0, 0) if entry is None else (entry.info.mode, entry.info.uid, entry.info.gid)
            if entry is not None and not entry.info.isdir():
                raise Unsupported(f"{d}: parent of a runtime file is not a directory")
            target = top / d
            target.mkdir()
            _own(target, mode & 0o7777, uid, gid)
            made.add(d)

    for path in dropped_paths(layer_paths, tree):
        if drop_dev_contents and path.startswith("dev/"):
            continue
        parents(path)
        os.mknod(top / path, stat.S_IFCHR | 0o600, os.makedev(0, 0))  # overlayfs whiteout
    for path in sorted((p for p, e in tree.entries.items() if p and e.layer < 0), key=sort_key):
        if drop_dev_contents and path.startswith("dev/"):
            continue
        entry = tree.entries[path]
        info = entry.info
        parents(path)
        target = top / path
        if info.isdir():
            if path not in made:
                target.mkdir()
                made.add(path)
            _own(target, info.mode & 0o7777, info.uid, info.gid)
        elif info.isreg():
            target.write_bytes(entry.data or b"")
            _own(target, info.mode & 0o7777, info.uid, info.gid)
        elif info.issym():
            os.symlink(info.linkname, target)
            os.lchown(target, info.uid, info.gid)
        else:
            raise Unsupported(f"{path}: a runtime entry of tar type {info.type!r}")
    dev = tree.get("dev")
    if drop_dev_contents and dev is not None and dev.info.isdir():
        target = top / "dev"
        if "dev" not in made:
            target.mkdir()
            _own(target, dev.info.mode & 0o7777, dev.info.uid, dev.info.gid)
        os.setxattr(target, OPAQUE_XATTR, b"y")  # the layers' /dev contents stay hidden


def _own(path: Path, mode: int, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    os.chmod(path, mode)  # after chown, which clears set-id bits


def mount_command(top: Path, layer_dirs: list[Path], work: Path, mountpoint: str) -> list[str]:
    """`unshare ... sh -c MOUNT-THEN-EXEC`: append the mksquashfs command (source: `mountpoint`).

    Run with cwd=work. The lowerdir option names short symlinks (work/l/N), not the layer paths:
    the kernel takes one page of mount options, which ~50 full overlay2 paths would fill.
    """
    links = work / "l"
    links.mkdir()
    names = []
    for i, d in enumerate([top, *reversed(layer_dirs)]):  # overlay lists the top-most layer first
        (links / str(i)).symlink_to(d.absolute())
        names.append(f"l/{i}")
    (work / mountpoint).mkdir()
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _SCRIPT, "sh", ":".join(names),
            mountpoint]


def mount_failed(returncode: int, stderr: str) -> bool:
    """Whether mksquashfs never ran because the namespace or the mount was refused."""
    return returncode == MOUNT_FAILED or stderr.lstrip().startswith("unshare:")
