"""The one jinja2 environment for every generated file (Dockerfiles, apptainer.def, launch snippets).

Strict (an undefined name is an error, never an empty string), no autoescaping (the output is
shell and Dockerfile text, not HTML), trailing newlines kept so golden files compare byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from envbuilder.paths import templates_dir


def template_env(tdir: Path | None = None) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(tdir or templates_dir())),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
