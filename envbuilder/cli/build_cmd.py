"""`envbuilder build LOCKDIR`: build the locked environment into a Docker image."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from envbuilder.archlist import ArchList
from envbuilder.choices import BUILD_TARGETS, DEFAULT_BUILD_TARGET, MODES
from envbuilder.cli.options import (
    arch_list_option,
    ca_bundle_option,
    choice,
    git_mirror_option,
    json_option,
    lock_dir_input,
    timings_option,
    wheel_cache_options,
)
from envbuilder.console import SafeConsole, emit_json, stderr_console, styled

if TYPE_CHECKING:  # the pipeline (docker SDK) is imported only when `build` runs
    from envbuilder.image.pipeline import BuildEvent
    from envbuilder.kernels.wheelcache.shared import CacheSource


class BuildDisplay:
    """Shows the build's progress events on stderr: a spinner for the running step, a line per finished one."""

    def __init__(self, console: SafeConsole) -> None:
        self.console = console
        self.status = console.status("", spinner="dots")
        self.active = False

    def __enter__(self) -> BuildDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.active:
            self.status.stop()
            self.active = False

    def __call__(self, ev: BuildEvent) -> None:
        con = self.console
        if ev.kind == "status":
            if not ev.text:
                self._stop()
                return
            self.status.update(ev.text)
            if not self.active:
                self.status.start()
                self.active = True
        elif ev.kind == "step" and ev.step is not None:
            title = ev.text
            if ev.step.status == "cached":
                con.print(styled("  [dim]cached[/]  {}", title))
            elif ev.step.status == "done":
                secs = f"{ev.step.seconds:.1f}s" if ev.step.seconds is not None else ""
                con.print(styled("  [green]done[/] {:>7}  {}", secs, title))
            elif ev.step.status == "error":
                con.print(styled("  [red]FAILED[/]  {}", title))
        elif ev.kind == "warning":
            con.print(styled("[yellow]warning:[/] {}", ev.text))
        elif ev.kind == "error":
            self._stop()
            con.print(styled("[red]{}[/]", ev.text))
        elif ev.kind == "done":
            con.print(styled("[green]{}[/]", ev.text))
        else:
            con.print(ev.text)


@click.command()
@lock_dir_input(positional=True, required=True, help="Lock directory to build (the same as LOCKDIR).")
@click.option("--tag", "-t", default=None, help="Image tag (default: envbuilder/<row>:<lock sha256[:12]>).")
@click.option("--base", default=None, metavar="IMAGE",
              help="Base image for both stages (default: matrices/images.toml for the lock's CUDA).")
@click.option("--mode", type=choice(MODES), default=None,
              help="Template (default: the lock's mode; must match it).")
@arch_list_option()
@click.option("--jobs", type=int, default=None,
              help="Parallel compile jobs (MAX_JOBS; default: cores, at most one per 4 GiB of RAM).")
@click.option("--target", type=choice(BUILD_TARGETS), default=DEFAULT_BUILD_TARGET, show_default=True,
              help="stage1: stop after the wheels-only stage; builder: after stage 2 (compilers kept); "
                   "runtime: the slim image.")
@click.option("--python", default=None, metavar="X.Y",
              help="Python for the venv (default: the lock's target; another minor warns).")
@ca_bundle_option()
@click.option("--no-ca-bundle", is_flag=True, help="Pass no CA bundle into the build.")
@click.option("--secret", "secrets", multiple=True, metavar="id=NAME,env=VAR|src=FILE",
              help="A BuildKit secret for the fetching steps, exported there as $NAME. Repeatable.")
@click.option("--no-cache", is_flag=True,
              help="Rebuild every layer (BuildKit also starts from an empty uv cache mount).")
@click.option("--no-pull", is_flag=True, help="Never pull a missing base image.")
@click.option("--no-scan", is_flag=True, help="Skip the scan of the image's layers for secret values.")
@click.option("--log", "log_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write BuildKit's full plain progress log to this file.")
@click.option("--wheelhouse", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Install stage 2 from this `envbuilder wheels` output (made for this lock) instead of compiling.")
@git_mirror_option
@click.option("--push", default=None, metavar="REGISTRY/NAME[:TAG]",
              help="Push the image there once built and scanned; the build report records it by digest "
                   "(credentials: the engine's Docker config, e.g. `docker login REGISTRY`).")
@wheel_cache_options()
@json_option("Print the build report as JSON on stdout.")
@timings_option
def build(lock: Path, tag: str | None, base: str | None, mode: str | None, arch_list: ArchList | None,
          jobs: int | None, target: str, python: str | None, ca_bundle: Path | None, no_ca_bundle: bool,
          secrets: tuple[str, ...], no_cache: bool, no_pull: bool, no_scan: bool, log_file: Path | None,
          wheelhouse: Path | None, git_mirrors: tuple[str, ...], push: str | None,
          wheel_cache: CacheSource | None, as_json: bool, timings: bool) -> None:
    """Build LOCKDIR (made by `envbuilder lock`) into an image with the Docker engine (BuildKit)."""
    from envbuilder.image.pipeline import BuildOptions, build_image
    from envbuilder.image.secrets import default_ca_bundle, parse_secret

    console = stderr_console()
    # SIGTERM/SIGHUP unwind like Ctrl-C (envbuilder.procs, installed by the CLI), so the finally
    # blocks that remove secret files and the temp context run
    specs = [parse_secret(s) for s in secrets]
    bundle = None if no_ca_bundle else (ca_bundle or default_ca_bundle())
    opts = BuildOptions(lockdir=lock, tag=tag, base=base, mode=mode, arch_list=arch_list, jobs=jobs,
                        target=target, python=python, ca_bundle=bundle, secrets=specs, no_cache=no_cache,
                        pull=not no_pull, scan=not no_scan, log_file=log_file, wheelhouse=wheelhouse,
                        git_mirrors=list(git_mirrors), push=push, cache=wheel_cache)
    with BuildDisplay(console) as show:
        result = build_image(opts, show)
    if as_json:
        emit_json(result.to_dict(), timings=timings)
