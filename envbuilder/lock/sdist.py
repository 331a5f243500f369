"""What a source distribution holds, read from the archive itself (nothing is built).

A kernel package built from an sdist that ships no CUDA sources installs without its
kernels (PyPI's mamba-ssm 2.2.0 and causal-conv1d 1.2.2.post1 have no csrc/*.cu): the
package imports, and fails only when a model calls the missing extension. So the lock
reads the archive's file list before anything is built. PKG-INFO comes from the same
archive: the metadata the index serves for an sdist without running its setup.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tarfile
import urllib.parse
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from envbuilder.atomic import write_atomic
from envbuilder.lock.record import sha256_file
from envbuilder.tls import ssl_context

# nvcc inputs and the headers only CUDA code includes
CUDA_SOURCE_SUFFIXES = (".cu", ".cuh")


@dataclass(frozen=True)
class SdistContents:
    """One sdist's file list and its PKG-INFO metadata (None when the archive has none)."""

    filename: str
    files: tuple[str, ...]
    pkg_info: dict[str, list[str]] | None = field(default=None, compare=False)

    @property
    def cuda_sources(self) -> tuple[str, ...]:
        return tuple(f for f in self.files if f.lower().endswith(CUDA_SOURCE_SUFFIXES))

    def to_dict(self) -> dict[str, object]:
        return {"filename": self.filename, "files": len(self.files), "cuda_sources": len(self.cuda_sources)}


def read_sdist(path: Path) -> SdistContents:
    """File list (paths inside the archive, top folder included) and PKG-INFO of an sdist.

    Archives in envbuilder's own sdist cache get their reading remembered beside them (keyed by size
    and mtime): decompressing a 10-40 MB kernel sdist on every lock, even a `--check` that changes
    nothing, cost more than the uv run. Archives elsewhere are read every time (no side files in
    the user's directories).
    """
    path = Path(path)
    memo = path.with_name(path.name + ".contents.json")
    in_cache = cache_dir().resolve() in path.resolve().parents
    if in_cache:
        try:
            st = path.stat()
            d = json.loads(memo.read_text(encoding="utf-8"))
            if d["v"] == 1 and d["size"] == st.st_size and d["mtime_ns"] == st.st_mtime_ns:
                return SdistContents(d["filename"], tuple(d["files"]), d["pkg_info"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    contents = _read_archive(path)
    if in_cache:
        with contextlib.suppress(OSError):
            st = path.stat()
            write_atomic(memo, json.dumps({"v": 1, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                           "filename": contents.filename, "files": list(contents.files),
                                           "pkg_info": contents.pkg_info}))
    return contents


def _read_archive(path: Path) -> SdistContents:
    name = path.name
    if name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar")):
        with tarfile.open(path) as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
            files = tuple(sorted(m.name for m in members))
            info_member = _top_pkg_info(files)
            raw = None
            if info_member is not None:
                fh = tar.extractfile(info_member)
                raw = fh.read() if fh is not None else None
    elif name.endswith(".zip"):
        with zipfile.ZipFile(path) as zf:
            files = tuple(sorted(n for n in zf.namelist() if not n.endswith("/")))
            info_member = _top_pkg_info(files)
            raw = zf.read(info_member) if info_member is not None else None
    else:
        raise ValueError(f"{name} is not an sdist archive (.tar.gz or .zip)")
    return SdistContents(name, files, parse_pkg_info(raw) if raw is not None else None)


def _top_pkg_info(files: tuple[str, ...]) -> str | None:
    """`<name>-<version>/PKG-INFO`, not an *.egg-info copy deeper down."""
    for f in files:
        parts = f.split("/")
        if len(parts) == 2 and parts[1] == "PKG-INFO":
            return f
    return None


def parse_pkg_info(raw: bytes) -> dict[str, list[str]]:
    """Core-metadata headers, each a list (Requires-Dist and Dynamic repeat)."""
    import email.parser  # network and parsing modules are imported where used: start-up time of every lock

    msg = email.parser.BytesParser().parsebytes(raw, headersonly=True)
    out: dict[str, list[str]] = {}
    for key, value in msg.items():
        out.setdefault(key.lower(), []).append(" ".join(str(value).split()))
    return out


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envbuilder" / "sdists"


def fetch_sdist(url: str, sha256: str | None, ca_bundle: Path | None = None, cache: Path | None = None) -> Path:
    """Download an sdist once into a content-addressed cache, checking its sha256 when known.

    Raises OSError (network) or ValueError (hash mismatch); the caller turns those into its error.
    """
    cache = cache or cache_dir()
    filename = urllib.parse.unquote(url.rsplit("/", 1)[-1].split("#", 1)[0])
    if sha256:
        target = cache / sha256 / filename
        if target.is_file() and sha256_file(target) == sha256:
            return target
    from urllib.request import urlopen

    with urlopen(url, timeout=120, context=ssl_context(ca_bundle)) as resp:
        data = resp.read()
    digest = hashlib.sha256(data).hexdigest()
    if sha256 and digest != sha256:
        raise ValueError(f"{filename}: sha256 {digest} does not match the lock's {sha256}")
    target = cache / digest / filename
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, data)
    return target
