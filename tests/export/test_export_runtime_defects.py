"""Defects the real runtimes found in exported artifacts, each checked without a runtime.

Long and non-ASCII symlink targets (mksquashfs 4.5.1 -tar strips a PAX link target's leading
`/` and `../`), the PATH of enroot's login shell, side files of two formats beside one another,
enroot's /etc/rc, duplicate labels in the .def and `run IMAGE -c '...'`. The runtime tests
(tests/export/test_runtime_apptainer.py, tests/export/test_runtime_slurm.py) run the same artifacts for real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_export_docker import _build, _chroot, _content_tag, _docker, _export, _unsquash, tiny_image

from envbuilder.export import sif

pytestmark = [pytest.mark.integration, pytest.mark.docker]
__all__ = ["tiny_image"]  # the session fixture, shared with test_export_docker

LINKS_REPO = "envbuilder-test/export-links"
LONG_DIR = "/opt/" + "/".join(["a-rather-long-directory-name"] * 5)
NON_ASCII = "/etc/ssl/certs/NetLock_Arany_=Class_Gold=_Főtanúsítvány.pem"
# (link, target): what the smoke image's ca-certificates and CUDA images have
LINKS = [
    ("/opt/long-abs", LONG_DIR + "/file"),                     # absolute, > 100 bytes
    ("/opt/x/y/long-rel", "../../" + LONG_DIR.lstrip("/") + "/file"),  # ../ prefix, > 100 bytes
    ("/etc/ssl/certs/988a38cb.0", NON_ASCII),                  # non-ASCII absolute target
    ("/opt/short", "/opt/x"),                                  # plain (ustar fits)
]
LINKS_DOCKERFILE = """FROM {base}
WORKDIR /srv/work-dir
RUN mkdir -p {long} /etc/ssl/certs /opt/x/y && echo data > {long}/file && echo pem > '{pem}' \\
{links}
ENV PATH=/opt/tool/bin:/usr/bin:/bin
"""


@pytest.fixture(scope="session")
def links_image(tiny_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    links = "".join(f" && ln -s '{t}' '{link}'" for link, t in LINKS)
    dockerfile = LINKS_DOCKERFILE.format(base=tiny_image, long=LONG_DIR, pem=NON_ASCII, links=links)
    return _build(_content_tag(LINKS_REPO, dockerfile), dockerfile, tmp_path_factory.mktemp("linksctx"))


@pytest.mark.parametrize("fmt", ["sqsh", "sif"])
def test_long_and_non_ascii_link_targets_survive(links_image: str, fmt: str, tmp_path: Path) -> None:
    r = _export(links_image, fmt, tmp_path / f"l.{fmt}", snippets=False)
    offset = 0
    if fmt == "sif":
        part = sif.read_sif(r.path).primary_partition()
        assert part is not None
        offset = part.offset
    root = _unsquash(r.path, tmp_path / "root", offset)
    for link, target in LINKS:
        assert os.readlink(root / link.lstrip("/")) == target, link
    assert (root / LONG_DIR.lstrip("/") / "file").read_text() == "data\n"


def test_enroot_login_shell_keeps_the_image_path(links_image: str, tmp_path: Path) -> None:
    """enroot starts `bash --login`: Debian's /etc/profile resets PATH; /etc/profile.d restores it."""
    r = _export(links_image, "sqsh", tmp_path / "p.sqsh", snippets=False)
    root = _unsquash(r.path, tmp_path / "root")
    profile = root / "etc/profile"
    # the tiny image has no /etc/profile: give it Debian's, which sets PATH unconditionally
    profile.write_text('PATH="/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"\nexport PATH\n'
                       'if [ -d /etc/profile.d ]; then\n  for i in /etc/profile.d/*.sh; do\n'
                       '    if [ -r $i ]; then\n      . $i\n    fi\n  done\n  unset i\nfi\n')
    env = dict(line.split("=", 1) for line in (root / "etc/environment").read_text().splitlines())
    out = _chroot(root, "/bin/sh", "-l", "-c", 'echo "$PATH"', env=env)
    assert out.strip() == "/opt/tool/bin:/usr/bin:/bin"


def test_enroot_rc_creates_workdir_and_unsets_oldpwd(links_image: str, tmp_path: Path) -> None:
    r = _export(links_image, "sqsh", tmp_path / "rc.sqsh", snippets=False)
    root = _unsquash(r.path, tmp_path / "root")
    rc = (root / "etc/rc").read_text()
    assert "mkdir -p /srv/work-dir 2> /dev/null\ncd /srv/work-dir && unset OLDPWD || exit 1\n" in rc
    shutil.rmtree(root / "srv/work-dir")  # a site's fstab may hide it: rc must make it
    env = {"PATH": "/usr/bin:/bin", "OLDPWD": "/somewhere"}
    out = _chroot(root, "/bin/sh", "/etc/rc", "/bin/sh", "-c", 'echo "$PWD|${OLDPWD-unset}"', env=env)
    assert out == "/srv/work-dir|unset\n"


def test_side_files_of_two_formats_do_not_collide(links_image: str, tmp_path: Path) -> None:
    """The README's own example: build/nemo.sqsh and build/nemo.sif in one directory."""
    a = _export(links_image, "sif", tmp_path / "nemo.sif")
    before = {p.name: p.read_bytes() for p in a.sidecars}
    b = _export(links_image, "sqsh", tmp_path / "nemo.sqsh")
    assert not {p.name for p in a.sidecars} & {p.name for p in b.sidecars}
    for name, data in before.items():
        assert (tmp_path / name).read_bytes() == data, f"{name} was overwritten by the sqsh export"
    assert {p.name for p in b.sidecars} >= {"nemo.sqsh.slurm-pyxis.sh", "nemo.sqsh.torchrun-multinode.sbatch"}
    assert {p.name for p in a.sidecars} >= {"nemo.sif.def", "nemo.sif.apptainer.sh",
                                            "nemo.sif.torchrun-multinode.sbatch"}


def test_edited_side_file_is_not_replaced_silently(links_image: str, tmp_path: Path) -> None:
    a = _export(links_image, "sif", tmp_path / "e.sif")
    script = tmp_path / "e.sif.apptainer.sh"
    script.write_text(script.read_text() + "# my site's edit\n")
    b = _export(links_image, "sif", tmp_path / "e.sif")
    assert "my site's edit" in script.read_text()  # kept where it was
    kept = [p for p in b.sidecars if p.name.startswith("e.sif.apptainer.sh")]
    assert b.to_dict()["sidecars_kept"] == [str(script)]
    assert kept and kept[0] != script and "my site's edit" not in kept[0].read_text()
    assert a.sha256 == b.sha256


def test_deffile_labels_are_only_those_the_image_lacks(links_image: str, tmp_path: Path) -> None:
    """Apptainer's docker bootstrap copies the image labels; repeating them warns 'already exists'."""
    image_labels = _docker().images.get(links_image).attrs["Config"].get("Labels") or {}
    r = _export(links_image, "sif", tmp_path / "d.sif", lock_dir=None)
    deffile = (tmp_path / "d.sif.def").read_text()
    section = deffile.split("%labels", 1)[1].split("%", 1)[0]
    keys = [line.split()[0] for line in section.splitlines() if line.strip()]
    assert len(keys) == len(set(keys))
    assert not set(keys) & set(image_labels)
    assert "io.envbuilder.image-id" in keys and r.image_id


def test_runscript_passes_dash_arguments_to_the_command(tiny_image: str, tmp_path: Path) -> None:
    """`apptainer run IMAGE -c 'cmd'` with CMD ["/bin/sh"]: the arguments go to the shell."""
    client = _docker()
    dockerfile = f'FROM {tiny_image}\nCMD ["/bin/sh"]\n'
    tag = _build(_content_tag("envbuilder-test/export-cmd-sh", dockerfile), dockerfile, tmp_path)
    assert client.images.get(tag)
    r = _export(tag, "sif", tmp_path / "c.sif", snippets=False)
    part = sif.read_sif(r.path).primary_partition()
    assert part is not None
    root = _unsquash(r.path, tmp_path / "root", part.offset)
    out = _chroot(root, "/.singularity.d/actions/run", "-c", "echo ran $0", env={"PATH": "/bin"})
    assert out == "ran /bin/sh\n"
    assert _chroot(root, "/.singularity.d/actions/run", "/bin/sh", "-c", "echo direct",
                   env={"PATH": "/bin"}) == "direct\n"


def test_symlink_check_catches_a_mangled_target(links_image: str, tmp_path: Path) -> None:
    """The check export runs (and inspect --deep): a target that differs from the image's fails."""
    from envbuilder.errors import ArtifactImageMismatchError
    from envbuilder.export.deep import check_artifact_against_image

    r = _export(links_image, "sqsh", tmp_path / "v.sqsh", snippets=False)
    report = check_artifact_against_image(r.path, links_image)
    assert report.links_checked >= len(LINKS) and report.paths_checked > 20
    # rebuild the squashfs from the unpacked tree with one target stripped as mksquashfs 4.5.1 did
    root = _unsquash(r.path, tmp_path / "root")
    (root / "opt/long-abs").unlink()
    (root / "opt/long-abs").symlink_to(LONG_DIR.lstrip("/") + "/file")
    bad = tmp_path / "bad.sqsh"
    subprocess.run(["mksquashfs", str(root), str(bad), "-noappend", "-quiet"], check=True, capture_output=True)
    with pytest.raises(ArtifactImageMismatchError) as exc:
        check_artifact_against_image(bad, links_image)
    assert "/opt/long-abs" in exc.value.cause and exc.value.exit_code == 100


def test_debian_test_base_carries_no_host_files(debian_base_image: str, tmp_path: Path) -> None:
    """mmdebstrap copies the host's /etc/hostname and /etc/resolv.conf (mode 0755) into the tree."""
    import json
    import tarfile

    archive = tmp_path / "base.tar"
    with open(archive, "wb") as fh:
        for chunk in _docker().images.get(debian_base_image).save(named=True):
            fh.write(chunk)
    found: dict[str, tuple[int, bytes]] = {}
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer in manifest[0]["Layers"]:
            with tarfile.open(fileobj=outer.extractfile(layer)) as lt:
                for m in lt.getmembers():
                    name = m.name.lstrip("./")
                    if name in ("etc/hostname", "etc/resolv.conf") and m.isfile():
                        fh2 = lt.extractfile(m)
                        found[name] = (m.mode, fh2.read() if fh2 else b"")
    assert found == {}, f"host files in the base image: {found}"
