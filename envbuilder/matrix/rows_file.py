"""Writing a derived row into matrices/mbridge.toml, all or nothing.

The row replaces the one with the same release key (or is added; rows stay sorted by release).
What a person wrote into a derived row survives a re-derivation: a fact whose status is curated
(a correction typed in by hand) wins over the derived one, and notes, overrides, drops and
cutoffs without `status = "derived"` are kept. The new matrix is loaded from a scratch copy of
the matrices directory before anything is written, so a row that does not validate never lands;
then the upstream-lock extract and the rows file are each replaced atomically. A new row gets a note
naming the fixes a person added to the row before it, which no derivation can know.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from envbuilder.atomic import write_atomic
from envbuilder.errors import MatrixFileError
from envbuilder.matrix.derive import DerivedRow
from envbuilder.matrix.model import CURATED, DERIVED, DroppedPackage, Fact, Note, OverrideDependency, PackageCutoff
from envbuilder.toml_cache import tomllib

ROWS_FILE = "mbridge.toml"
HEADER = """\
# Megatron-Bridge rows (schema: matrices/README.md), keyed by release: the NeMo Framework container tag.
# Written by `envbuilder matrix derive --mbridge VERSION --write` from the release tag's own artifacts;
# each fact's status says whether a published software-versions table confirms it (verified) or only
# the release's artifacts do (derived). Edit a fact by hand and set its status to "curated" (or drop
# the status): a re-derivation keeps it, and keeps every note, override and drop not marked derived.
schema = 1
"""


ROW_ORDER = (
    "megatron_bridge", "release_date", "pypi_version", "container", "container_torch", "container_cuda",
    "container_cudnn", "python", "glibc", "torch", "torch_cuda_variant", "cuda", "cuda_toolkit", "cudnn",
    "transformer_engine", "flash_attn", "mamba_ssm", "causal_conv1d", "megatron_core", "nemo_run",
    "nvidia_resiliency_ext", "lightning", "exclude_newer", "upstream_lock",
)


def _s(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def fact_toml(f: Fact) -> str:
    return f"{{ value = {_s(f.value)}, status = {_s(f.status)}, source = {_s(f.source)} }}"


def entries_toml(key: str, entries: list[dict[str, str]]) -> list[str]:
    if not entries:
        return []
    lines = [f"{key} = ["]
    for e in entries:
        lines.append("  { " + ", ".join(f"{k} = {_s(v)}" for k, v in e.items()) + " },")
    return [*lines, "]"]


def row_toml(row: DerivedRow) -> str:
    lines = ["[[release]]", f"release            = {_s(row.release)}"]
    for key in ROW_ORDER:
        if key in row.facts:
            lines.append(f"{key:<18} = {fact_toml(row.facts[key])}")
    lines += entries_toml("drop_packages", [
        {"package": d.package, "reason": d.reason, "status": d.status, "text": d.text, "source": d.source}
        for d in row.drop_packages])
    lines += entries_toml("override_dependencies", [
        {"requirement": o.requirement, "reason": o.reason, "status": o.status, "text": o.text, "source": o.source}
        for o in row.override_dependencies])
    lines += entries_toml("exclude_newer_package", [
        {"package": c.package, "value": c.value, "status": c.status, "text": c.text, "source": c.source}
        for c in row.exclude_newer_package])
    lines += entries_toml("notes", [
        {"severity": n.severity, "status": n.status, "text": n.text, "source": n.source} for n in row.notes])
    return "\n".join(lines) + "\n"


def _blocks(text: str) -> tuple[str, list[str]]:
    """(header, [[release]] blocks) of a rows file."""
    parts = re.split(r"(?m)^(?=\[\[release\]\]\s*$)", text)
    return parts[0], [p.rstrip() + "\n" for p in parts[1:]]


def _key(block: str) -> str:
    data = tomllib.loads(block)
    rows = data.get("release", [])
    return str(rows[0].get("release") or rows[0].get("nemo") or "") if rows else ""


def _old_row(text: str, release: str) -> dict[str, Any] | None:
    for block in _blocks(text)[1]:
        if _key(block) == release:
            rows: list[dict[str, Any]] = tomllib.loads(block)["release"]
            return rows[0]
    return None


def keep_curated(row: DerivedRow, old: dict[str, Any] | None) -> DerivedRow:
    """The derived row with what a person wrote into the previous version of it."""
    if old is None:
        return row
    facts = dict(row.facts)
    for key, raw in old.items():
        if isinstance(raw, dict) and "value" in raw and "source" in raw and raw.get("status", CURATED) == CURATED:
            facts[key] = Fact(raw["value"], str(raw["source"]), CURATED)

    def kept(key: str) -> list[dict[str, Any]]:
        return [e for e in old.get(key, []) if isinstance(e, dict) and e.get("status", CURATED) != DERIVED]

    drops = [*row.drop_packages, *(DroppedPackage(str(e["package"]), str(e["text"]), str(e["source"]),
                                                  str(e.get("reason", "row"))) for e in kept("drop_packages"))]
    overrides = [*row.override_dependencies, *(OverrideDependency(str(e["requirement"]), str(e["text"]),
                                                                  str(e["source"]), str(e.get("reason", "row")))
                                               for e in kept("override_dependencies"))]
    cutoffs = [*row.exclude_newer_package, *(PackageCutoff(str(e["package"]), str(e["value"]), str(e["text"]),
                                                           str(e["source"])) for e in kept("exclude_newer_package"))]
    notes = [*row.notes, *(Note(str(e.get("severity", "info")), str(e["text"]), str(e["source"]))
                           for e in kept("notes"))]
    return replace(row, facts=facts, drop_packages=drops, override_dependencies=overrides,
                   exclude_newer_package=cutoffs, notes=notes)


def _previous_row(text: str, release: str) -> dict[str, Any] | None:
    """The row of the release before this one (the nearest smaller key)."""
    earlier = sorted((k, b) for b in _blocks(text)[1] if (k := _key(b)) < release)
    if not earlier:
        return None
    rows: list[dict[str, Any]] = tomllib.loads(earlier[-1][1])["release"]
    return rows[0]


def inherited_fixes_note(row: DerivedRow, previous: dict[str, Any] | None) -> DerivedRow:
    """A derived row cannot know the fixes a person added to the rows before it (26.04-26.08's cuBLAS
    override): name those it lacks in a note, so the review of the drift job's pull request sees them."""
    if previous is None:
        return row
    have = {o.requirement for o in row.override_dependencies} | {d.package for d in row.drop_packages}
    fixes = [fix for key in ("override_dependencies", "drop_packages") for e in previous.get(key, [])
             if isinstance(e, dict) and e.get("status", CURATED) != DERIVED
             and (fix := str(e.get("requirement") or e.get("package"))) not in have]
    if not fixes:
        return row
    name = str(previous.get("release"))
    note = Note("warn", f"The previous row, {name}, carries fixes a person added that no derivation can know: "
                        f"{', '.join(fixes)}. Review whether they apply to this row and copy them (status curated); "
                        "until then this row locks without them.", f"matrices/{ROWS_FILE} (row {name})", DERIVED)
    return replace(row, notes=[*row.notes, note])


def merged_text(existing: str | None, row: DerivedRow) -> str:
    """The rows file with `row` in place (replacing the row with its key), rows sorted by release."""
    header, blocks = _blocks(existing) if existing else (HEADER, [])
    kept = [b for b in blocks if _key(b) != row.release]
    new = [*kept, row_toml(row)]
    new.sort(key=_key)
    return header.rstrip() + "\n\n" + "\n".join(new)


def write_derived(matrices: Path, row: DerivedRow) -> tuple[Path, Path]:
    """Merge the row into matrices/mbridge.toml and write its upstream-lock extract; validate the
    whole matrix first (from a scratch copy), then write each file atomically. Returns both paths."""
    from envbuilder.matrix.load import load_matrix

    rows_path = matrices / ROWS_FILE
    existing = rows_path.read_text(encoding="utf-8") if rows_path.exists() else None
    row = keep_curated(row, _old_row(existing, row.release) if existing else None)
    row = inherited_fixes_note(row, _previous_row(existing, row.release) if existing else None)
    text = merged_text(existing, row)
    extract_path = matrices / row.extract_file
    extract = row.upstream_lock.to_toml()
    with tempfile.TemporaryDirectory(prefix="envbuilder-derive-check-") as tmp:
        scratch = Path(tmp) / "matrices"
        shutil.copytree(matrices, scratch)
        (scratch / row.extract_file).parent.mkdir(parents=True, exist_ok=True)
        (scratch / row.extract_file).write_text(extract, encoding="utf-8")
        (scratch / ROWS_FILE).write_text(text, encoding="utf-8")
        try:
            load_matrix(scratch)
        except MatrixFileError as exc:
            raise MatrixFileError(f"the derived row {row.release} does not validate: {exc.cause}",
                                  "nothing was written; fix the release or the matrix and derive again",
                                  **exc.details) from exc
    extract_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(extract_path, extract)
    write_atomic(rows_path, text)
    return rows_path, extract_path
