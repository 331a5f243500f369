"""Built-in recipes for `check-parallel --from-nemo-recipe` (data: matrices/recipes.toml via matrix/)."""

from __future__ import annotations

from pathlib import Path

from envbuilder.errors import UnknownRecipeError
from envbuilder.matrix.recipes import Recipe, load_recipes

__all__ = ["Recipe", "find_recipe", "load_recipes"]


def find_recipe(name: str, directory: Path | None = None) -> Recipe:
    recipes = load_recipes(directory)
    key = name.strip().lower().replace("-", "_").replace(".", "")
    if key in recipes:
        return recipes[key]
    raise UnknownRecipeError(
        f"no built-in recipe {name!r} (known: {', '.join(sorted(recipes))})",
        "pick a known recipe, or give the model dimensions with --num-layers/--hidden-size/--num-attention-heads",
    )
