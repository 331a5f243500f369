"""The artifacts of one Megatron-Bridge release tag, parsed: what `matrix derive` reads.

    pyproject.toml             requires-python, upstream's [tool.uv] override-dependencies (with the
                               comment on each line, the only place upstream says why)
    uv.lock                    every version upstream locked (matrix/upstream_lock.py)
    3rdparty/Megatron-LM       the submodule commit -> megatron/core/package_info.py
    docker/Dockerfile.ci       the base image; docker/** its CUDA apt repository -> Ubuntu
    docs/versions1.json        Megatron-Bridge version -> NeMo Framework container
    docs/releases/software-versions.md   the published table of a container, when there is one

Pure: a tree comes in through the ReleaseTree protocol (matrix/release_source.py reads git
mirrors, clones and archives). A file that is missing or malformed is a ReleaseArtifactError
naming the file and the field.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder.errors import MatrixFileError, ReleaseArtifactError
from envbuilder.matrix.upstream_lock import PYPI, UpstreamPin, read_uv_lock, select_pins
from envbuilder.toml_cache import tomllib

MBRIDGE_REPO = "NVIDIA-NeMo/Megatron-Bridge"
MEGATRON_LM_REPO = "NVIDIA/Megatron-LM"
SUBMODULE = "3rdparty/Megatron-LM"
TABLE = "docs/releases/software-versions.md"
VERSIONS_JSON = "docs/versions1.json"
# Packages whose PyPI history a derivation needs besides upstream's closure: the row's components.
COMPONENT_NAMES = ("megatron-bridge", "megatron-core", "nemo-run", "transformer-engine", "transformer-engine-cu12",
                   "transformer-engine-cu13", "transformer-engine-torch", "mamba-ssm", "causal-conv1d", "torch",
                   "flash-attn", "nvidia-resiliency-ext")


def _same(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


class ReleaseTree(Protocol):
    """One tree of a repository at a ref (a tag or a commit)."""

    repo: str  # "NVIDIA-NeMo/Megatron-Bridge"
    ref: str  # "v0.6.0"

    def read(self, path: str) -> str | None:
        """A file's text, or None when the tree lacks it."""

    def submodule_commit(self, path: str) -> str | None:
        """The commit a submodule is pinned to, or None."""

    def paths(self, prefix: str) -> list[str]:
        """Every file path under a directory."""


def where(tree: ReleaseTree, path: str) -> str:
    return f"{tree.repo}:{path}@{tree.ref}"


def _need(tree: ReleaseTree, path: str) -> str:
    text = tree.read(path)
    if text is None:
        raise ReleaseArtifactError(f"{where(tree, path)} is missing: the release is partial",
                                   "derive from a complete release (a clone, mirror or source archive of the tag)",
                                   file=path, ref=tree.ref)
    return text


def _bad(tree: ReleaseTree, path: str, fld: str, why: str) -> ReleaseArtifactError:
    return ReleaseArtifactError(f"{where(tree, path)}: {fld}: {why}",
                                "check the release tag; a malformed release cannot be derived",
                                file=path, field=fld, ref=tree.ref)


@dataclass(frozen=True)
class ReleaseFiles:
    """The parsed artifacts of one release tag (everything derive reads from the tree itself)."""

    tree: ReleaseTree
    pyproject: dict[str, Any]
    pyproject_text: str
    uv_lock: dict[str, Any]
    uv_lock_bytes: bytes
    python: str  # .python-version: the interpreter upstream locks and tests with

    @property
    def version_in_tree(self) -> str | None:
        text = self.tree.read("src/megatron/bridge/package_info.py")
        return package_info_version(text, where(self.tree, "src/megatron/bridge/package_info.py")) if text else None

    def pins(self, versions: dict[str, str] | None = None) -> list[UpstreamPin]:
        try:
            return select_pins(self.uv_lock, self.python, where(self.tree, "uv.lock"), versions)
        except MatrixFileError as exc:
            raise ReleaseArtifactError(exc.cause, "check the release tag's uv.lock", file="uv.lock",
                                       field=exc.details.get("field"), ref=self.tree.ref) from exc

    def pypi_names(self) -> list[str]:
        """The packages whose PyPI history derive needs: the components, and every package upstream
        locked from somewhere else (another index, git) or forces to an exact version."""
        names = set(COMPONENT_NAMES)
        for p in self.pins():
            if p.origin != PYPI:
                names.add(p.name)
        for o in upstream_overrides(self):
            if o.requirement is not None:
                names.add(o.name)
        # what upstream installs from PyPI: a version the index dates after the cutoff needs its own cutoff
        return sorted(names | closure(self.uv_lock))


def read_release(tree: ReleaseTree) -> ReleaseFiles:
    text = _need(tree, "pyproject.toml")
    try:
        pyproject = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _bad(tree, "pyproject.toml", "(file)", f"not valid TOML ({exc})") from exc
    if not isinstance(pyproject.get("project"), dict):
        raise _bad(tree, "pyproject.toml", "project", "missing [project] table")
    lock_text = _need(tree, "uv.lock")
    try:
        lock = read_uv_lock(lock_text, where(tree, "uv.lock"))
    except MatrixFileError as exc:
        raise ReleaseArtifactError(exc.cause, "check the release tag's uv.lock", file="uv.lock",
                                   field=exc.details.get("field"), ref=tree.ref) from exc
    pinned = (tree.read(".python-version") or "").strip()
    python = pinned if re.fullmatch(r"3\.\d+", pinned) else \
        _python_from_range(str(pyproject["project"].get("requires-python", "")))
    if python is None:
        raise _bad(tree, "pyproject.toml", "project.requires-python",
                   "no .python-version and no upper bound to pick the interpreter upstream locks for")
    return ReleaseFiles(tree, pyproject, text, lock, lock_text.encode(), python)


def _python_from_range(spec: str) -> str | None:
    m = re.search(r"<\s*3\.(\d+)", spec)
    return f"3.{int(m.group(1)) - 1}" if m else None


def package_info_version(text: str, where_: str) -> str:
    """MAJOR.MINOR.PATCH + PRE_RELEASE of a package_info.py, read without running it."""
    try:
        module = ast.parse(text)
    except SyntaxError as exc:
        raise ReleaseArtifactError(f"{where_}: not Python ({exc.msg})", "check the release tag",
                                   file=where_, field="MAJOR") from exc
    values: dict[str, Any] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Constant):
            values[node.targets[0].id] = node.value.value
    missing = [k for k in ("MAJOR", "MINOR", "PATCH") if not isinstance(values.get(k), int)]
    if missing:
        raise ReleaseArtifactError(f"{where_}: no integer {', '.join(missing)}", "check the release tag",
                                   file=where_, field=missing[0])
    version = f"{values['MAJOR']}.{values['MINOR']}.{values['PATCH']}{values.get('PRE_RELEASE') or ''}"
    try:
        return str(Version(version))
    except InvalidVersion as exc:
        raise ReleaseArtifactError(f"{where_}: {version!r} is not a PEP 440 version", "check the release tag",
                                   file=where_, field="PRE_RELEASE") from exc


@dataclass(frozen=True)
class UpstreamOverride:
    text: str  # the requirement as upstream wrote it
    comment: str  # upstream's own comment on that line ("To address CVE-2026-21441")
    name: str
    requirement: Requirement | None  # None for a direct (git/url) reference
    url: str | None

    @property
    def never(self) -> bool:
        """Upstream's "never install" idiom: `NAME; sys_platform == 'never'`."""
        return self.requirement is not None and str(self.requirement.marker or "") == 'sys_platform == "never"'

    @property
    def security(self) -> bool:
        return bool(re.search(r"\bCVE\b|CVE-\d{4}-\d+", self.comment))


def upstream_overrides(files: ReleaseFiles) -> list[UpstreamOverride]:
    """[tool.uv] override-dependencies in upstream's order, each with the comment on its line
    (tomllib drops comments, and the comment is the only place upstream says why)."""
    tree, text = files.tree, files.pyproject_text
    listed = files.pyproject.get("tool", {}).get("uv", {}).get("override-dependencies", [])
    if not isinstance(listed, list) or not all(isinstance(x, str) for x in listed):
        raise _bad(tree, "pyproject.toml", "tool.uv.override-dependencies", "not a list of requirement strings")
    comments = _array_comments(text, "override-dependencies")
    out = []
    for item in listed:
        try:
            req = Requirement(item)
        except InvalidRequirement as exc:
            raise _bad(tree, "pyproject.toml", "tool.uv.override-dependencies", f"{item!r}: {exc}") from exc
        name = str(canonicalize_name(req.name))
        url = req.url
        out.append(UpstreamOverride(item, comments.get(item, ""), name, None if url else req, url))
    return out


def _array_comments(text: str, key: str) -> dict[str, str]:
    """item -> the `# comment` after it, for one multi-line array of strings."""
    m = re.search(rf"^{re.escape(key)}\s*=\s*\[(.*?)^\]", text, re.M | re.S)
    out: dict[str, str] = {}
    if not m:
        return out
    for line in m.group(1).splitlines():
        sm = re.match(r'\s*"((?:[^"\\]|\\.)*)"\s*,?\s*(?:#\s*(.*))?$', line)
        if sm:
            item = json.loads(f'"{sm.group(1)}"')
            comment = (sm.group(2) or "").strip()
            out[item] = comment
    return out


def container_of(version: str, docs: Iterable[ReleaseTree]) -> tuple[str, ReleaseTree] | None:
    """The container tag docs/versions1.json gives a Megatron-Bridge version ("0.6.0 (latest) · 26.08"),
    from the first tree (the release's own, then newer tags) that lists it."""
    for tree in docs:
        text = tree.read(VERSIONS_JSON)
        if text is None:
            continue
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _bad(tree, VERSIONS_JSON, "(file)", f"not valid JSON ({exc.msg})") from exc
        if not isinstance(entries, list):
            raise _bad(tree, VERSIONS_JSON, "(file)", "not a list of versions")
        for e in entries:
            if isinstance(e, dict) and _same(str(e.get("version", "")), version):
                m = re.search(r"·\s*(\d\d\.\d\d(?:\.\d\d)?)\s*$", str(e.get("name", "")))
                if m:
                    return m.group(1), tree
    return None


def software_table(release: str, docs: Iterable[ReleaseTree]) -> tuple[dict[str, str], ReleaseTree] | None:
    """The `## NeMo Framework RELEASE` table of docs/releases/software-versions.md (component ->
    version), from the first tree that has that section."""
    for tree in docs:
        text = tree.read(TABLE)
        if text is None:
            continue
        m = re.search(rf"^##\s+NeMo Framework {re.escape(release)}\s*$(.*?)(?=^##\s|\Z)", text, re.M | re.S)
        if not m:
            continue
        rows = {}
        for line in m.group(1).splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 2 and cells[0] and not set(cells[1]) <= set("-: ") and cells[0] != "Software Component":
                rows[cells[0]] = cells[1]
        if rows:
            return rows, tree
    return None


def closure(uv_lock: dict[str, Any]) -> set[str]:
    """Packages upstream's lock installs for Megatron-Bridge itself, its te/ssm/recipes extras and the
    megatron-core extras it asks for (edges marked never are not followed)."""
    by_name: dict[str, dict[str, Any]] = {}
    for entry in uv_lock["package"]:
        by_name.setdefault(str(canonicalize_name(str(entry.get("name", "")))), entry)
    todo: list[tuple[str, tuple[str, ...]]] = [("megatron-bridge", ("te", "ssm", "recipes"))]
    seen: set[str] = set()
    while todo:
        name, extras = todo.pop()
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        entry = by_name.get(name)
        if entry is None:
            continue
        deps = list(entry.get("dependencies") or [])
        for extra in extras:
            deps += list((entry.get("optional-dependencies") or {}).get(extra, []))
        for d in deps:
            if "never" in str(d.get("marker", "")):
                continue
            todo.append((str(canonicalize_name(str(d["name"]))), tuple(d.get("extra", ()))))
    return {k.split("[")[0] for k in seen}
