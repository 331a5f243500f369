"""Check an exported artifact against the image: every path there, every symlink resolving alike.

The squashfs is read back with `unsquashfs -lln` (what the runtimes will mount), so a tool that
rewrites link targets on the way in (Debian 12's mksquashfs 4.5.1 strips the leading `/` and `../`
from PAX link targets) is caught here, not on a cluster. `export` runs it on the finished
file before renaming it into place; `inspect --deep` runs it on a file and the image it names.

A symlink resolves alike when its target string is the same and following it (absolute targets
from the artifact's root, as inside the container) reaches the same path, existing or not.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder import procs
from envbuilder.errors import ArtifactImageMismatchError, ToolMissingError
from envbuilder.export.flatten import MergedTree, ordered_entries

MAX_HOPS = 40  # the kernel's limit on symlinks followed in one lookup
SHOWN = 5


@dataclass(frozen=True)
class Node:
    kind: str  # d f l c b p s (hard links are f: the squashfs stores them as one inode)
    target: str = ""


FileTree = dict[str, Node]


def tree_from_merged(tree: MergedTree) -> FileTree:
    """The paths export writes for `tree` (device node contents dropped, parents filled in)."""
    out: FileTree = {}
    for entry in ordered_entries(tree):
        info = entry.info
        if info.issym():
            out[entry.path] = Node("l", info.linkname)
        elif info.isdir():
            out[entry.path] = Node("d")
        elif info.isreg() or info.islnk():
            out[entry.path] = Node("f")
        elif info.ischr():
            out[entry.path] = Node("c")
        elif info.isblk():
            out[entry.path] = Node("b")
        elif info.isfifo():
            out[entry.path] = Node("p")
        else:
            out[entry.path] = Node("?")
    return out


_KINDS = {"-": "f", "d": "d", "l": "l", "c": "c", "b": "b", "p": "p", "s": "s"}


def tree_from_listing(lines: Iterable[bytes]) -> FileTree:
    """Parse `unsquashfs -lln -d ''` lines: `mode uid/gid size date time /path[ -> target]`."""
    out: FileTree = {}
    for raw in lines:
        line = raw.decode("utf-8", "surrogateescape")
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[0]:
            continue
        kind = _KINDS.get(parts[0][0], "?")
        name = parts[5]
        target = ""
        if kind == "l":
            name, _, target = name.partition(" -> ")
        path = name.lstrip("/")
        if path:
            out[path] = Node(kind, target)
    return out


def list_tree(artifact: Path, offset: int = 0) -> FileTree:
    tool = shutil.which("unsquashfs")
    if not tool:
        raise ToolMissingError("unsquashfs is not on PATH", "install squashfs-tools")
    cmd = [tool, "-lln", *(["-o", str(offset)] if offset else []), "-d", "", str(artifact)]
    proc = procs.run(cmd, capture_output=True, check=False)
    if proc.returncode != 0:
        raise ArtifactImageMismatchError(
            f"{artifact}: unsquashfs cannot list it: {proc.stderr.decode(errors='replace').strip()[-300:]}",
            "export the artifact again",
        )
    return tree_from_listing(proc.stdout.splitlines())


def resolve(tree: FileTree, path: str) -> tuple[str, bool]:
    """Follow `path` through the tree's symlinks: (final path, whether it exists)."""
    pending = [p for p in path.split("/") if p]
    done: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = "/".join([*done, part])
        node = tree.get(here)
        if node is not None and node.kind == "l":
            hops += 1
            if hops > MAX_HOPS:
                return here, False  # a loop, as ELOOP
            if node.target.startswith("/"):
                done = []
            pending = [p for p in node.target.split("/") if p] + pending
            continue
        done.append(part)
    final = "/".join(done)
    return final, final == "" or final in tree


@dataclass
class VerifyReport:
    paths_checked: int = 0
    links_checked: int = 0
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"paths_checked": self.paths_checked, "links_checked": self.links_checked,
                "problems": self.problems[:SHOWN], "problem_count": len(self.problems)}


def compare_trees(expected: FileTree, actual: FileTree) -> VerifyReport:
    """Every expected path in `actual` with its kind, every symlink with its target and resolution, and no
    path in `actual` that `expected` lacks."""
    report = VerifyReport()
    for path, node in sorted(expected.items()):
        report.paths_checked += 1
        got = actual.get(path)
        if got is None:
            report.problems.append(f"/{path}: missing from the artifact")
            continue
        if got.kind != node.kind:
            report.problems.append(f"/{path}: kind {got.kind!r} in the artifact, {node.kind!r} in the image")
            continue
        if node.kind != "l":
            continue
        report.links_checked += 1
        if got.target != node.target:
            report.problems.append(f"/{path} -> {got.target!r} in the artifact, -> {node.target!r} in the image")
            continue
        want, have = resolve(expected, path), resolve(actual, path)
        if want != have:
            report.problems.append(f"/{path} resolves to /{have[0]} (exists: {have[1]}) in the artifact, "
                                   f"/{want[0]} (exists: {want[1]}) in the image")
    # and nothing the image does not have (a pseudo file, an action's output, a path added on the way)
    for path in sorted(set(actual) - set(expected)):
        report.problems.append(f"/{path}: in the artifact, not in the image")
    return report


def require_match(artifact: Path, report: VerifyReport) -> None:
    if report.problems:
        shown = "; ".join(report.problems[:SHOWN])
        more = f" (+{len(report.problems) - SHOWN} more)" if len(report.problems) > SHOWN else ""
        raise ArtifactImageMismatchError(
            f"{artifact}: {len(report.problems)} path(s) differ from the image: {shown}{more}",
            "export it again with this envbuilder (it writes a GNU tar that mksquashfs reads intact); "
            "if it persists, report your mksquashfs version",
            problems=report.problems[:50],
        )


def verify_artifact(artifact: Path, expected: FileTree, offset: int = 0) -> VerifyReport:
    """Raise ArtifactImageMismatchError unless the artifact holds `expected` exactly; else the counts."""
    report = compare_trees(expected, list_tree(artifact, offset))
    require_match(artifact, report)
    return report

