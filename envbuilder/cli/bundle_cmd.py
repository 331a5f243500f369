"""`envbuilder bundle` and `envbuilder install`: an offline install kit and its all-or-nothing installer."""

from __future__ import annotations

from pathlib import Path

import click

from envbuilder.bundle import BundleOptions, InstallOptions, make_bundle, run_install
from envbuilder.bundle.parts import parse_size
from envbuilder.cli.options import ca_bundle_option, git_mirror_option, json_option, lock_dir_input, timings_option
from envbuilder.console import emit_json, stderr_console, styled


@click.command()
@lock_dir_input(positional=True, required=True, exists=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Bundle directory to write.")
@click.option("--split", "split", default=None, metavar="SIZE",
              help="Cut the bundle into parts of at most SIZE (e.g. 60M) for transfer limits.")
@click.option("--wheelhouse", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Stage-2 wheels from `envbuilder wheels` to carry along.")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
              help="Download cache root (default ENVBUILDER_CACHE_DIR or ~/.cache/envbuilder).")
@ca_bundle_option()
@git_mirror_option
@json_option()
@timings_option
def bundle(lock: Path, output: Path, split: str | None, wheelhouse: Path | None, cache_dir: Path | None,
           ca_bundle: Path | None, git_mirrors: tuple[str, ...], as_json: bool, timings: bool) -> None:
    """Collect everything LOCKDIR installs into an offline, hash-checked bundle."""
    console = stderr_console()
    opts = BundleOptions(lockdir=lock, output=output, split=parse_size(split) if split else None,
                         wheelhouse=wheelhouse, cache_dir=cache_dir, ca_bundle=ca_bundle,
                         git_mirrors=list(git_mirrors))
    result = make_bundle(opts, progress=console.print)
    where = f"{len(result.parts)} parts" if result.parts else "a directory"
    console.print(styled("[green]wrote[/green] {}", f"{output}: {result.files} files, {result.size / 1e6:.1f} MB as "
                         f"{where} ({result.downloaded} downloaded, {result.seconds:.1f}s)"))
    if as_json:
        emit_json(result.to_dict(), timings=timings)


@click.command()
@click.argument("bundle_dir", metavar="BUNDLE", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--venv", type=click.Path(path_type=Path), required=True, help="Virtualenv to create (or replace).")
@click.option("--python", default=None, help="Interpreter for the venv (default: the lock's target Python).")
@click.option("--system-site-packages", is_flag=True,
              help="Let the venv see the interpreter's packages (a host torch: NGC, cluster modules).")
@click.option("--wheelhouse", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Stage-2 wheels built on this host (default: the bundle's own wheelhouse, if any).")
@click.option("--skip-stage2", is_flag=True, help="Install stage 1 and the stage-2 dependencies only.")
@json_option()
@timings_option
def install(bundle_dir: Path, venv: Path, python: str | None, system_site_packages: bool, wheelhouse: Path | None,
            skip_stage2: bool, as_json: bool, timings: bool) -> None:
    """Install a bundle into a venv with no network: verify every hash, all or nothing."""
    console = stderr_console()
    opts = InstallOptions(bundle=bundle_dir, venv=venv, python=python, system_site_packages=system_site_packages,
                          wheelhouse=wheelhouse, skip_stage2=skip_stage2)
    result = run_install(opts, progress=console.print)
    console.print(styled("[green]installed[/green] {}", f"{result.packages} packages into {venv} in "
                         f"{result.seconds:.1f}s (lock {result.lock_sha256[:12]})"))
    if as_json:
        emit_json(result.to_dict(), timings=timings)
