"""Shared pieces of the fault corpus: an offline package index, a real lock directory, snapshots.

The offline index is a directory of tiny but real wheels (valid zip, METADATA, WHEEL, RECORD)
with the names and versions of the smoke row's stage-1 pins, served to the real `uv` through
UV_FIND_LINKS + UV_NO_INDEX. The wheels stand in for the real ones (torch alone is ~900 MB): what
the corpus tests is envbuilder's handling of the lock directory, not those packages' contents.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zipfile
from pathlib import Path

SMOKE_WHEELS = [("torch", "2.13.0"), ("einops", "0.8.1"), ("numpy", "2.4.6"), ("packaging", "26.2"),
                ("setuptools", "83.0.0"), ("wheel", "0.47.0"), ("ninja", "1.13.0"), ("tomli", "2.4.1")]
# the smoke row without its stage-2 sdist, so stage 1 resolves from the local wheels alone
OFFLINE_LOCK_ARGS = ["lock", "--nemo", "smoke", "--no-detect", "--set", "causal-conv1d==none"]


def make_wheel(directory: Path, name: str, version: str) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-py3-none-any.whl"
    files = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: envbuilder-tests\nRoot-Is-Purelib: true\n"
                                   "Tag: py3-none-any\n",
        f"{name.replace('-', '_')}/__init__.py": "",
    }
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{k},,\n" for k in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for key, text in sorted(files.items()):
            zf.writestr(zipfile.ZipInfo(key, (2020, 1, 1, 0, 0, 0)), text)
    return path


def offline_index(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, version in SMOKE_WHEELS:
        make_wheel(directory, name, version)
    return directory


def make_sdist(directory: Path, name: str, version: str) -> Path:
    """A tiny real sdist (PKG-INFO, setup.py and one .cu file, so the lock's CUDA-source check holds)."""
    import io
    import tarfile

    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}.tar.gz"
    files = {f"{dist}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Dist: torch\n",
             f"{dist}/setup.py": f"from setuptools import setup\nsetup(name={name!r}, version={version!r})\n",
             f"{dist}/csrc/kernel.cu": "__global__ void k() {}\n"}
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for key, text in sorted(files.items()):
            info = tarfile.TarInfo(key)
            info.size, info.mtime, info.mode = len(text.encode()), 1577836800, 0o644
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


def hashed_index(directory: Path) -> Path:
    """The smoke row's wheels and its stage-2 sdist (causal-conv1d) with an index.html whose links carry
    #sha256= fragments: served over HTTP, uv locks them with URLs and hashes, so `bundle` can fetch them."""
    offline_index(directory)
    make_sdist(directory, "causal-conv1d", "1.6.2.post1")
    links = "".join(f'<a href="{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">{p.name}</a>\n'
                    for p in sorted(directory.iterdir()) if p.suffix in (".whl", ".gz"))
    (directory / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return directory


def offline_env(index: Path, cache: Path) -> dict[str, str]:
    return {"UV_NO_INDEX": "1", "UV_FIND_LINKS": str(index), "UV_CACHE_DIR": str(cache), "UV_OFFLINE": "1"}


def snapshot(*roots: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mode of every file, and the mode of every directory, under each root (links as targets)."""
    out: dict[str, tuple[str, int]] = {}
    for root in roots:
        if root.is_symlink() or root.is_file():
            out[str(root)] = (_digest(root), stat.S_IMODE(os.lstat(root).st_mode))
            continue
        if not root.exists():
            out[str(root)] = ("absent", 0)
            continue
        out[str(root)] = ("dir", stat.S_IMODE(root.stat().st_mode))
        for dirpath, dirnames, filenames in os.walk(root):
            for d in dirnames:
                p = Path(dirpath) / d
                out[str(p)] = ("dir", stat.S_IMODE(os.lstat(p).st_mode))
            for f in filenames:
                p = Path(dirpath) / f
                out[str(p)] = (_digest(p), stat.S_IMODE(os.lstat(p).st_mode))
    return out


def _digest(p: Path) -> str:
    if p.is_symlink():
        return "link:" + os.readlink(p)
    return hashlib.sha256(p.read_bytes()).hexdigest()


def children_of(pid: int) -> list[int]:
    """Live (non-zombie) processes whose parent is `pid`, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def descendants_of(pid: int) -> set[int]:
    """Every live process below `pid`, whatever session it put itself in (from /proc)."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children_of(todo.pop()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def processes_in(directory: Path) -> list[int]:
    """Live processes whose working directory is `directory` or below it (uv lock runs in staging)."""
    prefix = str(directory)
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if (cwd == prefix or cwd.startswith(prefix + "/")) and alive(int(entry)):
            out.append(int(entry))
    return out
