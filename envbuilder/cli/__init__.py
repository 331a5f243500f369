"""The `envbuilder` command: a thin click layer over the pipeline stages.

Each subcommand lives in its own module and is imported only when invoked, so a
broken optional dependency (docker SDK, NVML) never breaks unrelated commands.
Every EnvbuilderError becomes: one cause line, one fix line, its own exit code.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

import click

from envbuilder import __version__, procs
from envbuilder.console import dumps
from envbuilder.errors import EnvbuilderError, InternalError

# name -> "module:attribute"
COMMANDS: dict[str, str] = {
    "lock": "envbuilder.cli.lock_cmd:lock",
    "matrix": "envbuilder.cli.matrix_cmd:matrix",
    "doctor": "envbuilder.cli.doctor_cmd:doctor",
    "check-parallel": "envbuilder.cli.parallel_cmd:check_parallel",
    "build": "envbuilder.cli.build_cmd:build",
    "export": "envbuilder.cli.export_cmd:export",
    "inspect": "envbuilder.cli.export_cmd:inspect",
    "certify": "envbuilder.cli.certify_cmd:certify",
    "verify-cert": "envbuilder.cli.certify_cmd:verify_cert",
    "keygen": "envbuilder.cli.keygen_cmd:keygen",
    "report": "envbuilder.cli.report_cmd:report",
}


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
        return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envbuilder")
def cli() -> None:
    """Resolve, lock, build, export and certify GPU LLM-training environments."""


def report_error(err: EnvbuilderError, want_json: bool) -> None:
    tail = err.details.get("log_tail") if not want_json else None
    if isinstance(tail, list) and tail:  # a fix may point at "the log above": show it
        for line in tail:
            click.echo(f"  | {line}", err=True)
    click.echo(f"error: {err.cause}", err=True)
    if err.fix:
        click.echo(f"  fix: {err.fix}", err=True)
    if want_json:
        sys.stdout.write(dumps(err.to_dict()))


def main(argv: list[str] | None = None) -> Any:
    args = sys.argv[1:] if argv is None else argv
    want_json = "--json" in args
    procs.install_signal_handlers()
    try:
        return cli.main(args=args, prog_name="envbuilder", standalone_mode=False)
    except EnvbuilderError as err:
        report_error(err, want_json)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt as exc:
        click.echo(f"interrupted ({procs.interrupt_name(exc)}): outputs were left as they were before this run",
                   err=True)
        sys.exit(procs.interrupt_exit_code(exc))
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except Exception as exc:  # a bug: one line unless asked for the traceback
        if os.environ.get("ENVBUILDER_DEBUG"):
            traceback.print_exc()
        internal = InternalError(
            f"{type(exc).__name__}: {exc}",
            "this is a bug in envbuilder; rerun with ENVBUILDER_DEBUG=1 and report the traceback",
        )
        report_error(internal, want_json)
        sys.exit(internal.exit_code)
