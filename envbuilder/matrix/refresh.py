"""`matrix refresh`: which upstream releases the matrix does not know yet, and draft entries for them.

The index is read through PyPI's JSON API (or a recorded snapshot of it, for tests and offline
review). A version's date is its FIRST file upload: a later re-upload (torch 2.10.0's build -3
came on 2026-03-11) must not move it. Drafts are marked unverified: every fact in them is either
read from the index (a version, a date) or "unknown", for a person to confirm against the release's
own sources before it goes into the matrix.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from envbuilder.errors import NetworkError, SnapshotFileError
from envbuilder.jsonread import Fields, loads_json, read_object
from envbuilder.matrix.model import Matrix
from envbuilder.tls import ssl_context

# The packages a matrix row pins, and the row field holding each one's version.
WATCHED: dict[str, str] = {
    "nemo-toolkit": "pypi_version", "megatron-bridge": "megatron_bridge", "megatron-core": "megatron_core",
    "transformer-engine": "transformer_engine", "torch": "torch", "flash-attn": "flash_attn",
    "mamba-ssm": "mamba_ssm", "causal-conv1d": "causal_conv1d", "nemo-run": "nemo_run",
}
PYPI_JSON = "https://pypi.org/pypi/{name}/json"
UNVERIFIED = "unverified: drafted by `envbuilder matrix refresh` from {url}"

# package -> {version: first upload (RFC 3339)}
Snapshot = dict[str, dict[str, str]]


@dataclass(frozen=True)
class NewRelease:
    package: str
    version: str
    first_upload: str
    newest_known: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "version": self.version, "first_upload": self.first_upload,
                "newest_in_matrix": self.newest_known}


@dataclass
class RefreshResult:
    new: list[NewRelease] = field(default_factory=list)
    draft: str = ""  # TOML text: unverified draft rows and side-table entries
    source: str = ""  # "pypi" or the snapshot path

    @property
    def behind(self) -> bool:
        return bool(self.new)

    def to_dict(self) -> dict[str, Any]:
        by_pkg: dict[str, list[str]] = {}
        for n in self.new:
            by_pkg.setdefault(n.package, []).append(n.version)
        return {"behind": self.behind, "source": self.source, "new": [n.to_dict() for n in self.new],
                "by_package": by_pkg, "draft": self.draft}


def known_versions(matrix: Matrix) -> dict[str, set[str]]:
    """Every version of a watched package the matrix mentions (rows and side tables)."""
    known: dict[str, set[str]] = {p: set() for p in WATCHED}
    for row in matrix.releases:
        if row.test_only:
            continue
        for package, fld in WATCHED.items():
            fact = row.facts.get(fld)
            if fact is not None and fact.known:
                known[package].add(str(fact.value))
    known["torch"].update(matrix.torch)
    known["transformer-engine"].update(matrix.transformer_engine)
    for package, version in matrix.prebuilt_wheels:
        known.setdefault(package, set()).add(version)
    return known


def _final(version: str) -> Version | None:
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    return None if v.is_prerelease or v.is_devrelease else v


def first_uploads(pypi_json: dict[str, Any]) -> dict[str, str]:
    """version -> the earliest upload time of its files (versions without files are skipped)."""
    out: dict[str, str] = {}
    releases = pypi_json.get("releases")
    for version, files in (releases.items() if isinstance(releases, dict) else []):
        if not isinstance(files, list):
            continue
        times = [str(f.get("upload_time_iso_8601") or f.get("upload_time") or "") for f in files
                 if isinstance(f, dict) and not f.get("yanked")]
        times = [t for t in times if t]
        if times:
            out[version] = min(times)
    return out


#: PyPI's JSON for torch is a few MiB; nothing a package index serves for one project is near this
_PYPI_JSON_MAX = 64 << 20


def fetch_snapshot(packages: list[str], ca_bundle: Path | None = None,
                   progress: Callable[[str], None] = lambda _: None) -> Snapshot:
    ctx = ssl_context(ca_bundle)
    snap: Snapshot = {}
    for name in packages:
        progress(f"reading {PYPI_JSON.format(name=name)}")
        with urllib.request.urlopen(PYPI_JSON.format(name=name), timeout=60, context=ctx) as resp:
            what = f"the PyPI JSON of {name}"
            data = loads_json(resp.read(_PYPI_JSON_MAX + 1), what=what, error=NetworkError, max_bytes=_PYPI_JSON_MAX,
                              fix="check the index or proxy: it served something that is not PyPI's JSON API")
            snap[name] = first_uploads(Fields.of(data, what, NetworkError, "check the index or proxy").data)
    return snap


def load_snapshot(path: Path) -> Snapshot:
    """A recorded snapshot, every name and time typed (jsonread: size and depth limits, strict JSON)."""
    fix = "record one with `envbuilder matrix refresh --json` output's shape: {\"packages\": {NAME: {VERSION: TIME}}}"
    doc = read_object(path, what="refresh snapshot", error=SnapshotFileError, fix=fix, max_bytes=64 << 20)
    packages = doc.obj("packages")
    out: Snapshot = {}
    for name in packages:
        versions = packages.obj(name)
        out[name] = {v: versions.string(v, max_len=64) for v in versions}
        if len(name) > 200 or any(len(v) > 100 for v in out[name]):
            packages.fail(name, "holds a name or version longer than any PyPI one")
    return out


def find_new(matrix: Matrix, snapshot: Snapshot) -> list[NewRelease]:
    """Final releases newer (by version) than the newest the matrix knows, per watched package."""
    known = known_versions(matrix)
    out: list[NewRelease] = []
    for package in sorted(WATCHED):
        versions = snapshot.get(package, {})
        mine = [v for v in (_final(k) for k in known.get(package, ())) if v is not None]
        newest = max(mine) if mine else None
        for version, uploaded in sorted(versions.items(), key=lambda kv: _final(kv[0]) or Version("0")):
            v = _final(version)
            if v is None or (newest is not None and v <= newest):
                continue
            out.append(NewRelease(package, version, uploaded, str(newest) if newest else None))
    return out


def _fact(value: str, source: str) -> str:
    return "{ value = " + json.dumps(value) + ", source = " + json.dumps(source) + " }"


def draft_toml(new: list[NewRelease]) -> str:
    """Unverified drafts: a row per new Megatron-Bridge / NeMo release, side-table entries for torch and TE."""
    lines = ["# DRAFT from `envbuilder matrix refresh`: every fact is unverified. Confirm each against the",
             "# release's software-versions table, Dockerfiles and pyproject, then move it into the matrix.", ""]
    for n in new:
        url = f"https://pypi.org/project/{n.package}/{n.version}/"
        src = UNVERIFIED.format(url=url)
        unknown = _fact("unknown", f"{src} (not read yet)")
        if n.package in ("megatron-bridge", "nemo-toolkit"):
            key = "megatron_bridge" if n.package == "megatron-bridge" else "pypi_version"
            lines += ["# nemo.toml", "[[release]]",
                      ('release            = "unknown"  # the NeMo Framework release (container tag) shipping it'
                       if key == "megatron_bridge" else f'nemo               = "v{n.version}"'),
                      f"{key:<18} = {_fact(n.version, src)}",
                      f"release_date       = {_fact(n.first_upload, src + ' (first file upload time)')}"]
            for fld in ("container", "python", "torch", "torch_cuda_variant", "cuda", "cudnn", "transformer_engine",
                        "flash_attn", "mamba_ssm", "causal_conv1d", "megatron_core", "nemo_run", "lightning",
                        "exclude_newer", *(() if key == "pypi_version" else ("pypi_version",))):
                lines.append(f"{fld:<18} = {unknown}")
            lines.append("")
        elif n.package == "torch":
            lines += ["# torch.toml", "[[torch]]", f'version              = "{n.version}"',
                      f"cuda_variants        = {unknown}", f"pypi_default_variant = {unknown}",
                      f"python               = {unknown}", f"cxx11_abi            = {unknown}", ""]
        elif n.package == "transformer-engine":
            lines += ["# transformer_engine.toml", "[[transformer_engine]]", f'version          = "{n.version}"',
                      f"flash_attn       = {unknown}", ""]
        else:
            lines += [f"# {n.package} {n.version} (first upload {n.first_upload}): newer than every row's pin; "
                      f"no table lists {n.package} versions, so only rows that adopt it change", ""]
    return "\n".join(lines).rstrip() + "\n"


def refresh(matrix: Matrix, snapshot: Snapshot, source: str) -> RefreshResult:
    new = find_new(matrix, snapshot)
    return RefreshResult(new, draft_toml(new) if new else "", source)
