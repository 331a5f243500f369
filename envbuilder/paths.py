"""Where envbuilder's data lives: `matrices/` and `templates/` at the repository root.

They sit beside the package (not inside it) because users asked for them at top level;
ENVBUILDER_MATRICES / ENVBUILDER_TEMPLATES point elsewhere (tests, site-local matrices).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def matrices_dir() -> Path:
    return Path(os.environ.get("ENVBUILDER_MATRICES", REPO_ROOT / "matrices"))


def templates_dir() -> Path:
    return Path(os.environ.get("ENVBUILDER_TEMPLATES", REPO_ROOT / "templates"))


def cache_dir() -> Path:
    """envbuilder's own cache (parsed locks, exported artifacts): ENVBUILDER_CACHE, else XDG's."""
    explicit = os.environ.get("ENVBUILDER_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envbuilder"
