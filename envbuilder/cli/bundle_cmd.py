"""`envbuilder bundle` and `envbuilder install`: an offline install kit and its all-or-nothing installer."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from envbuilder.bundle import BundleOptions, InstallOptions, make_bundle, run_install
from envbuilder.bundle.cached import CacheInstall
from envbuilder.bundle.parts import parse_size
from envbuilder.cli.options import (
    arch_list_option,
    ca_bundle_option,
    cache_dir_option,
    git_mirror_option,
    json_option,
    lock_dir_input,
    timings_option,
    wheel_cache_options,
)
from envbuilder.console import emit_json, stderr_console, styled

if TYPE_CHECKING:
    from envbuilder.archlist import ArchList
    from envbuilder.kernels.wheelcache.shared import CacheSource


@click.command()
@lock_dir_input(positional=True, required=True, exists=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Bundle directory to write.")
@click.option("--split", "split", default=None, metavar="SIZE",
              help="Cut the bundle into parts of at most SIZE (e.g. 60M) for transfer limits.")
@click.option("--wheelhouse", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Stage-2 wheels from `envbuilder wheels` to carry along.")
@cache_dir_option()
@ca_bundle_option()
@git_mirror_option
@wheel_cache_options()
@arch_list_option()
@json_option()
@timings_option
def bundle(lock: Path, output: Path, split: str | None, wheelhouse: Path | None, cache_dir: Path | None,
           ca_bundle: Path | None, git_mirrors: tuple[str, ...], wheel_cache: CacheSource | None,
           arch_list: ArchList | None, as_json: bool, timings: bool) -> None:
    """Collect everything LOCKDIR installs into an offline, hash-checked bundle. With --cache (and no
    --wheelhouse), its stage-2 wheels come from a shared wheel cache, a miss built here."""
    console = stderr_console()
    opts = BundleOptions(lockdir=lock, output=output, split=parse_size(split) if split else None,
                         wheelhouse=wheelhouse, cache_dir=cache_dir, ca_bundle=ca_bundle,
                         git_mirrors=list(git_mirrors), wheel_cache=wheel_cache, arch_list=arch_list)
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
@wheel_cache_options()
@arch_list_option()
@cache_dir_option()
@ca_bundle_option()
@json_option()
@timings_option
def install(bundle_dir: Path, venv: Path, python: str | None, system_site_packages: bool, wheelhouse: Path | None,
            skip_stage2: bool, wheel_cache: CacheSource | None, arch_list: ArchList | None, cache_dir: Path | None,
            ca_bundle: Path | None, as_json: bool, timings: bool) -> None:
    """Install a bundle into a venv with no network: verify every hash, all or nothing. With --cache, the
    stage-2 wheels come from a shared wheel cache (verified), and a miss is built here."""
    console = stderr_console()
    cache = CacheInstall(wheel_cache, arch_list, cache_dir, ca_bundle) if wheel_cache is not None else None
    opts = InstallOptions(bundle=bundle_dir, venv=venv, python=python, system_site_packages=system_site_packages,
                          wheelhouse=wheelhouse, skip_stage2=skip_stage2, cache=cache)
    result = run_install(opts, progress=console.print)
    console.print(styled("[green]installed[/green] {}", f"{result.packages} packages into {venv} in "
                         f"{result.seconds:.1f}s (lock {result.lock_sha256[:12]})"))
    if as_json:
        emit_json(result.to_dict(), timings=timings)
