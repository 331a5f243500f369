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

from envbuilder.export.flatten import MergedTree, sort_key

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
