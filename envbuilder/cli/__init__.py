"""The `envbuilder` command: a thin click layer over the pipeline stages.

Each subcommand lives in its own module and is imported only when invoked, so a
broken optional dependency (docker SDK, NVML) never breaks unrelated commands.
Every EnvbuilderError becomes: one cause line, one fix line, its own exit code.

Every command (and the group itself) takes the same output options: --version, -q/--quiet,
-v/--verbose, --color. Every option listed in --help can also come from an environment
variable, ENVBUILDER_<COMMAND>_<OPTION> (help shows each one's name).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

import click

from envbuilder import __version__, procs
from envbuilder.choices import COLORS
from envbuilder.console import SETTINGS, dumps
from envbuilder.errors import EnvbuilderError, InternalError, os_error
from envbuilder.safetext import printable

# name -> "module:attribute"
COMMANDS: dict[str, str] = {
    "lock": "envbuilder.cli.lock_cmd:lock",
    "matrix": "envbuilder.cli.matrix_cmd:matrix",
    "doctor": "envbuilder.cli.doctor_cmd:doctor",
    "check-parallel": "envbuilder.cli.parallel_cmd:check_parallel",
    "build": "envbuilder.cli.build_cmd:build",
    "push": "envbuilder.cli.push_cmd:push",
    "export": "envbuilder.cli.export_cmd:export",
    "inspect": "envbuilder.cli.export_cmd:inspect",
    "certify": "envbuilder.cli.certify_cmd:certify",
    "verify-cert": "envbuilder.cli.certify_cmd:verify_cert",
    "keygen": "envbuilder.cli.keygen_cmd:keygen",
    "report": "envbuilder.cli.report_cmd:report",
    "sbom": "envbuilder.cli.sbom_cmd:sbom",
    "audit": "envbuilder.cli.audit_cmd:audit",
    "nightly": "envbuilder.cli.nightly_cmd:nightly",
    "wheels": "envbuilder.cli.wheels_cmd:wheels",
    "bundle": "envbuilder.cli.bundle_cmd:bundle",
    "install": "envbuilder.cli.bundle_cmd:install",
}


ENV_PREFIX = "ENVBUILDER"


def _show_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"envbuilder, version {__version__}")
        ctx.exit()


def _set_quiet(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        SETTINGS.quiet = True


def _set_verbose(ctx: click.Context, param: click.Parameter, value: int) -> None:
    if value:
        SETTINGS.verbosity = max(SETTINGS.verbosity, value)


def _set_color(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        SETTINGS.color = value


def output_options() -> list[click.Parameter]:
    """--version, -q, -v, --color: the same on every command (they may come before or after it)."""
    return [
        click.Option(["--version"], is_flag=True, expose_value=False, is_eager=True, callback=_show_version,
                     allow_from_autoenv=False, help="Show the version and exit."),
        click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, is_eager=True, callback=_set_quiet,
                     envvar=f"{ENV_PREFIX}_QUIET", show_envvar=True,
                     help="Print no progress or report on stderr (errors and --json output still appear)."),
        click.Option(["-v", "--verbose"], count=True, expose_value=False, is_eager=True, callback=_set_verbose,
                     envvar=f"{ENV_PREFIX}_VERBOSE", show_envvar=True,
                     help="More detail; -vv also prints the traceback of an internal error."),
        click.Option(["--color"], type=click.Choice(list(COLORS)), default=None, expose_value=False,
                     is_eager=True, callback=_set_color, envvar=f"{ENV_PREFIX}_COLOR", show_envvar=True,
                     help="Colour in human output: auto (a terminal, unless NO_COLOR is set), always, never."),
    ]


def _env_name(prefix: str, opt: click.Option) -> str:
    longest = max(opt.opts, key=len).lstrip("-")
    return f"{prefix}_{longest}".upper().replace("-", "_")


def with_common_options(cmd: click.Command, prefix: str = ENV_PREFIX) -> click.Command:
    """Add the output options to `cmd` (and its subcommands) once, and give every option shown in
    --help an environment variable named after its flag: `lock --glibc` <- ENVBUILDER_LOCK_GLIBC."""
    if getattr(cmd, "_envbuilder_common", False):
        return cmd
    names = {n for p in cmd.params for n in getattr(p, "opts", [])}
    cmd.params.extend(p for p in output_options() if not names & set(getattr(p, "opts", [])))
    for p in cmd.params:
        if not isinstance(p, click.Option) or p.hidden or not p.allow_from_autoenv or p.envvar:
            continue
        p.envvar = _env_name(prefix, p)
        p.show_envvar = True
    cmd._envbuilder_common = True  # type: ignore[attr-defined]
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            with_common_options(sub, f"{prefix}_{name}")
    return cmd


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(module_name)
        cmd = getattr(module, attr)
        assert isinstance(cmd, click.Command)
        return with_common_options(cmd, f"{ENV_PREFIX}_{cmd_name}")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Resolve, lock, build, export and certify GPU LLM-training environments.

    \b
    Shell completion (bash; zsh and fish alike with zsh_source / fish_source):
      eval "$(_ENVBUILDER_COMPLETE=bash_source envbuilder)"
    """


with_common_options(cli)


def _wants_json(args: list[str]) -> bool:
    """--json on the command line, or its environment variable (ENVBUILDER_LOCK_JSON=1, ...)."""
    if "--json" in args:
        return True
    words = [a for a in args if not a.startswith("-")][:2]
    names = [f"{ENV_PREFIX}_{'_'.join(words[:n])}_JSON".upper().replace("-", "_") for n in (1, 2) if len(words) >= n]
    return any(os.environ.get(n, "").strip().lower() in ("1", "true", "yes", "on") for n in names)


def report_error(err: EnvbuilderError, want_json: bool) -> None:
    tail = err.details.get("log_tail")
    if isinstance(tail, list) and tail:  # a fix may point at "the log above": show it (stderr, also with --json)
        for line in tail:
            click.echo(f"  | {printable(line)}", err=True)
    click.echo(f"error: {printable(err.cause)}", err=True)  # one line each, whatever a file name held
    if err.fix:
        click.echo(f"  fix: {printable(err.fix)}", err=True)
    if want_json:
        sys.stdout.write(dumps(err.to_dict()))


def main(argv: list[str] | None = None) -> Any:
    args = sys.argv[1:] if argv is None else argv
    want_json = _wants_json(args)
    procs.reset_stop()
    procs.install_signal_handlers()
    try:
        return cli.main(args=args, prog_name="envbuilder", standalone_mode=False)
    except EnvbuilderError as err:
        report_error(err, want_json)
        sys.exit(err.exit_code)
    except click.exceptions.Abort as abort:  # click turns KeyboardInterrupt (and procs.Terminated) into Abort
        cause = abort.__cause__ if isinstance(abort.__cause__, KeyboardInterrupt) else KeyboardInterrupt()
        click.echo(f"interrupted ({procs.interrupt_name(cause)}): outputs were left as they were before this run",
                   err=True)
        sys.exit(procs.interrupt_exit_code(cause))
    except KeyboardInterrupt as exc:
        click.echo(f"interrupted ({procs.interrupt_name(exc)}): outputs were left as they were before this run",
                   err=True)
        sys.exit(procs.interrupt_exit_code(exc))
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except OSError as exc:  # an environment problem (full disk, read-only, permission), never a bug
        typed = os_error(exc, action="use")
        report_error(typed, want_json)
        sys.exit(typed.exit_code)
    except Exception as exc:  # a bug: one line unless asked for the traceback
        if os.environ.get("ENVBUILDER_DEBUG") or SETTINGS.verbosity >= 2:
            traceback.print_exc()
        internal = InternalError(
            f"{type(exc).__name__}: {exc}",
            "this is a bug in envbuilder; rerun with ENVBUILDER_DEBUG=1 and report the traceback",
        )
        report_error(internal, want_json)
        sys.exit(internal.exit_code)
