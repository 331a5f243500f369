"""Upstream's own lock of a release, as the row's fidelity target.

Megatron-Bridge commits a `uv.lock` at every release tag. `matrix derive` reads it once and keeps,
per package, the version upstream locked for the environment envbuilder targets (Linux x86_64,
the row's CPython) and where it came from; that extract lives in `matrices/upstream/` beside the
row that cites it. `lock` pins those versions wherever PyPI serves them, and `lock/fidelity.py`
compares a lock against the extract.

Pure: text in, typed values out. The extract is deterministic (sorted, no timestamps of ours).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder import toml_cache
from envbuilder.errors import MatrixFileError
from envbuilder.toml_cache import tomllib

EXTRACT_SCHEMA = 1
PYPI_SIMPLE = "https://pypi.org/simple"
PYPI = "pypi"  # origin of a package uv took from PyPI


@dataclass(frozen=True)
class UpstreamPin:
    """One package of upstream's lock: the version it locked and where that came from.

    origin: "pypi"; "index:URL" (another package index); "git:URL@COMMIT"; "editable:PATH"
    (a workspace member: Megatron-Bridge itself, megatron-core from its submodule); "url:URL";
    "path:PATH". `on_pypi`: PyPI serves this exact version; `pypi_upload`: its first upload
    there when the origin is not PyPI (a later one may be after the row's cutoff).
    """

    name: str
    version: str
    origin: str
    on_pypi: bool
    pypi_upload: str | None = None

    @property
    def kind(self) -> str:
        """pypi, index, git, editable, url or path."""
        return self.origin.split(":", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "version": self.version, "origin": self.origin}
        if self.origin != PYPI:
            out["on_pypi"] = self.on_pypi
            if self.pypi_upload:
                out["pypi_upload"] = self.pypi_upload
        return out


@dataclass(frozen=True)
class UpstreamLock:
    """The extract of upstream's uv.lock that a row cites (`upstream_lock` in the row)."""

    source: str  # repo:path@tag of the upstream file
    sha256: str  # of the upstream file's bytes
    environment: str  # what the extract selected: "linux x86_64 CPython 3.12"
    pins: tuple[UpstreamPin, ...]
    file: str = ""  # where the extract lives, relative to the matrices directory

    def get(self, name: str) -> UpstreamPin | None:
        key = canonicalize_name(name)
        for p in self.pins:
            if p.name == key:
                return p
        return None

    @property
    def by_name(self) -> dict[str, UpstreamPin]:
        return {p.name: p for p in self.pins}

    def to_toml(self) -> str:
        lines = [
            "# Upstream's lock of one release, the fidelity target of the matrix row that cites it.",
            f"# Extracted by `envbuilder matrix derive` from {self.source}: per package, the version",
            f"# upstream locked for {self.environment}. Do not edit: re-derive the row.",
            f"schema = {EXTRACT_SCHEMA}",
            f"source = {json.dumps(self.source)}",
            f"sha256 = {json.dumps(self.sha256)}",
            f"environment = {json.dumps(self.environment)}",
            "package = [",
        ]
        for p in self.pins:
            lines.append("  { " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in p.to_dict().items()) + " },")
        lines.append("]")
        return "\n".join(lines) + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)


def sha256_text(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def environment_label(python: str) -> str:
    return f"linux x86_64 CPython {python}"


def _marker_env(python: str) -> dict[str, str]:
    return {
        "implementation_name": "cpython", "implementation_version": f"{python}.0", "os_name": "posix",
        "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_release": "",
        "platform_system": "Linux", "platform_version": "", "python_full_version": f"{python}.0",
        "python_version": python, "sys_platform": "linux", "extra": "",
    }


def _applies(markers: list[str], python: str, where: str) -> bool:
    """Whether a package entry's resolution-markers include the target environment."""
    if not markers:
        return True
    env = _marker_env(python)
    for text in markers:
        try:
            if Marker(text).evaluate(env):
                return True
        except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName) as exc:
            raise MatrixFileError(f"{where}: resolution marker {text!r} cannot be read ({exc})",
                                  "derive from an unmodified uv.lock") from exc
    return False


def _origin(source: Any, where: str, name: str) -> str:
    if not isinstance(source, dict) or len(source) != 1:
        raise MatrixFileError(f"{where}: package {name!r} has no single 'source'", "derive from an unmodified uv.lock",
                              file=where, field=f"package.{name}.source")
    kind, value = next(iter(source.items()))
    value = str(value)
    if kind == "registry":
        return PYPI if value.rstrip("/") == PYPI_SIMPLE else f"index:{value}"
    if kind == "git":
        url, _, commit = value.partition("#")
        url = re.sub(r"\?rev=.*$", "", url)
        return f"git:{url}@{commit}" if commit else f"git:{url}"
    if kind in ("editable", "url", "path", "directory", "virtual"):
        return f"{'path' if kind in ('directory', 'virtual') else kind}:{value}"
    raise MatrixFileError(f"{where}: package {name!r} has an unknown source kind {kind!r}",
                          "derive with a newer envbuilder", file=where, field=f"package.{name}.source")


def read_uv_lock(text: str, where: str) -> dict[str, Any]:
    """Parsed uv.lock; MatrixFileError naming the file when it is not a uv lock."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixFileError(f"{where}: not valid TOML ({exc})", "derive from an unmodified uv.lock",
                              file=where) from exc
    if not isinstance(data.get("package"), list) or "version" not in data:
        raise MatrixFileError(f"{where}: not a uv.lock (no 'version' and [[package]] list)",
                              "derive from the release's uv.lock", file=where, field="package")
    return data


def select_pins(data: dict[str, Any], python: str, where: str, versions: dict[str, str] | None = None
                ) -> list[UpstreamPin]:
    """One pin per package for the target environment. `versions` fills workspace members uv.lock
    records without a version (editable megatron-bridge / megatron-core: their package_info.py)."""
    chosen: dict[str, UpstreamPin] = {}
    for entry in data["package"]:
        name = str(canonicalize_name(str(entry.get("name", ""))))
        if not name:
            raise MatrixFileError(f"{where}: a [[package]] without a name", "derive from an unmodified uv.lock",
                                  file=where, field="package.name")
        if not _applies(list(entry.get("resolution-markers") or []), python, where):
            continue
        origin = _origin(entry.get("source"), where, name)
        version = entry.get("version") or (versions or {}).get(name)
        if not version:
            continue  # a workspace member whose version nobody supplied: nothing to compare
        try:
            Version(str(version))
        except InvalidVersion as exc:
            raise MatrixFileError(f"{where}: package {name!r} version {version!r} is not a PEP 440 version",
                                  "derive from an unmodified uv.lock", file=where,
                                  field=f"package.{name}.version") from exc
        if name in chosen:
            raise MatrixFileError(f"{where}: package {name!r} has two versions for {environment_label(python)}",
                                  "derive from an unmodified uv.lock", file=where, field=f"package.{name}")
        chosen[name] = UpstreamPin(name, str(version), origin, on_pypi=origin == PYPI)
    return [chosen[k] for k in sorted(chosen)]


def load_extract(text: str, where: str) -> UpstreamLock:
    """The extract file a row cites (MatrixFileError naming the file and field when malformed)."""
    try:
        data = toml_cache.loads(text)  # parsed once per text, then cached: every matrix load reads each extract
    except tomllib.TOMLDecodeError as exc:
        raise MatrixFileError(f"{where}: not valid TOML ({exc})", "re-derive the row (envbuilder matrix derive)",
                              file=where) from exc
    if data.get("schema") != EXTRACT_SCHEMA:
        raise MatrixFileError(f"{where}: schema {data.get('schema')!r} is not {EXTRACT_SCHEMA}",
                              "re-derive the row with this envbuilder", file=where, field="schema")
    for key in ("source", "sha256", "environment"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise MatrixFileError(f"{where}: missing '{key}'", "re-derive the row (envbuilder matrix derive)",
                                  file=where, field=key)
    pins = []
    for i, p in enumerate(data.get("package", [])):
        if not isinstance(p, dict) or not all(isinstance(p.get(k), str) for k in ("name", "version", "origin")):
            raise MatrixFileError(f"{where}: [[package]] #{i + 1} needs name, version and origin",
                                  "re-derive the row (envbuilder matrix derive)", file=where, field="package")
        origin = str(p["origin"])
        pins.append(UpstreamPin(str(p["name"]), str(p["version"]), origin,
                                on_pypi=bool(p.get("on_pypi", origin == PYPI)),
                                pypi_upload=str(p["pypi_upload"]) if p.get("pypi_upload") else None))
    return UpstreamLock(str(data["source"]), str(data["sha256"]), str(data["environment"]), tuple(pins))
