"""Layer merge with whiteouts, and the deterministic merged tar (no Docker engine needed).

Layers are built in memory as real tar files, with the whiteout encoding Docker uses in
`docker save` (AUFS style `.wh.NAME`, opaque `.wh..wh..opq`).
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from envbuilder.export.flatten import (
    LayerSource,
    MergedTree,
    merge_layers,
    normalize,
    ordered_entries,
    synthetic_file,
    write_merged_tar,
)


def _layer(*entries: tuple[str, str, object]) -> tarfile.TarFile:
    """entries: (kind, name, arg) with kind in dir/file/sym/link; returns an opened TarFile."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for kind, name, arg in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1234567890
            info.uname, info.gname = "someone", "somegroup"
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            elif kind == "file":
                data = str(arg).encode()
                info.size, info.mode = len(data), 0o644
                tf.addfile(info, io.BytesIO(data))
            elif kind == "owned":
                data, uid, gid, mode = arg  # type: ignore[misc]
                info.size, info.uid, info.gid, info.mode = len(data), uid, gid, mode
                tf.addfile(info, io.BytesIO(data))
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, str(arg)
                tf.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.LNKTYPE, str(arg)
                tf.addfile(info)
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r:")


Merged = tuple[MergedTree, dict[str, tarfile.TarInfo], dict[str, bytes]]


def _merged(*layers: tarfile.TarFile, mtime: int = 42) -> Merged:
    source = LayerSource(list(layers))
    tree = merge_layers(source)
    out = io.BytesIO()
    write_merged_tar(tree, source, out, mtime)
    out.seek(0)
    infos: dict[str, tarfile.TarInfo] = {}
    data: dict[str, bytes] = {}
    with tarfile.open(fileobj=out, mode="r:") as tf:
        for m in tf.getmembers():
            infos[m.name] = m
            if m.isreg():
                fh = tf.extractfile(m)
                assert fh is not None
                data[m.name] = fh.read()
    return tree, infos, data


def test_normalize_strips_dot_and_slashes() -> None:
    assert normalize("./usr/bin/") == "usr/bin"
    assert normalize("/etc//x") == "etc/x"
    assert normalize("./") == ""
    assert normalize("../../etc/passwd") == "etc/passwd"  # never escapes the root


def test_whiteout_deletes_file_and_subtree() -> None:
    base = _layer(("dir", "opt", None), ("file", "opt/a", "A"), ("dir", "opt/d", None), ("file", "opt/d/x", "X"))
    upper = _layer(("file", "opt/.wh.a", ""), ("file", "opt/.wh.d", ""))
    tree, infos, _ = _merged(base, upper)
    assert "opt" in infos
    assert "opt/a" not in infos and "opt/d" not in infos and "opt/d/x" not in infos
    assert not any(".wh." in name for name in infos)
    assert tree.whiteouts_applied == 2


def test_opaque_dir_hides_lower_layers_but_keeps_its_own_entries() -> None:
    base = _layer(("dir", "srv", None), ("file", "srv/old1", "1"), ("dir", "srv/sub", None), ("file", "srv/sub/o", "2"))
    # the new entry precedes the marker in the tar: the marker must still not hide it
    upper = _layer(("dir", "srv", None), ("file", "srv/new", "N"), ("file", "srv/.wh..wh..opq", ""))
    tree, infos, data = _merged(base, upper)
    assert sorted(n for n in infos if n.startswith("srv/")) == ["srv/new"]
    assert data["srv/new"] == b"N"
    assert tree.opaque_dirs_applied == 1


def test_later_layer_replaces_file_dir_and_symlink() -> None:
    base = _layer(("dir", "a", None), ("file", "a/f", "old"), ("dir", "a/d", None), ("file", "a/d/in", "x"),
                  ("sym", "a/s", "f"))
    upper = _layer(("file", "a/f", "new"), ("file", "a/d", "now a file"), ("dir", "a/s", None))
    _, infos, data = _merged(base, upper)
    assert data["a/f"] == b"new"
    assert infos["a/d"].isreg() and data["a/d"] == b"now a file"
    assert "a/d/in" not in infos  # the replaced directory's contents are gone
    assert infos["a/s"].isdir()


def test_headers_are_normalized_and_ownership_kept() -> None:
    base = _layer(("dir", "x", None), ("owned", "x/suid", (b"bin", 1234, 5678, 0o4755)))
    _, infos, _ = _merged(base, mtime=1700000000)
    m = infos["x/suid"]
    assert (m.uid, m.gid, m.mode) == (1234, 5678, 0o4755)  # the image's numeric owner, setuid kept
    assert m.uname == "" and m.gname == ""  # no names: readers would map them through host passwd
    assert all(i.mtime == 1700000000 for i in infos.values())


def test_entries_sorted_parents_first_and_missing_parents_synthesized() -> None:
    base = _layer(("file", "z/deep/file", "1"), ("file", "a", "2"), ("dir", "m", None))
    tree = merge_layers(LayerSource([base]))
    order = [e.path for e in ordered_entries(tree)]
    assert order == ["a", "m", "z", "z/deep", "z/deep/file"]


def test_dev_contents_dropped_but_dev_kept() -> None:
    base = _layer(("dir", "dev", None), ("file", "dev/null", ""), ("dir", "etc", None))
    _, infos, _ = _merged(base)
    assert "dev" in infos and "dev/null" not in infos


def test_hardlink_survives_replacement_of_its_target() -> None:
    base = _layer(("dir", "h", None), ("file", "h/orig", "payload"), ("link", "h/alias", "h/orig"))
    upper = _layer(("file", "h/orig", "replaced"))
    _, infos, data = _merged(base, upper)
    assert data["h/orig"] == b"replaced"
    assert infos["h/alias"].isreg() and data["h/alias"] == b"payload"  # keeps the old inode's data


def test_hardlink_sorted_before_target_carries_the_data() -> None:
    base = _layer(("dir", "h", None), ("file", "h/zz", "same"), ("link", "h/aa", "h/zz"))
    _, infos, data = _merged(base)
    assert infos["h/aa"].isreg() and data["h/aa"] == b"same"
    assert infos["h/zz"].islnk() and infos["h/zz"].linkname == "h/aa"


def test_same_input_same_bytes() -> None:
    def build() -> bytes:
        base = _layer(("dir", "b", None), ("file", "b/1", "x" * 5000), ("sym", "b/l", "1"), ("link", "b/h", "b/1"))
        upper = _layer(("file", "b/.wh.l", ""), ("file", "c", "y"))
        source = LayerSource([base, upper])
        tree = merge_layers(source)
        tree.put(synthetic_file("etc/environment", b"A=1\n"))
        out = io.BytesIO()
        write_merged_tar(tree, source, out, 7)
        return out.getvalue()

    assert build() == build()


def test_dangling_hardlink_is_an_error_not_a_silent_drop() -> None:
    base = _layer(("link", "x", "missing"))
    source = LayerSource([base])
    tree = merge_layers(source)
    with pytest.raises(ValueError, match="target missing"):
        write_merged_tar(tree, source, io.BytesIO(), 0)


# --- the overlay feed's top layer (root: whiteouts are device nodes, opacity a trusted.* xattr) ------


@pytest.mark.skipif(os.geteuid() != 0, reason="whiteouts (mknod) and trusted.* xattrs need root")
def test_top_layer_turns_the_layers_into_the_tree(tmp_path: Path) -> None:
    import stat

    from envbuilder.export import overlay
    from envbuilder.export.flatten import MergedTree, apply_layer, synthetic_dir, synthetic_file, synthetic_symlink

    def member(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, uid: int = 0) -> tarfile.TarInfo:
        m = tarfile.TarInfo(name)
        m.type, m.mode, m.uid, m.gid = kind, mode, uid, uid
        return m

    tree = MergedTree()
    apply_layer(tree, 0, [member("etc", tarfile.DIRTYPE, 0o750, 7), member("etc/old"), member("etc/keep"),
                          member("dev", tarfile.DIRTYPE, 0o755), member("dev/null", tarfile.CHRTYPE),
                          member("opt", tarfile.DIRTYPE), member("opt/d", tarfile.DIRTYPE), member("opt/d/f")])
    layer_paths = set(tree.entries)
    tree.remove("etc/old")
    tree.remove("opt/d")
    tree.put(synthetic_file("etc/rc", b"#!/bin/sh\n", 0o755))
    tree.put(synthetic_dir("etc/profile.d"))
    tree.put(synthetic_symlink("etc/link", "rc"))
    tree.put(synthetic_dir("new/deep", 0o700))
    top = tmp_path / "top"
    overlay.build_top_layer(tree, layer_paths, top)

    etc = (top / "etc").lstat()
    assert (stat.S_IMODE(etc.st_mode), etc.st_uid, etc.st_gid) == (0o750, 7, 7)  # the tree's, not a default
    assert (top / "etc/rc").read_bytes() == b"#!/bin/sh\n" and stat.S_IMODE((top / "etc/rc").stat().st_mode) == 0o755
    assert os.readlink(top / "etc/link") == "rc"
    assert (top / "etc/profile.d").is_dir() and stat.S_IMODE((top / "new/deep").stat().st_mode) == 0o700
    for gone in ("etc/old", "opt/d"):  # whiteouts: 0/0 character devices, top-most removed path only
        st = (top / gone).lstat()
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
    assert not (top / "opt/d").is_dir() and not (top / "etc/keep").exists()
    assert os.getxattr(top / "dev", overlay.OPAQUE_XATTR) == b"y"  # the layers' device nodes stay hidden
    assert not (top / "dev/null").exists()
    assert overlay.dropped_paths(layer_paths, tree) == ["etc/old", "opt/d"]


@pytest.mark.skipif(os.geteuid() != 0, reason="whiteouts (mknod) and trusted.* xattrs need root")
def test_point_lookup_agrees_with_the_full_merge(tmp_path: Path) -> None:
    """overlay.lookup (what the mount feed builds its top layer from) against merge_layers of the same
    layer directories, for every path any layer holds: whiteouts, an opaque dir, a file replacing a
    dir, a dir replacing a file, a symlink in the path, a socket."""
    import socket
    import stat

    from envbuilder.export import overlay
    from envbuilder.export.storage import StorageLayerSource

    layers = [tmp_path / f"l{i}" for i in range(3)]

    def make(layer: int, path: str, kind: str = "f", mode: int = 0o644) -> None:
        p = layers[layer] / path
        p.parent.mkdir(parents=True, exist_ok=True)
        if kind == "d":
            p.mkdir(exist_ok=True)
        elif kind == "f":
            p.write_text(path)
        elif kind == "l":
            p.symlink_to("target")
        elif kind == "wh":
            os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(0, 0))
        elif kind == "sock":
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(str(p))
        if kind in ("d", "f"):
            os.chmod(p, mode)

    for d in layers:
        d.mkdir()
    make(0, "etc/a")
    make(0, "etc/b")
    make(0, "opq/x/deep")
    make(0, "filedir")
    make(0, "dirfile/inner")
    make(0, "usr/lib/x")
    make(0, "run/s.sock", "sock")
    make(1, "etc", "d", 0o750)
    make(1, "etc/b", "wh")
    make(1, "opq", "d", 0o700)
    os.setxattr(layers[1] / "opq", overlay.OPAQUE_XATTR, b"y")
    make(1, "opq/y")
    make(1, "filedir/now", "f")
    make(1, "dirfile", "f")
    make(2, "lib", "l")
    make(2, "etc/c")
    make(2, "opq/x", "wh")
    tree = merge_layers(StorageLayerSource(layers))
    every = {str(p.relative_to(d)) for d in layers for p in d.rglob("*")}
    for path in sorted(every | {"lib/x", "etc/b/z", "dirfile/inner", "nope"}):
        got = overlay.lookup(layers, path)
        want = tree.get(path)
        assert (got is None) == (want is None), path
        if got is not None and want is not None:
            assert (got.layer, got.info.type, got.info.mode, got.info.uid) == \
                   (want.layer, want.info.type, want.info.mode, want.info.uid), path
