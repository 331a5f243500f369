"""`envbuilder export` against the real Docker engine, mksquashfs/unsquashfs, chroot and the Go
reference SIF reader.

Test images are made here, fast and without a registry: a tiny root filesystem (the host's dash,
coreutils and their libraries) is `docker import`ed, and an image built FROM it deletes a file and
replaces a directory in a later layer, so its `docker save` carries real engine-made whiteouts
(`.wh.gone.txt`) and an opaque directory (`.wh..wh..opq`). The engine's own flattening
(`docker create` + `export`) is the oracle the merged filesystem is compared with.
The smoke image (build issue) is used when tests/conftest.py provides the `smoke_image` fixture.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuilder.export import sif
from envbuilder.export.inspect import inspect_artifact
from envbuilder.export.pipeline import ExportOptions, ExportResult, export_image

pytestmark = [pytest.mark.integration, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
EPOCH = 1700000000
LOCK_SHA = "5e" * 32
TINY_REPO = "envbuilder-test/export-tiny"
WH_REPO = "envbuilder-test/export-whiteouts"
BIG_REPO = "envbuilder-test/export-big"
HOST_BINARIES = ["sh", "mkdir", "rm", "ln", "chown", "chmod", "cat", "env", "ls"]
ENROOT_ADDED = {"etc/environment", "etc/rc", "etc/rc.local", "etc/fstab", "etc/hosts", "etc/hostname",
                "etc/resolv.conf", "proc", "sys", "tmp", "run", "dev",
                "etc/profile.d", "etc/profile.d/zz-envbuilder-path.sh"}

WH_DOCKERFILE = """
FROM {base}
ENV GREETING="hello world" QUOTED="it's \\"q\\" \\$HOME" PATH=/opt/tool/bin:/usr/bin:/bin
LABEL io.envbuilder.source-date-epoch="{epoch}" io.envbuilder.lock-sha256="{lock}" io.envbuilder.row="smoke"
RUN mkdir -p /opt/keep /opt/opq/sub /opt/tool/bin \\
 && echo a > /opt/keep/gone.txt && echo b > /opt/keep/stay.txt && echo c > /opt/opq/old1 \\
 && echo d > /opt/opq/sub/old2 && ln -s stay.txt /opt/keep/link \\
 && echo hl > /opt/keep/h1 && ln /opt/keep/h1 /opt/keep/h2 \\
 && chown 1234:5678 /opt/keep/stay.txt && chmod 4750 /opt/keep/stay.txt \\
 && printf '#!/bin/sh\\necho "tool:$GREETING:$*"\\n' > /opt/tool/bin/tool && chmod 755 /opt/tool/bin/tool
RUN rm /opt/keep/gone.txt && rm -rf /opt/opq && mkdir /opt/opq && echo new > /opt/opq/new1
VOLUME /data
WORKDIR /opt
ENTRYPOINT ["/opt/tool/bin/tool"]
CMD ["default arg"]
"""


def _docker() -> Any:
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        pytest.fail(f"no Docker engine ({exc}); run scripts/setup-host.sh")
    return client


def _tiny_rootfs_tar() -> bytes:
    """dash + a few coreutils + their shared libraries, laid out merged-/usr style."""
    files: dict[str, bytes] = {}
    for name in HOST_BINARIES:
        real = Path(shutil.which(name) or f"/usr/bin/{name}").resolve()
        files[f"usr/bin/{name}"] = real.read_bytes()
        ldd = subprocess.run(["ldd", str(real)], capture_output=True, text=True, check=True).stdout
        for line in ldd.splitlines():
            parts = line.split()
            lib = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
            if not lib.startswith("/"):
                continue
            canonical = lib.lstrip("/")
            for top in ("lib64/", "lib/"):
                if canonical.startswith(top):
                    canonical = "usr/" + canonical
            files[canonical] = Path(lib).resolve().read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        dirs = sorted({str(Path(p).parent) for p in files} | {"etc", "tmp", "usr", "usr/bin"})
        all_dirs = sorted({str(Path(*Path(d).parts[:i])) for d in dirs for i in range(1, len(Path(d).parts) + 1)})
        for d in all_dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755, EPOCH
            tf.addfile(info)
        for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/bin")):
            info = tarfile.TarInfo(link)
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, EPOCH
            tf.addfile(info)
        passwd = b"root:x:0:0:root:/root:/bin/sh\n"
        for name, data, mode in [(p, d, 0o755) for p, d in sorted(files.items())] + [("etc/passwd", passwd, 0o644)]:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, EPOCH
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _have(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def _content_tag(repo: str, *parts: bytes | str) -> str:
    """Tags named by their inputs' hash: a later session reuses the image, a change rebuilds it."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
    return f"{repo}:{h.hexdigest()[:12]}"


@pytest.fixture(scope="session")
def tiny_image() -> str:
    client = _docker()
    data = _tiny_rootfs_tar()
    tag = _content_tag(TINY_REPO, data)
    if not _have(client, tag):
        client.api.import_image_from_data(data, repository=TINY_REPO, tag=tag.split(":")[1])
    return tag


def _build(tag: str, dockerfile: str, context: Path) -> str:
    client = _docker()
    if not _have(client, tag):
        (context / "Dockerfile").write_text(dockerfile)
        client.images.build(path=str(context), tag=tag, rm=True, forcerm=True)
    return tag


@pytest.fixture(scope="session")
def whiteout_image(tiny_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    dockerfile = WH_DOCKERFILE.format(base=tiny_image, epoch=EPOCH, lock=LOCK_SHA)
    return _build(_content_tag(WH_REPO, dockerfile), dockerfile, tmp_path_factory.mktemp("whctx"))


@pytest.fixture(scope="session")
def big_image(tiny_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """160 MiB of incompressible (seeded pseudo-random) data: slow enough to interrupt mid-export."""
    dockerfile = f"FROM {tiny_image}\nCOPY blob /blob\n"
    tag = _content_tag(BIG_REPO, dockerfile, "blob: random.Random(5) x 160 MiB")
    ctx = tmp_path_factory.mktemp("bigctx")
    if not _have(_docker(), tag):
        rng = random.Random(5)
        with open(ctx / "blob", "wb") as fh:
            for _ in range(160):
                fh.write(rng.randbytes(1 << 20))
    return _build(tag, dockerfile, ctx)


@pytest.fixture(scope="session")
def sifcheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sifcheck") / "sifcheck"
    subprocess.run([str(REPO / "tests" / "sifcheck" / "build.sh"), str(out)], check=True)
    return out


def _export(image: str, fmt: str, out: Path, **kw: Any) -> ExportResult:
    kw.setdefault("cache", False)  # these tests are about building: a cache hit would prove nothing
    return export_image(ExportOptions(image=image, fmt=fmt, output=out, **kw))


@pytest.fixture(scope="session")
def wh_sqsh(whiteout_image: str, tmp_path_factory: pytest.TempPathFactory) -> ExportResult:
    return _export(whiteout_image, "sqsh", tmp_path_factory.mktemp("sq") / "wh.sqsh")


@pytest.fixture(scope="session")
def wh_sif(whiteout_image: str, tmp_path_factory: pytest.TempPathFactory) -> ExportResult:
    return _export(whiteout_image, "sif", tmp_path_factory.mktemp("sif") / "wh.sif")


def _unsquash(path: Path, dest: Path, offset: int = 0) -> Path:
    cmd = ["unsquashfs", "-d", str(dest)] + (["-o", str(offset)] if offset else []) + [str(path)]
    subprocess.run(cmd, check=True, capture_output=True)
    return dest


def _image_env(client: Any, tag: str) -> list[str]:
    return list(client.images.get(tag).attrs["Config"]["Env"])


def _chroot(root: Path, *argv: str, env: dict[str, str] | None = None) -> str:
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    proc = subprocess.run([chroot, str(root), *argv], capture_output=True, text=True, env=env or {}, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _tree(root: Path, skip: set[str]) -> dict[str, tuple[Any, ...]]:
    """path -> (kind, mode, uid, gid, sha256 | link target) for everything under root."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            rel = str(full.relative_to(root))
            if rel in skip or rel.split("/")[0] in {"dev"}:
                continue
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(full), st.st_uid, st.st_gid)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
            else:
                out[rel] = ("f", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
                            hashlib.sha256(full.read_bytes()).hexdigest())
    return out


# --- sqsh -------------------------------------------------------------------------------


def test_sqsh_matches_the_engines_own_flattening(whiteout_image: str, wh_sqsh: ExportResult,
                                                 tmp_path: Path) -> None:
    """Oracle: `docker create` + `export` is the engine's merge of the same layers."""
    client = _docker()
    container = client.containers.create(whiteout_image)
    try:
        ref_tar = tmp_path / "ref.tar"
        with open(ref_tar, "wb") as fh:
            for chunk in container.export():
                fh.write(chunk)
    finally:
        container.remove()
    ref = tmp_path / "ref"
    ref.mkdir()
    subprocess.run(["tar", "-xpf", str(ref_tar), "--numeric-owner", "-C", str(ref)], check=True)
    ours = _unsquash(wh_sqsh.path, tmp_path / "ours")
    # the container's init layer adds .dockerenv and etc/mtab; data is the VOLUME mount point
    skip = ENROOT_ADDED | {".dockerenv", "etc/mtab", "data"}
    assert _tree(ours, skip) == _tree(ref, skip)


def test_sqsh_whiteouts_permissions_links_times(wh_sqsh: ExportResult, tmp_path: Path) -> None:
    root = _unsquash(wh_sqsh.path, tmp_path / "root")
    assert not (root / "opt/keep/gone.txt").exists()
    assert sorted(p.name for p in (root / "opt/opq").iterdir()) == ["new1"]
    st = (root / "opt/keep/stay.txt").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 5678, 0o4750)
    assert os.readlink(root / "opt/keep/link") == "stay.txt"
    assert (root / "opt/keep/h1").stat().st_ino == (root / "opt/keep/h2").stat().st_ino
    assert {int(p.lstat().st_mtime) for p in root.rglob("*")} == {EPOCH}
    assert not list(root.rglob(".wh.*"))
    assert wh_sqsh.stats["whiteouts"] >= 1 and wh_sqsh.stats["opaque_dirs"] >= 1
    assert wh_sqsh.source_date_epoch == EPOCH and wh_sqsh.lock_sha256 == LOCK_SHA and wh_sqsh.row == "smoke"


def test_sqsh_enroot_conventions_and_entrypoint(whiteout_image: str, wh_sqsh: ExportResult,
                                                tmp_path: Path) -> None:
    root = _unsquash(wh_sqsh.path, tmp_path / "root")
    image_env = _image_env(_docker(), whiteout_image)
    assert (root / "etc/environment").read_text().splitlines() == image_env
    assert "tmpfs /data tmpfs x-create=dir,rw,nosuid,nodev" in (root / "etc/fstab").read_text()
    rc = (root / "etc/rc").read_text()
    assert f"# io.envbuilder.lock-sha256 {LOCK_SHA}" in rc and "cd /opt && unset OLDPWD || exit 1" in rc
    for mount_point in ("proc", "sys", "dev", "tmp", "run"):
        assert (root / mount_point).is_dir()
    for f in ("etc/hosts", "etc/hostname", "etc/resolv.conf"):
        assert (root / f).is_file()
    # what enroot does at start: environment from /etc/environment, then `/etc/rc ARGS`
    env = dict(line.split("=", 1) for line in image_env)
    assert _chroot(root, "/bin/sh", "/etc/rc", env=env) == "tool:hello world:default arg\n"
    assert _chroot(root, "/bin/sh", "/etc/rc", "x", "y z", env=env) == "tool:hello world:x y z\n"


def test_sqsh_inspect_and_compression_defaults(wh_sqsh: ExportResult) -> None:
    report = inspect_artifact(wh_sqsh.path, with_listing=True)
    assert report["format"] == "sqsh" and report["checks"] == "ok"
    # the pyxis guidance (squashfs.COMPRESSIONS): zstd level 3, 1 MiB blocks
    assert report["squashfs"]["compression"] == "zstd" and report["squashfs"]["mkfs_time"] == EPOCH
    assert report["squashfs"]["block_size"] == 1 << 20
    assert wh_sqsh.squash_options == ["-comp", "zstd", "-Xcompression-level", "3", "-b", "1M"]
    assert any(line.endswith("/opt/opq/new1") for line in report["files"])
    assert report["labels"]["io.envbuilder.lock-sha256"] == LOCK_SHA  # from /etc/rc, as enroot keeps them


def test_squash_options_override(whiteout_image: str, tmp_path: Path) -> None:
    r = _export(whiteout_image, "sqsh", tmp_path / "z.sqsh", squash_options="-comp xz -b 262144",
                snippets=False)
    sb = inspect_artifact(r.path)["squashfs"]
    assert (sb["compression"], sb["block_size"]) == ("xz", 262144)
    assert not list(tmp_path.glob("z.*.sh"))


# --- sif --------------------------------------------------------------------------------


def test_sif_reference_reader_and_structure(whiteout_image: str, wh_sif: ExportResult, sifcheck: Path) -> None:
    proc = subprocess.run([str(sifcheck), str(wh_sif.path)], capture_output=True, text=True, check=True)
    ref = json.loads(proc.stdout)
    assert (ref["version"], ref["arch"], ref["ctime"]) == ("01", "amd64", EPOCH)
    assert [o["datatype"] for o in ref["objects"]] == ["Def.FILE", "JSON.Labels", "FS"]
    prim = ref["primary_partition"]
    assert (prim["fstype"], prim["parttype"], prim["arch"]) == ("Squashfs", "*System", "amd64")
    labels = json.loads(ref["labels"])
    assert labels["io.envbuilder.lock-sha256"] == LOCK_SHA and labels["io.envbuilder.row"] == "smoke"
    assert "Bootstrap: docker-daemon" in ref["deffile"] and f"From: {whiteout_image}" in ref["deffile"]
    ours = inspect_artifact(wh_sif.path)
    assert ours["primary_partition"]["offset"] == prim["offset"] and ours["labels"] == labels


def test_sif_partition_runs_like_apptainer_exec(wh_sif: ExportResult, tmp_path: Path) -> None:
    part = sif.read_sif(wh_sif.path).primary_partition()
    assert part is not None
    root = _unsquash(wh_sif.path, tmp_path / "root", part.offset)
    sd = root / ".singularity.d"
    for p in ("actions/exec", "actions/run", "actions/shell", "env/90-environment.sh", "runscript"):
        assert os.access(sd / p, os.X_OK), p
    assert json.loads((sd / "labels.json").read_text())["io.envbuilder.row"] == "smoke"
    assert os.readlink(root / ".exec") == ".singularity.d/actions/exec"
    assert not (root / "opt/keep/gone.txt").exists()
    # Apptainer runs `/.singularity.d/actions/exec CMD...` in the container with a near-empty env
    out = _chroot(root, "/.singularity.d/actions/exec", "/bin/sh", "-c", 'echo "$GREETING|$QUOTED|$PATH"',
                  env={"PATH": "/usr/bin:/bin"})
    assert out == "hello world|it's \"q\" $HOME|/opt/tool/bin:/usr/bin:/bin\n"
    assert _chroot(root, "/.singularity.d/actions/run", env={"PATH": "/bin"}) == "tool:hello world:default arg\n"
    assert _chroot(root, "/.singularity.d/actions/run", "a", env={"PATH": "/bin"}) == "tool:hello world:a\n"


# --- determinism and sidecars -------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["sqsh", "sif"])
def test_two_exports_are_byte_identical(whiteout_image: str, fmt: str, tmp_path: Path,
                                        wh_sqsh: ExportResult, wh_sif: ExportResult) -> None:
    first = wh_sqsh if fmt == "sqsh" else wh_sif
    (tmp_path / "other").mkdir()
    again = _export(whiteout_image, fmt, tmp_path / "other" / f"renamed.{fmt}", processors=1)
    assert again.sha256 == first.sha256
    assert again.path.read_bytes() == first.path.read_bytes()


def test_sidecars_rendered_next_to_artifact(whiteout_image: str, wh_sqsh: ExportResult,
                                           wh_sif: ExportResult) -> None:
    d = wh_sqsh.path.parent
    pyxis = (d / "wh.sqsh.slurm-pyxis.sh").read_text()
    assert f"IMAGE=${{ENVBUILDER_IMAGE:-{wh_sqsh.path}}}" in pyxis and 'srun --container-image="$IMAGE"' in pyxis
    multi = (d / "wh.sqsh.torchrun-multinode.sbatch").read_text()
    assert "--rdzv-backend=c10d" in multi and '--rdzv-endpoint="$HEAD_ADDR:$RDZV_PORT"' in multi
    assert "scontrol show hostnames" in multi
    app = (wh_sif.path.parent / "wh.sif.apptainer.sh").read_text()
    assert "apptainer exec --nv" in app and "torchrun" in app
    deffile = (wh_sif.path.parent / "wh.sif.def").read_text()
    assert deffile.splitlines()[5:7] == ["Bootstrap: docker-daemon", f"From: {whiteout_image}"]
    for p in [*d.glob("wh.*.sh"), *d.glob("wh.*.sbatch"), *wh_sif.path.parent.glob("wh.*.sh")]:
        subprocess.run(["bash", "-n", str(p)], check=True)


# --- bad input ------------------------------------------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          env=env, check=False)


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_missing_image_exit_40(tmp_path: Path) -> None:
    r = _cli("export", "envbuilder-test/does-not-exist:0", "-o", str(tmp_path / "x.sqsh"))
    assert r.returncode == 40 and "not in the local Docker engine" in r.stderr and "Traceback" not in r.stderr
    assert _leftovers(tmp_path) == []


def test_unwritable_output_exit_41_and_read_only_78(whiteout_image: str, tmp_path: Path) -> None:
    r = _cli("export", whiteout_image, "-o", str(tmp_path / "no" / "such" / "x.sif"))
    assert r.returncode == 41 and "does not exist" in r.stderr
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)]).returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    try:
        r = _cli("export", whiteout_image, "-o", str(ro / "x.sqsh"), "--json")
        assert r.returncode == 78 and json.loads(r.stdout)["error"] == "read-only-filesystem"
        assert f"cannot write in {ro / 'x.sqsh'}: it is on a read-only filesystem" in r.stderr, r.stderr
    finally:
        subprocess.run(["umount", str(ro)], check=True)


@pytest.fixture()
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a 1 MiB tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("fmt", ["sqsh", "sif"])
def test_disk_full_exit_74_no_partial_file(whiteout_image: str, tiny_fs: Path, tmp_path: Path, fmt: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # the docker save spool goes to a big filesystem: mksquashfs itself hits ENOSPC
    r = _cli("export", whiteout_image, "-o", str(tiny_fs / f"x.{fmt}"), "--workdir", str(work))
    assert r.returncode == 74, r.stderr
    assert "no space left" in r.stderr and "Traceback" not in r.stderr
    assert _leftovers(tiny_fs) == [] and _leftovers(work) == []
    # and when the spool itself does not fit
    r = _cli("export", whiteout_image, "-o", str(tiny_fs / f"y.{fmt}"))
    assert r.returncode == 74 and _leftovers(tiny_fs) == []


@pytest.mark.parametrize(("sig", "layers"), [(signal.SIGINT, "save"), (signal.SIGTERM, "storage")])
def test_interrupt_exit_43_no_partial_file(big_image: str, tmp_path: Path, sig: signal.Signals, layers: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.sqsh").write_bytes(b"previous artifact")
    # gzip on 160 MiB of random data keeps mksquashfs busy for seconds on either layer source
    proc = subprocess.Popen([sys.executable, "-m", "envbuilder", "export", big_image, "-o", str(out / "keep.sqsh"),
                             "--layers", layers, "--compression", "gzip", "--no-cache"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # save: the docker save spool exists; storage: mksquashfs has started writing the temp artifact
    started = ".keep.sqsh.work.*/image.tar" if layers == "save" else ".keep.sqsh.*.tmp"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(out.glob(started)):
        time.sleep(0.05)
    time.sleep(0.5 if layers == "save" else 0.2)
    assert proc.poll() is None, "export finished before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 43, err
    assert "interrupted" in err and "Traceback" not in err
    assert _leftovers(out) == ["keep.sqsh"]
    assert (out / "keep.sqsh").read_bytes() == b"previous artifact"


def test_missing_mksquashfs_exit_45(whiteout_image: str, tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))  # nothing on PATH
    r = _cli("export", whiteout_image, "-o", str(tmp_path / "x.sqsh"), env=env)
    assert r.returncode == 45 and "mksquashfs" in r.stderr


def test_refused_squash_option_exit_18(whiteout_image: str, tmp_path: Path) -> None:
    r = _cli("export", whiteout_image, "-o", str(tmp_path / "x.sqsh"), "--squash-options", "-not-reproducible")
    assert r.returncode == 18 and "-not-reproducible" in r.stderr


# --- the smoke image (build issue), when the build helper's fixture is there -------------------


@pytest.fixture(scope="session")
def smoke(request: pytest.FixtureRequest) -> str:
    try:
        value: Any = request.getfixturevalue("smoke_image")
    except pytest.FixtureLookupError:
        pytest.skip("tests/conftest.py has no smoke_image fixture yet")
    if isinstance(value, str):
        return value
    return str(getattr(value, "tag", None) or value["tag"])


@contextlib.contextmanager
def _runtime_mounts(root: Path) -> Iterator[None]:
    """What enroot's fstab and Apptainer provide at run time: the host /dev and a /proc.
    (torch reads /dev/urandom at import; the artifact itself ships /dev empty.)"""
    subprocess.run(["mount", "--bind", "/dev", str(root / "dev")], check=True)
    try:
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
        try:
            yield
        finally:
            subprocess.run(["umount", str(root / "proc")], check=True)
    finally:
        subprocess.run(["umount", str(root / "dev")], check=True)


@pytest.mark.parametrize("fmt", ["sqsh", "sif"])
def test_smoke_image_python_imports_locked_packages(smoke: str, fmt: str, tmp_path: Path) -> None:
    """The extracted rootfs runs its own Python: torch imports, and the image's import check
    (every top-level module of every installed distribution) passes, as it did in the build."""
    attrs = _docker().images.get(smoke).attrs
    env = dict(e.split("=", 1) for e in attrs["Config"]["Env"])
    labels = attrs["Config"].get("Labels") or {}
    r = _export(smoke, fmt, tmp_path / f"smoke.{fmt}")
    assert r.lock_sha256 == labels.get("io.envbuilder.lock-sha256")
    offset = 0
    if fmt == "sif":
        part = sif.read_sif(r.path).primary_partition()
        assert part is not None
        offset = part.offset
    root = _unsquash(r.path, tmp_path / "root", offset)
    # sqsh: enroot sets the environment from /etc/environment; sif: the exec action sources env/*.sh
    action: tuple[str, ...] = () if fmt == "sqsh" else ("/.singularity.d/actions/exec",)
    run_env = env if fmt == "sqsh" else {"PATH": "/usr/bin:/bin"}
    code = ("import torch, sys, importlib.metadata as m; "
            "print(torch.__version__, m.version('causal-conv1d'), sys.prefix)")
    with _runtime_mounts(root):
        torch_version, _cc_version, sys_prefix = _chroot(root, *action, "python", "-c", code, env=run_env).split()
        check = root / "opt/envbuilder/tools/import_check.py"
        if check.exists():
            _chroot(root, *action, "python", "/opt/envbuilder/tools/import_check.py", env=run_env)
    assert torch_version.startswith("2.")
    assert sys_prefix == env.get("VIRTUAL_ENV", sys_prefix)


# --- native tools ----------------------------------------------------------------------------


def test_compare_listings_shows_what_each_layout_adds(wh_sqsh: ExportResult, wh_sif: ExportResult) -> None:
    from envbuilder.export.inspect import list_files
    from envbuilder.export.pipeline import compare_listings

    part = sif.read_sif(wh_sif.path).primary_partition()
    assert part is not None
    c = compare_listings(list_files(wh_sif.path, part.offset), list_files(wh_sqsh.path))
    assert "/.singularity.d/actions/exec" in c["only_ours"] and "/etc/rc" in c["only_native"]
    assert c["common"] > 30 and "/opt/opq/new1" not in c["only_ours"] + c["only_native"]


@pytest.mark.skipif(bool(shutil.which("apptainer")), reason="apptainer is installed: --compare would run it")
def test_compare_without_apptainer_exit_45_before_exporting(whiteout_image: str, tmp_path: Path) -> None:
    r = _cli("export", whiteout_image, "-o", str(tmp_path / "x.sif"), "--compare")
    assert r.returncode == 45 and "apptainer" in r.stderr
    assert _leftovers(tmp_path) == []


def test_sigkill_leaves_no_mksquashfs_and_the_next_export_cleans_up(big_image: str, tiny_image: str,
                                                                     tmp_path: Path) -> None:
    """kill -9 mid-export: PR_SET_PDEATHSIG takes mksquashfs down; the next export removes the leftovers."""
    from faultkit import alive, children_of

    out = tmp_path / "out"
    out.mkdir()
    target = out / "keep.sqsh"
    target.write_bytes(b"previous artifact")
    proc = subprocess.Popen([sys.executable, "-m", "envbuilder", "export", big_image, "-o", str(target),
                             "--no-snippets"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    squash: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not squash and proc.poll() is None:
        squash = [p for p in children_of(proc.pid) if _comm(p) == "mksquashfs"]
        time.sleep(0.05)
    assert squash, "mksquashfs never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(squash[0]):
        time.sleep(0.05)
    assert not alive(squash[0]), "mksquashfs outlived a SIGKILLed envbuilder"
    assert len(_leftovers(out)) > 1 and target.read_bytes() == b"previous artifact"
    again = subprocess.run([sys.executable, "-m", "envbuilder", "export", tiny_image, "-o", str(target),
                            "--no-snippets"], capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert _leftovers(out) == ["keep.sqsh"]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:  # it exited meanwhile
        return ""


def test_a_path_the_image_lacks_fails_the_export(whiteout_image: str, tmp_path: Path) -> None:
    """A path in the artifact that the image does not have (what a pseudo file or an action would add; the
    allow-list refuses those options, so here the image's expected tree loses one path instead) fails the
    check after the build, and nothing is written."""
    code = ("import sys; from envbuilder.export import verify; f = verify.tree_from_merged; "
            "verify.tree_from_merged = lambda t: dict(sorted(f(t).items())[:-1]); "
            "from envbuilder.cli import main; main(sys.argv[1:])")
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run([sys.executable, "-c", code, "export", whiteout_image, "-o", str(out / "x.sqsh"),
                        "--no-cache"], capture_output=True, text=True, check=False)
    assert r.returncode == 100, r.stderr
    assert ": in the artifact, not in the image" in r.stderr and "Traceback" not in r.stderr
    assert _leftovers(out) == []
