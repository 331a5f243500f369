"""The nightly plan: which rows run, at which level, on which runner labels.

Runner labels come from the environment (repository variables in CI) so one workflow file serves
any fleet: NIGHTLY_RUNNER_L0 / _L1 / _L2 hold a JSON list of labels for each certify level.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envbuilder.errors import InvalidOptionError, UnknownTagError
from envbuilder.matrix import Matrix
from envbuilder.safetext import plain_name_problem, printable

#: labels used when the variable is unset: level 0 needs no GPU, 1 one GPU, 2 several
DEFAULT_RUNNERS: dict[int, list[str]] = {
    0: ["ubuntu-latest"],
    1: ["self-hosted", "linux", "x64", "gpu"],
    2: ["self-hosted", "linux", "x64", "multi-gpu"],
}
RUNNER_VAR = "NIGHTLY_RUNNER_L{level}"


@dataclass(frozen=True)
class PlanRow:
    row: str
    level: int
    runner: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"row": self.row, "level": self.level, "runner": self.runner}


@dataclass(frozen=True)
class Plan:
    rows: list[PlanRow]

    def to_dict(self) -> dict[str, Any]:
        """GitHub Actions' matrix shape: {"include": [{"row", "level", "runner"}, ...]}."""
        return {"include": [r.to_dict() for r in self.rows]}


def runner_for(level: int, env: Mapping[str, str]) -> list[str]:
    var = RUNNER_VAR.format(level=level)
    raw = env.get(var, "").strip()
    if not raw:
        return list(DEFAULT_RUNNERS[level])
    try:
        labels = json.loads(raw) if raw.startswith("[") else [x.strip() for x in raw.split(",") if x.strip()]
    except json.JSONDecodeError as exc:
        raise InvalidOptionError(f"{var}={raw!r} is not a JSON list of runner labels",
                                 'set it like ["self-hosted","gpu-h100"] (or a comma-separated list)') from exc
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) and x for x in labels):
        raise InvalidOptionError(f"{var} must name at least one runner label", f'e.g. {var}=["self-hosted","gpu"]')
    return labels


def make_plan(matrix: Matrix, rows: list[str] | None, level: int, env: Mapping[str, str] | None = None,
              include_test: bool = False) -> Plan:
    """All rows `matrix list` shows (or the named ones, in matrix order), each with its runner labels."""
    env = os.environ if env is None else env
    known = matrix.names(include_test=True)
    if rows:
        for r in rows:
            if plain_name_problem(r) is not None:
                check_row(matrix, r, "--rows")
        unknown = [r for r in rows if r not in known]
        if unknown:
            raise UnknownTagError(f"unknown row(s) {', '.join(unknown)}; known: {', '.join(known)}",
                                  "pick rows from `envbuilder matrix list --all`")
        chosen = [t for t in known if t in set(rows)]
    else:
        chosen = matrix.names(include_test=include_test)
    labels = runner_for(level, env)
    return Plan([PlanRow(r, level, labels) for r in chosen])


def check_row(matrix: Matrix, name: str, flag: str = "--row") -> str:
    """A row named on the command line: a plain name (it becomes OUT/<row>/) and a row of the matrix,
    checked before anything is created."""
    problem = plain_name_problem(name)
    if problem is not None:
        raise InvalidOptionError(f"{flag} {printable(name)!r} is not a row name: it {problem}",
                                 "pick a row from `envbuilder matrix list --all`")
    known = matrix.names(include_test=True)
    if name not in known:
        raise UnknownTagError(f"unknown row {name}; known: {', '.join(known)}",
                              "pick a row from `envbuilder matrix list --all`")
    return name


def row_flag(matrix: Matrix, name: str) -> str:
    """The `envbuilder lock` option that names this row: --nemo TAG, or --release YY.MM for rows without a tag."""
    row = matrix.find_row(name=name)
    return "--release" if row is not None and row.nemo is None else "--nemo"
