"""matrices/recipes.toml: model dimensions and default layouts of common NeMo / Megatron-Bridge
recipes, each value cited. Loaded here, like every matrix file, with the schema check."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.errors import MatrixFileError
from envbuilder.matrix.load import _File, _schema_check
from envbuilder.paths import matrices_dir

UNKNOWN, NONE = "unknown", "none"

INT_FIELDS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "vocab_size", "num_experts", "tp", "pp", "vpp", "cp", "ep", "etp", "nodes", "gpus_per_node", "seq_length",
    "gbs", "mbs",
)
BOOL_FIELDS = ("gated_linear_unit", "share_embeddings", "sp")
REQUIRED = ("num_layers", "hidden_size", "num_attention_heads")


@dataclass(frozen=True)
class Recipe:
    name: str
    source: str
    values: dict[str, Any]  # known values only ("none" becomes None: deliberately unset)
    sources: dict[str, str]

    def layout_values(self) -> dict[str, Any]:
        """Keyword arguments for Layout (what the recipe fixes; flags override)."""
        return dict(self.values)


def _parse_fact(path: Path, name: str, key: str, raw: Any) -> tuple[bool, Any, str]:
    """(known, value, source) for one `{ value, source }` entry, validated."""
    where = f"{path.name}: recipe {name!r}, field {key!r}"
    if not isinstance(raw, dict) or "value" not in raw or not raw.get("source"):
        raise MatrixFileError(f"{where}: must be {{ value = ..., source = \"...\" }}", "cite a source for the value")
    value, source = raw["value"], str(raw["source"])
    if value == UNKNOWN:
        return False, None, source
    if value == NONE:
        return True, None, source
    if key in BOOL_FIELDS and not isinstance(value, bool):
        raise MatrixFileError(f"{where}: {value!r} must be true or false", "fix the value")
    if key in INT_FIELDS and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise MatrixFileError(f"{where}: {value!r} must be a positive integer", "fix the value")
    return True, value, source


def load_recipes(directory: Path | None = None) -> dict[str, Recipe]:
    """Every recipe in `directory`/recipes.toml (default: the matrices directory), schema-checked."""
    f = _File(Path(directory or matrices_dir()) / "recipes.toml")
    _schema_check(f)
    path = f.path
    out: dict[str, Recipe] = {}
    for row in f.rows("recipe"):
        name = str(row.get("name", ""))
        if not name or not row.get("recipe"):
            raise MatrixFileError(f"{path.name}: a [[recipe]] lacks name or recipe (its source)",
                                  "give every recipe a name and a source")
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for key in (*INT_FIELDS, *BOOL_FIELDS):
            if key not in row:
                continue
            known, value, source = _parse_fact(path, name, key, row[key])
            sources[key] = source
            if known:
                values[key] = value
        missing = [k for k in REQUIRED if values.get(k) is None]
        if missing:
            raise MatrixFileError(f"{path.name}: recipe {name!r} lacks {', '.join(missing)}",
                                  "every recipe needs its model dimensions")
        unknown_keys = sorted(set(row) - {"name", "recipe", *INT_FIELDS, *BOOL_FIELDS})
        if unknown_keys:
            raise MatrixFileError(f"{path.name}: recipe {name!r} has unknown field(s) {', '.join(unknown_keys)}",
                                  f"known fields: {', '.join((*INT_FIELDS, *BOOL_FIELDS))}")
        out[name] = Recipe(name, str(row["recipe"]), values, sources)
    return out
