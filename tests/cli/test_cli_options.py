"""Command-line conventions shared by every command: output options, environment variables,
the lock-directory spelling, deprecated aliases, full-width piped output, stable --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from envbuilder.cli import COMMANDS, cli
from envbuilder.cli.options import SHARED_ENVVARS
from envbuilder.console import without_timings

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=REPO, check=False)


def _leaf_commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli)
    out: list[tuple[str, click.Command]] = []
    for name in sorted(COMMANDS):
        cmd = cli.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out += [(f"{name} {sub}", c) for sub, c in sorted(cmd.commands.items())]
        else:
            out.append((name, cmd))
    return out


@pytest.mark.parametrize(("path", "cmd"), _leaf_commands(), ids=[p for p, _ in _leaf_commands()])
def test_every_command_has_the_output_options_and_env_vars(path: str, cmd: click.Command) -> None:
    flags = {o for p in cmd.params for o in getattr(p, "opts", [])}
    assert {"--version", "-q", "--quiet", "-v", "--verbose", "--color"} <= flags
    prefix = "ENVBUILDER_" + path.upper().replace(" ", "_").replace("-", "_") + "_"
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.hidden and p.opts != ["--version"]:
            assert p.show_envvar and isinstance(p.envvar, str), f"{path} {p.opts} has no env var"
            assert p.envvar.startswith(prefix) or p.envvar in (
                "ENVBUILDER_QUIET", "ENVBUILDER_VERBOSE", "ENVBUILDER_COLOR", *SHARED_ENVVARS), p.envvar


def test_version_on_a_subcommand_and_env_var_input() -> None:
    out = _run("matrix", "show", "--version")
    assert out.returncode == 0 and out.stdout.startswith("envbuilder, version ")
    shown = _run("matrix", "show", env={"ENVBUILDER_MATRIX_SHOW_NEMO": "v2.3.0", "ENVBUILDER_MATRIX_SHOW_JSON": "1"})
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["nemo"] == "v2.3.0"
    assert "ENVBUILDER_LOCK_GLIBC" in _run("lock", "--help").stdout


def test_json_from_the_environment_also_makes_errors_json() -> None:
    bad = _run("matrix", "show", "--nemo", "v0.0.0", env={"ENVBUILDER_MATRIX_SHOW_JSON": "1"})
    assert bad.returncode == 10 and json.loads(bad.stdout)["error"] == "unknown-tag"
    other = _run("matrix", "show", "--nemo", "v0.0.0", env={"ENVBUILDER_LOCK_JSON": "1"})
    assert other.returncode == 10 and other.stdout == ""  # another command's variable does not apply


def test_piped_tables_keep_their_full_width() -> None:
    out = _run("matrix", "list")
    assert out.returncode == 0
    rows = [ln for ln in out.stdout.splitlines() if "v2.3.0" in ln]
    assert rows and max(len(ln) for ln in out.stdout.splitlines()) > 80
    assert "nvcr.io/nvidia/nemo:25.04" in rows[0]  # not cut to "nvcr.io/nvidia/ne…"
    assert "…" not in out.stdout


def test_color_never_and_always() -> None:
    never = _run("--color", "never", "matrix", "show", "--nemo", "v2.3.0")
    always = _run("matrix", "show", "--nemo", "v2.3.0", "--color", "always")
    assert "\x1b[" not in never.stdout and "\x1b[" in always.stdout


def test_quiet_silences_progress_but_not_errors() -> None:
    out = _run("doctor", "--gpu", "H100", "--driver", "570.86.15", "-q")
    assert out.returncode == 0 and out.stderr == ""
    bad = _run("-q", "matrix", "show", "--nemo", "v0.0.0")
    assert bad.returncode == 10 and "error:" in bad.stderr


def test_lock_directory_spelling(tmp_path: Path) -> None:
    empty = tmp_path / "lock"
    empty.mkdir()
    assert _run("build", str(empty)).returncode == 19          # positional LOCKDIR
    assert _run("build", "--lock", str(empty)).returncode == 19  # same directory as --lock
    both = _run("build", str(empty), "--lock", str(tmp_path))
    assert both.returncode == 18 and "two lock directories" in both.stderr
    missing = _run("build")
    assert missing.returncode == 2 and "LOCKDIR" in missing.stderr


def test_certify_python_is_a_deprecated_alias_of_interpreter(tmp_path: Path) -> None:
    old = _run("certify", "--in-place", "--python", "python3", "--lock", str(tmp_path), "--level", "0")
    assert "--python is deprecated" in old.stderr and "use --interpreter" in old.stderr
    assert old.returncode == 19  # it went on to read the (empty) lock directory
    both = _run("certify", "--in-place", "--python", "a", "--interpreter", "b", "--lock", str(tmp_path))
    assert both.returncode == 18 and "same option" in both.stderr
    assert "--python" not in _run("certify", "--help").stdout


def test_json_without_timings_is_stable() -> None:
    report = {"tag": "x", "build_seconds": 1.5, "timings": {"total": 2.0},
              "steps": [{"step": "a", "seconds": 0.3, "status": "done"}]}
    assert without_timings(report) == {"tag": "x", "steps": [{"step": "a", "status": "done"}]}
    a, b = _run("matrix", "list", "--json"), _run("matrix", "list", "--json")
    assert a.returncode == 0 and a.stdout == b.stdout


@pytest.mark.parametrize(("path", "cmd"), _leaf_commands(), ids=[p for p, _ in _leaf_commands()])
def test_lock_directory_readers_take_dash_dash_lock(path: str, cmd: click.Command) -> None:
    """A positional LOCKDIR always comes with --lock LOCKDIR (the lead's spelling decision)."""
    positional = [p for p in cmd.params if isinstance(p, click.Argument) and "LOCKDIR" in (p.metavar or p.name or "")
                  .upper()]
    if positional:
        assert any(isinstance(p, click.Option) and "--lock" in p.opts for p in cmd.params), path


#: options several commands share: declared once, in envbuilder/cli/options.py
SHARED = ("--arch-list", "--ca-bundle", "--interpreter", "--parallel", "--nemo", "--release", "--mbridge", "--json",
          "--timings", "--lock", "--driver", "--gpu", "--sm")


def test_shared_options_are_declared_once() -> None:
    """No command module spells a shared option itself: one declaration, one help text, one meaning."""
    import re

    # `matrix derive --nemo/--mbridge` name the upstream release a new row is derived from (no row exists yet)
    exempt = {("matrix_cmd.py", "--nemo"), ("matrix_cmd.py", "--mbridge")}
    bad = []
    for mod in sorted((REPO / "envbuilder" / "cli").glob("*.py")):
        if mod.name == "options.py":
            continue
        text = mod.read_text(encoding="utf-8")
        bad += [f"{mod.name}: {opt}" for opt in SHARED if (mod.name, opt) not in exempt
                and re.search(rf"""click\.option\(\s*["']{opt}["']""", text)]
    assert not bad, f"declare these in envbuilder/cli/options.py: {bad}"


def test_one_meaning_per_option_name() -> None:
    """--jobs is compile jobs (MAX_JOBS) wherever it appears; rows or packages at once are --parallel. The same name
    has the same help text in every command."""
    helps: dict[str, set[str]] = {}
    for path, cmd in _leaf_commands():
        if path == "matrix derive":  # names upstream releases, not rows (see the test above)
            continue
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                for name in p.opts:
                    if name.startswith("--"):
                        helps.setdefault(name, set()).add(p.help or "")
                if "--jobs" in p.opts:
                    assert "MAX_JOBS" in (p.help or ""), f"{path} --jobs: {p.help}"
                if "--parallel" in p.opts:
                    assert "at once" in (p.help or ""), f"{path} --parallel: {p.help}"
    for name in ("--ca-bundle", "--sm", "--driver", "--gpu", "--nemo", "--release", "--mbridge", "--arch-list"):
        assert len(helps.get(name, set())) == 1, f"{name} has several help texts: {helps.get(name)}"


def test_the_old_rows_at_once_jobs_still_works_with_a_warning(tmp_path: Path) -> None:
    out = _run("nightly", "run", "--rows", "nonesuch", "--jobs", "2", "-o", str(tmp_path / "n"))
    assert "--jobs is deprecated" in out.stderr and "--parallel" in out.stderr
