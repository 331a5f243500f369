"""The PEP 503 "simple" pages of a directory wheel cache, so pip and uv install from it directly.

    simple/index.html             one link per project
    simple/<project>/index.html   one link per wheel: ../../files/<sha256>/<wheel>#sha256=<sha256>

Written from the entries (entries/*.dsse.json) under an exclusive lock on the cache root, after the
publisher's own entry is in place: two publishers at once each rewrite the pages from every entry
there, and the last rewrite sees both entries. Same entries, same bytes. pip and uv check each
wheel's sha256 from the link; the entries' signatures are checked by envbuilder (`--cache`).
"""

from __future__ import annotations

import contextlib
import fcntl
import html
from collections.abc import Iterator
from pathlib import Path

from packaging.utils import canonicalize_name

from envbuilder.atomic import write_atomic
from envbuilder.kernels.wheelcache.entry import MAX_ENTRY_BYTES, peek_subject

LOCK_NAME = ".envbuilder-wheel-cache.lock"
_HEAD = ('<!DOCTYPE html>\n<html>\n<head>\n<meta name="pypi:repository-version" content="1.0">\n'
         "<title>{title}</title>\n</head>\n<body>\n")
_TAIL = "</body>\n</html>\n"


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """An exclusive flock on the cache root's lock file (works across hosts on NFSv4 and Lustre)."""
    with open(root / LOCK_NAME, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def projects(root: Path) -> dict[str, list[tuple[str, str]]]:
    """project -> sorted (wheel, sha256) of every readable entry under root/entries."""
    out: dict[str, set[tuple[str, str]]] = {}
    for path in sorted((root / "entries").glob("*.dsse.json")):
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            continue
        found = peek_subject(data) if len(data) <= MAX_ENTRY_BYTES else None
        if found is not None:
            package, _version, wheel, sha256 = found
            out.setdefault(str(canonicalize_name(package)), set()).add((wheel, sha256))
    return {p: sorted(w) for p, w in sorted(out.items())}


def render_root(names: list[str]) -> str:
    links = "".join(f'<a href="{html.escape(n)}/">{html.escape(n)}</a><br>\n' for n in names)
    return _HEAD.format(title="Simple index") + links + _TAIL


def render_project(name: str, wheels: list[tuple[str, str]]) -> str:
    links = "".join(f'<a href="../../files/{sha}/{html.escape(wheel)}#sha256={sha}">{html.escape(wheel)}</a><br>\n'
                    for wheel, sha in wheels)
    return _HEAD.format(title=f"Links for {html.escape(name)}") + links + _TAIL


def write_pages(root: Path) -> None:
    """Rewrite simple/ from the entries (each page replaced atomically, unchanged pages left alone)."""
    with locked(root):
        found = projects(root)
        simple = root / "simple"
        _put(simple / "index.html", render_root(list(found)))
        for name, wheels in found.items():
            _put(simple / name / "index.html", render_project(name, wheels))


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8") == text:
            return
    write_atomic(path, text, mode=0o644)
