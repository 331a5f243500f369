"""Render: a Resolution -> the two-stage pyproject.toml (tomlkit, deterministic)."""

from envbuilder.render.pyproject import render_pyproject

__all__ = ["render_pyproject"]
