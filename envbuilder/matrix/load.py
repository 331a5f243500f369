"""Load and validate the matrix TOML files.

Validation is strict: a malformed file or a fact without a source is a MatrixFileError
naming the file, the line and the field, so a bad edit never reaches a resolver.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuilder import toml_cache
from envbuilder.errors import MatrixFileError
from envbuilder.matrix.model import (
    CONTAINER_PREFIX,
    CURATED,
    NONE,
    OPTIONAL_ROW_FACTS,
    REASONS,
    ROW,
    ROW_FACTS,
    STATUSES,
    UNKNOWN,
    BuildPackage,
    CudaRelease,
    CudaToolkit,
    DroppedPackage,
    Fact,
    Gpu,
    Location,
    Matrix,
    Note,
    OverrideDependency,
    PackageCutoff,
    PypiStub,
    PythonRequirement,
    Release,
    ToolkitFile,
    TorchInfo,
    TransformerEngineInfo,
    Unimportable,
)
from envbuilder.matrix.prebuilt import TORCH_KEYS, PrebuiltWheels
from envbuilder.matrix.upstream_lock import UpstreamLock, load_extract
from envbuilder.paths import matrices_dir
from envbuilder.toml_cache import tomllib

SCHEMA_VERSION = 1

# Facts every release row must carry, with the check applied to known values.
VERSION_FIELDS = (
    "pypi_version", "torch", "transformer_engine", "flash_attn", "mamba_ssm", "causal_conv1d",
    "megatron_core", "nemo_run", "lightning", "megatron_bridge", "nvidia_resiliency_ext",
)
RELEASE_FACTS = ROW_FACTS


class _File:
    """One TOML file's text and parsed data, with line lookup for error messages."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise MatrixFileError(f"{path}: cannot read ({exc.strerror})", "check the matrices directory") from exc
        try:
            self.data: dict[str, Any] = toml_cache.loads(self.text)  # parsed once per text, then cached
        except tomllib.TOMLDecodeError as exc:
            m = re.search(r"line (\d+)", str(exc))
            line = m.group(1) if m else "?"
            raise MatrixFileError(
                f"{path}:{line}: not valid TOML ({exc})", "fix the TOML syntax at that line"
            ) from exc
        self._lines = self.text.splitlines()
        self._headers: dict[str, list[int]] = {}

    def row_line(self, table: str, index: int) -> int:
        """Line (1-based) of the index-th `[[table]]` header."""
        found = self._headers.get(table)
        if found is None:  # every row asks: scan the file once per table
            header = re.compile(rf"\s*\[\[\s*{re.escape(table)}\s*\]\]")
            found = self._headers[table] = [i + 1 for i, line in enumerate(self._lines) if header.match(line)]
        return found[index] if 0 <= index < len(found) else 1

    def field_line(self, table: str, index: int, key: str) -> int:
        start = self.row_line(table, index)
        for i in range(start, len(self._lines)):
            line = self._lines[i]
            if re.match(r"\s*\[", line):
                break
            if re.match(rf"\s*{re.escape(key)}\s*=", line):
                return i + 1
        return start

    def error(self, table: str, index: int, key: str | None, msg: str, fix: str) -> MatrixFileError:
        line = self.field_line(table, index, key) if key else self.row_line(table, index)
        where = f"{self.path.name}:{line}"
        field = f" field '{key}'" if key else ""
        return MatrixFileError(f"{where}: [[{table}]] #{index + 1}{field}: {msg}", fix,
                               file=str(self.path), line=line, field=key)

    def rows(self, table: str) -> list[dict[str, Any]]:
        rows = self.data.get(table, [])
        if not isinstance(rows, list):
            raise MatrixFileError(f"{self.path.name}: '{table}' must be an array of tables ([[{table}]])",
                                  f"write each row as [[{table}]]")
        return rows


# --- value checks -------------------------------------------------------------------


def _check_version(v: Any) -> str | None:
    try:
        Version(str(v))
    except InvalidVersion:
        return f"'{v}' is not a PEP 440 version"
    return None


def _check_specifier(v: Any) -> str | None:
    try:
        SpecifierSet(str(v))
    except InvalidSpecifier:
        return f"'{v}' is not a PEP 440 specifier (like '>=3.10,<3.13')"
    return None


def _check_date(v: Any) -> str | None:
    try:
        datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    except ValueError:
        return f"'{v}' is not an RFC 3339 date"
    return None


def _check_cuda(v: Any) -> str | None:
    return None if re.fullmatch(r"\d+\.\d+", str(v)) else f"'{v}' is not a CUDA major.minor (like '12.8')"


def _check_str(v: Any) -> str | None:
    return None if isinstance(v, str) and v else "must be a non-empty string"


def _check_list(v: Any) -> str | None:
    return None if isinstance(v, list) else "must be a list"


def _check_bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def _check_number(v: Any) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) else "must be a number"


def _check_major(v: Any) -> str | None:
    return None if re.fullmatch(r"\d+", str(v)) else f"'{v}' is not a CUDA major version"


def _check_by_version(v: Any) -> str | None:
    if not isinstance(v, list):
        return "must be a list of { versions = SPECIFIER, requires_dist = [...] }"
    for entry in v:
        if not isinstance(entry, dict) or not isinstance(entry.get("requires_dist"), list):
            return "each entry needs versions and a requires_dist list"
        problem = _check_specifier(entry.get("versions", ""))
        if problem:
            return problem
        if not isinstance(entry.get("provides_extras", []), list):
            return "provides_extras must be a list of extra names"
    return None


_OBJECT_ID = re.compile(r"[0-9a-f]{40}")


def _check_git_tags(v: Any) -> str | None:
    if not isinstance(v, list):
        return "must be a list of { version, tag, commit, tree }"
    for entry in v:
        if not isinstance(entry, dict) or set(entry) != {"version", "tag", "commit", "tree"}:
            return "each entry has exactly version, tag, commit and tree"
        problem = _check_version(entry["version"])
        if problem:
            return problem
        for key in ("commit", "tree"):
            if not _OBJECT_ID.fullmatch(str(entry[key])):
                return f"{key} '{entry[key]}' is not a full 40-hex git object id"
    return None


def _check_sm(v: Any) -> str | None:
    return None if re.fullmatch(r"\d+\.\d+", str(v)) else f"'{v}' is not a compute capability (like '9.0')"


def _check_any(v: Any) -> str | None:
    return None


def _check_glibc(v: Any) -> str | None:
    return None if re.fullmatch(r"2\.\d+", str(v)) else f"'{v}' is not a glibc version (like '2.39')"


Check = Callable[[Any], "str | None"]

RELEASE_CHECKS: dict[str, Check] = {f: _check_version for f in VERSION_FIELDS}
RELEASE_CHECKS.update({
    "release_date": _check_date, "exclude_newer": _check_date, "python": _check_specifier,
    "cuda": _check_cuda, "container": _check_str, "torch_cuda_variant": _check_str, "cudnn": _check_str,
    "container_torch": _check_str, "container_cuda": _check_version, "container_cudnn": _check_str,
    "cuda_toolkit": _check_version, "glibc": _check_glibc,
})
# keys of a release row that are not facts or fix lists; anything else is a typo
ROW_KEYS = frozenset({
    "nemo", "release", "notes", "prefer", "test_only", "stage1_extra", "stage2_env", "packages", "nemo_extras",
    "drop_packages", "override_dependencies", "exclude_newer_package", "upstream_lock",
    *ROW_FACTS, *OPTIONAL_ROW_FACTS,
})


def _fact(f: _File, table: str, i: int, row: dict[str, Any], key: str, check: Check,
          required: bool = True) -> Fact | None:
    raw = row.get(key)
    if raw is None:
        if required:
            raise f.error(table, i, None, f"missing fact '{key}'",
                          f"add {key} = {{ value = \"...\", source = \"...\" }} (value \"unknown\" if unconfirmed)")
        return None
    if not isinstance(raw, dict) or "value" not in raw or "source" not in raw:
        raise f.error(table, i, key, "must be a table { value = ..., source = ... }",
                      "every fact cites its source: a URL or repo:path@tag")
    value, source = raw["value"], raw["source"]
    if not isinstance(source, str) or not source.strip():
        raise f.error(table, i, key, "has an empty source", "cite a URL or repo:path@tag")
    status = _status(f, table, i, key, raw)
    if value not in (UNKNOWN, NONE):
        problem = check(value)
        if problem:
            raise f.error(table, i, key, problem, "write a valid value, or \"unknown\"")
    return Fact(value, source, status)


def _status(f: _File, table: str, i: int, key: str, raw: dict[str, Any]) -> str:
    """A fact's or entry's `status` (curated when the file does not say)."""
    status = raw.get("status", CURATED)
    if status not in STATUSES:
        raise f.error(table, i, key, f"status {status!r} is not one of {', '.join(STATUSES)}",
                      "write status = \"derived\" (from the release's artifacts) or \"verified\" (a published "
                      "table agrees), or leave it out for a fact typed in by hand")
    return str(status)


def _reason(f: _File, table: str, i: int, key: str, raw: dict[str, Any]) -> str:
    reason = raw.get("reason", ROW)
    if reason not in REASONS:
        raise f.error(table, i, key, f"reason {reason!r} is not one of {', '.join(REASONS)}",
                      "write reason = \"row\", \"upstream\" or \"security\"")
    return str(reason)


def _plain(f: _File, table: str, i: int, row: dict[str, Any], key: str, check: Check) -> Any:
    if key not in row:
        raise f.error(table, i, None, f"missing '{key}'", f"add {key} = ...")
    problem = check(row[key])
    if problem:
        raise f.error(table, i, key, problem, "fix the value")
    return row[key]


# --- per-file loaders ----------------------------------------------------------------


def _load_releases(f: _File) -> list[Release]:
    out: list[Release] = []
    for i, row in enumerate(f.rows("release")):
        if ("nemo" in row) == ("release" in row):
            raise f.error("release", i, None, "needs exactly one key: nemo (a NeMo tag) or release (a NeMo "
                          "Framework release built around Megatron-Bridge)",
                          'write nemo = "v2.6.0" or release = "26.04"')
        unknown = sorted(set(row) - ROW_KEYS)
        if unknown:
            raise f.error("release", i, unknown[0], "is not a key of a release row",
                          "see matrices/README.md for the keys")
        nemo = _plain(f, "release", i, row, "nemo", _check_str) if "nemo" in row else None
        name = nemo or str(_plain(f, "release", i, row, "release", _check_release))
        facts: dict[str, Fact] = {}
        for key in (*RELEASE_FACTS, *OPTIONAL_ROW_FACTS):
            fact = _fact(f, "release", i, row, key, RELEASE_CHECKS.get(key, _check_any),
                         required=key in RELEASE_FACTS)
            if fact is not None:
                facts[key] = fact
        if nemo is None:
            if "megatron_bridge" not in facts:
                raise f.error("release", i, None, "a release row needs megatron_bridge",
                              "add megatron_bridge = { value = ..., source = ... }")
            container = facts["container"]
            if container.known and str(container.value) != f"{CONTAINER_PREFIX}{name}":
                raise f.error("release", i, "container", f"release {name} names another container",
                              f'write container = {{ value = "{CONTAINER_PREFIX}{name}", ... }}')
        notes = []
        for n in row.get("notes", []):
            if not isinstance(n, dict) or not n.get("text") or not n.get("source"):
                raise f.error("release", i, "notes", "each note needs text and source",
                              'write { severity = "warn", text = "...", source = "..." }')
            notes.append(Note(str(n.get("severity", "info")), str(n["text"]), str(n["source"]),
                              _status(f, "release", i, "notes", n)))
        env = row.get("stage2_env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise f.error("release", i, "stage2_env", "must be a table of string values", 'write { VAR = "value" }')
        extra = row.get("stage1_extra", [])
        if not isinstance(extra, list):
            raise f.error("release", i, "stage1_extra", "must be a list of requirement strings", "fix the list")
        names = row.get("packages", {})
        if not isinstance(names, dict) or not all(k in facts and isinstance(v, str) for k, v in names.items()):
            raise f.error("release", i, "packages", "must map release fields to PyPI names",
                          'write packages = { lightning = "pytorch-lightning" }')
        extras = row.get("nemo_extras", ["all"])
        if not isinstance(extras, list) or not all(isinstance(x, str) and x for x in extras):
            raise f.error("release", i, "nemo_extras", "must be a list of extra names", 'write ["all", "cu12"]')
        dropped = []
        for d in row.get("drop_packages", []):
            if not isinstance(d, dict) or not d.get("package") or not d.get("text") or not d.get("source"):
                raise f.error("release", i, "drop_packages", "each entry needs package, text and source",
                              'write { package = "name", text = "why", source = "..." }')
            dropped.append(DroppedPackage(str(d["package"]), str(d["text"]), str(d["source"]),
                                          _reason(f, "release", i, "drop_packages", d),
                                          _status(f, "release", i, "drop_packages", d)))
        forced = []
        for o in row.get("override_dependencies", []):
            if not isinstance(o, dict) or not o.get("requirement") or not o.get("text") or not o.get("source"):
                raise f.error("release", i, "override_dependencies", "each entry needs requirement, text and source",
                              'write { requirement = "name>=1.2", text = "why", source = "..." }')
            try:
                Requirement(str(o["requirement"]))
            except InvalidRequirement as exc:
                raise f.error("release", i, "override_dependencies",
                              f"'{o['requirement']}' is not a PEP 508 requirement ({exc})",
                              'write it like "nvidia-cublas>=13.2,<13.3"') from exc
            forced.append(OverrideDependency(str(o["requirement"]), str(o["text"]), str(o["source"]),
                                             _reason(f, "release", i, "override_dependencies", o),
                                             _status(f, "release", i, "override_dependencies", o)))
        cutoffs = []
        for c in row.get("exclude_newer_package", []):
            if not isinstance(c, dict) or not all(c.get(k) for k in ("package", "value", "text", "source")):
                raise f.error("release", i, "exclude_newer_package", "each entry needs package, value, text and source",
                              'write { package = "name", value = "2025-10-30T00:00:00Z", text = "why", '
                              'source = "..." }')
            problem = _check_date(c["value"])
            if problem:
                raise f.error("release", i, "exclude_newer_package", problem, "write an RFC 3339 UTC date")
            cutoffs.append(PackageCutoff(str(c["package"]), str(c["value"]), str(c["text"]), str(c["source"]),
                                         _status(f, "release", i, "exclude_newer_package", c)))
        out.append(Release.from_facts(
            name, facts, nemo=nemo, notes=tuple(notes), prefer=row.get("prefer"),
            test_only=bool(row.get("test_only", False)), stage1_extra=tuple(str(x) for x in extra),
            stage2_env=dict(env), location=Location(f.path.name, f.row_line("release", i)),
            package_names=dict(names), nemo_extras=tuple(extras), drop_packages=tuple(dropped),
            override_dependencies=tuple(forced), exclude_newer_package=tuple(cutoffs),
            upstream_lock=_upstream_lock(f, i, row),
        ))
    return out


def _upstream_lock(f: _File, i: int, row: dict[str, Any]) -> UpstreamLock | None:
    """The extract of upstream's lock a row cites (`upstream_lock = { value = FILE, source, status }`,
    FILE relative to the matrices directory); its source must be the one the row cites."""
    fact = _fact(f, "release", i, row, "upstream_lock", _check_str, required=False)
    if fact is None or not fact.known:
        return None
    rel = str(fact.value)
    path = (f.path.parent / rel).resolve()
    if f.path.parent.resolve() not in path.parents:
        raise f.error("release", i, "upstream_lock", f"{rel!r} is outside the matrices directory",
                      "write a path like upstream/megatron-bridge-0.6.0.toml")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise f.error("release", i, "upstream_lock", f"cannot read {rel} ({exc.strerror})",
                      "re-derive the row (envbuilder matrix derive --write)") from exc
    extract = load_extract(text, str(path))
    if not fact.source.startswith(extract.source):
        raise f.error("release", i, "upstream_lock", f"{rel} is the extract of {extract.source}, but the row cites "
                      f"{fact.source.split(' ')[0]}", "re-derive the row (envbuilder matrix derive --write)")
    return UpstreamLock(extract.source, extract.sha256, extract.environment, extract.pins, rel)


def _check_release(v: Any) -> str | None:
    return None if re.fullmatch(r"\d\d\.\d\d(\.\d\d)?", str(v)) else f"'{v}' is not a release tag (like '26.04')"


def _load_cuda(f: _File) -> tuple[list[CudaRelease], dict[int, Fact], Note | None]:
    releases = []
    for i, row in enumerate(f.rows("release")):
        fact = _fact(f, "release", i, row, "min_driver_linux", _check_version)
        assert fact is not None
        releases.append(CudaRelease(
            cuda=_plain(f, "release", i, row, "cuda", _check_cuda),
            version=str(_plain(f, "release", i, row, "version", _check_version)),
            label=str(row.get("label", row.get("version"))), min_driver_linux=fact,
        ))
    minor: dict[int, Fact] = {}
    for i, row in enumerate(f.rows("minor_compat")):
        major = _plain(f, "minor_compat", i, row, "major", _check_major)
        key = "min_driver_linux" if "min_driver_linux" in row else "min_driver"
        fact = _fact(f, "minor_compat", i, row, key, _check_version)
        assert fact is not None
        minor[int(major)] = fact
    fwd = f.data.get("forward_compat")
    note = None
    if isinstance(fwd, dict):
        text = fwd.get("text")
        if isinstance(text, dict):  # written as a fact
            note = Note("info", str(text.get("value", "")), str(text.get("source", "")))
        elif text and fwd.get("source"):
            note = Note("info", str(text), str(fwd["source"]))
    return releases, minor, note


def _load_torch(f: _File) -> dict[str, TorchInfo]:
    out = {}
    for i, row in enumerate(f.rows("torch")):
        version = str(_plain(f, "torch", i, row, "version", _check_version))
        facts = {k: _fact(f, "torch", i, row, k, c) for k, c in (
            ("cuda_variants", _check_list), ("pypi_default_variant", _check_str),
            ("python", _check_specifier), ("cxx11_abi", _check_bool))}
        out[version] = TorchInfo(version, **facts)  # type: ignore[arg-type]
    return out


def _load_te(f: _File) -> dict[str, TransformerEngineInfo]:
    out = {}
    for i, row in enumerate(f.rows("transformer_engine")):
        version = str(_plain(f, "transformer_engine", i, row, "version", _check_version))
        fa = _fact(f, "transformer_engine", i, row, "flash_attn", _check_specifier)
        assert fa is not None
        out[version] = TransformerEngineInfo(
            version, fa,
            _fact(f, "transformer_engine", i, row, "pypi_parts", _check_list, required=False),
            _fact(f, "transformer_engine", i, row, "sdist_only_parts", _check_list, required=False),
        )
    return out


def _load_te_loader(f: _File) -> Fact | None:
    rows = f.rows("loader")
    if len(rows) > 1:
        raise f.error("loader", 1, None, "more than one [[loader]] table", "keep one")
    return _fact(f, "loader", 0, rows[0], "pip_libraries_since", _check_version) if rows else None


BUILD_FACTS: dict[str, Check] = {
    "sdist_only": _check_bool, "imports_torch_at_build": _check_bool, "force_build_env": _check_str,
    "skip_cuda_build_env": _check_str, "prebuilt_wheel_url": _check_str, "requires_dist": _check_list,
    "build_requires": _check_list, "min_sm": _check_sm, "requires_dist_by_version": _check_by_version,
    "git_repo": _check_str, "git_tags": _check_git_tags,
}


def _load_build_packages(f: _File) -> dict[str, BuildPackage]:
    out = {}
    for i, row in enumerate(f.rows("package")):
        name = str(_plain(f, "package", i, row, "name", _check_str))
        facts = {}
        for key, check in BUILD_FACTS.items():
            fact = _fact(f, "package", i, row, key, check, required=key in ("requires_dist", "build_requires"))
            if fact is not None:
                facts[key] = fact
        out[name] = BuildPackage(name, facts)
    return out


def _load_python_requirements(f: _File) -> list[PythonRequirement]:
    out = []
    for i, row in enumerate(f.rows("requirement")):
        out.append(PythonRequirement(
            package=str(_plain(f, "requirement", i, row, "package", _check_str)),
            versions=str(_plain(f, "requirement", i, row, "versions", _check_specifier)),
            python=str(_plain(f, "requirement", i, row, "python", _check_specifier)),
            source=str(_plain(f, "requirement", i, row, "source", _check_str)),
        ))
    return out


def _load_unimportable(f: _File) -> list[Unimportable]:
    out = []
    for i, row in enumerate(f.rows("module")):
        out.append(Unimportable(**{k: str(_plain(f, "module", i, row, k, check)) for k, check in (
            ("module", _check_str), ("package", _check_str), ("versions", _check_specifier),
            ("python", _check_specifier), ("reason", _check_str), ("source", _check_str))}))
    return out


def _load_pypi_stubs(f: _File) -> list[PypiStub]:
    return [PypiStub(**{k: str(_plain(f, "stub", i, row, k, _check_str)) for k in (
        "package", "version", "index_url", "instead", "instead_uploaded", "source")})
        for i, row in enumerate(f.rows("stub"))]


def load_pypi_stubs(directory: Path | None = None) -> tuple[PypiStub, ...]:
    """matrices/pypi_stubs.toml alone (what `matrix derive` needs of the matrix)."""
    p = (Path(directory) if directory else matrices_dir()) / "pypi_stubs.toml"
    if not p.exists():
        return ()
    f = _File(p)
    _schema_check(f)
    return tuple(_load_pypi_stubs(f))


def _load_gpus(f: _File) -> list[Gpu]:
    out = []
    checks: dict[str, Check] = {"sm": _check_sm, "memory_gib": _check_number, "datacenter": _check_bool,
                                "bf16_dense_tflops": _check_number}
    for i, row in enumerate(f.rows("gpu")):
        name = str(_plain(f, "gpu", i, row, "name", _check_str))
        aliases = row.get("aliases", [])
        if isinstance(aliases, dict):  # aliases written as a fact
            aliases = aliases.get("value", [])
        facts = {}
        for key, check in checks.items():
            fact = _fact(f, "gpu", i, row, key, check, required=key == "sm")
            if fact is not None:
                facts[key] = fact
        out.append(Gpu(name, tuple(str(a) for a in aliases), facts))
    return out


def _check_combos(v: Any) -> str | None:
    # the torch part is MAJOR.MINOR, or a full torch.__version__ ("2.8.0+cu129") for torch_key = "local"
    combo = re.compile(r"\d+\.\d+\|\d+\.\d+(\.\d+(\+[a-z0-9.]+)?)?\|\d+\|(TRUE|FALSE)")
    if not isinstance(v, list) or not all(isinstance(c, str) and combo.fullmatch(c) for c in v):
        return 'must be a list of "PYTHON|TORCH|CUDA_MAJOR|TRUE|FALSE" strings (TORCH: MAJOR.MINOR or a full version)'
    return None


def _check_torch_key(v: Any) -> str | None:
    return None if v in TORCH_KEYS else f"'{v}' is not one of {', '.join(TORCH_KEYS)}"


def _check_table(v: Any) -> str | None:
    return None if isinstance(v, dict) and all(isinstance(x, str) for x in v.values()) else "must be a table of strings"


def _load_prebuilt(f: _File) -> dict[tuple[str, str], PrebuiltWheels]:
    out: dict[tuple[str, str], PrebuiltWheels] = {}
    for i, row in enumerate(f.rows("wheels")):
        package = str(_plain(f, "wheels", i, row, "package", _check_str))
        version = str(_plain(f, "wheels", i, row, "version", _check_version))
        combos = _fact(f, "wheels", i, row, "combos", _check_combos)
        tags = _fact(f, "wheels", i, row, "name_cuda_tags", _check_table)
        assert combos is not None and tags is not None
        if (package, version) in out:
            raise f.error("wheels", i, None, f"duplicate entry for {package} {version}", "keep one entry per release")
        key = _fact(f, "wheels", i, row, "torch_key", _check_torch_key, required=False)
        out[(package, version)] = PrebuiltWheels(package, version, combos, tags,
                                                  str(key.value) if key is not None else TORCH_KEYS[0])
    return out


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _check_files(v: Any) -> str | None:
    if not isinstance(v, list) or not v:
        return "must be a non-empty list of { kind, url, sha256, source } tables"
    for e in v:
        if not isinstance(e, dict) or set(e) != {"kind", "url", "sha256", "source"}:
            return "every file is a table with exactly kind, url, sha256 and source"
        if e["kind"] not in ("deb", "wheel") or not str(e["url"]).startswith("https://") \
                or not _SHA256.fullmatch(str(e["sha256"])) or not str(e["source"]).strip():
            return f"bad file entry {e.get('url')!r}: kind deb|wheel, an https url, a sha256 and a source"
    return None


def _load_toolkits(f: _File) -> tuple[CudaToolkit, ...]:
    out: list[CudaToolkit] = []
    for i, row in enumerate(f.rows("toolkits")):
        cuda = str(_plain(f, "toolkits", i, row, "cuda", _check_cuda))
        release = str(_plain(f, "toolkits", i, row, "release", _check_version))
        nvcc = str(_plain(f, "toolkits", i, row, "nvcc", _check_version))
        source = str(_plain(f, "toolkits", i, row, "source", _check_str))
        files = _plain(f, "toolkits", i, row, "files", _check_files)
        if any(t.cuda == cuda for t in out):
            raise f.error("toolkits", i, "cuda", f"duplicate toolkit for CUDA {cuda}", "keep one per major.minor")
        out.append(CudaToolkit(cuda, release, nvcc, source,
                               tuple(ToolkitFile(e["kind"], e["url"], e["sha256"], e["source"]) for e in files)))
    return tuple(sorted(out, key=lambda t: tuple(int(x) for x in t.cuda.split(".")), reverse=True))


def _schema_check(f: _File) -> None:
    version = f.data.get("schema", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise MatrixFileError(f"{f.path.name}: schema {version} is not supported (expected {SCHEMA_VERSION})",
                              "upgrade envbuilder or convert the matrix file")


def load_matrix(directory: Path | None = None) -> Matrix:
    """Load every matrix file in `directory` (default: the repository's matrices/)."""
    d = Path(directory) if directory else matrices_dir()
    if not (d / "nemo.toml").exists() and not (d / "smoke.toml").exists():
        raise MatrixFileError(f"{d}/nemo.toml not found", "set ENVBUILDER_MATRICES to a matrices directory")

    def opt(name: str) -> _File | None:
        p = d / name
        if not p.exists():
            return None
        f = _File(p)
        _schema_check(f)
        return f

    releases: list[Release] = []
    for name in ("nemo.toml", "mbridge.toml", "smoke.toml"):
        f = opt(name)
        if f:
            releases.extend(_load_releases(f))
    seen: set[str] = set()
    for r in releases:
        if r.name in seen:
            raise MatrixFileError(f"{r.location}: duplicate row '{r.name}'", "keep one row per tag or release")
        seen.add(r.name)
    cuda_f = opt("cuda.toml")
    cuda, minor, fwd = _load_cuda(cuda_f) if cuda_f else ([], {}, None)
    torch_f, te_f = opt("torch.toml"), opt("transformer_engine.toml")
    bp_f, pr_f, gpu_f = opt("build_packages.toml"), opt("python_requirements.toml"), opt("gpus.toml")
    wheels_f, toolkits_f = opt("prebuilt_wheels.toml"), opt("cuda_toolkits.toml")
    unimportable_f, stubs_f = opt("unimportable.toml"), opt("pypi_stubs.toml")
    return Matrix(
        releases=tuple(releases),
        cuda_releases=tuple(cuda),
        minor_compat=minor,
        forward_compat=fwd,
        torch=_load_torch(torch_f) if torch_f else {},
        transformer_engine=_load_te(te_f) if te_f else {},
        build_packages=_load_build_packages(bp_f) if bp_f else {},
        python_requirements=tuple(_load_python_requirements(pr_f)) if pr_f else (),
        gpus=tuple(_load_gpus(gpu_f)) if gpu_f else (),
        prebuilt_wheels=_load_prebuilt(wheels_f) if wheels_f else {},
        cuda_toolkits=_load_toolkits(toolkits_f) if toolkits_f else (),
        te_loads_pip_libraries_since=_load_te_loader(te_f) if te_f else None,
        unimportable=tuple(_load_unimportable(unimportable_f)) if unimportable_f else (),
        pypi_stubs=tuple(_load_pypi_stubs(stubs_f)) if stubs_f else (),
    )
