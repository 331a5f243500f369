"""`envbuilder wheels LOCKDIR -o WHEELHOUSE`: build a lock's stage-2 packages into ABI-named wheels."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from envbuilder.archlist import ArchList
from envbuilder.cli.options import (
    arch_list_option,
    ca_bundle_option,
    cache_dir_option,
    git_mirror_option,
    interpreter_option,
    json_option,
    lock_dir_input,
    parallel_option,
    timings_option,
    wheel_cache_options,
)
from envbuilder.console import emit_json, stderr_console, styled
from envbuilder.kernels import WheelsOptions, run_wheels
from envbuilder.matrix import load_matrix

if TYPE_CHECKING:
    from envbuilder.kernels.wheelcache.shared import CacheSource, PublishTarget


@click.command()
@lock_dir_input(positional=True, required=True, exists=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Wheelhouse directory to write.")
@arch_list_option()
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Parallel compile jobs (MAX_JOBS; default from cores and free RAM per package).")
@parallel_option("packages compiled", default=1,
                 note="without --jobs each gets its share of the default MAX_JOBS (shortens the whole when one "
                      "package's compile is a single long nvcc)")
@click.option("--torch-from", type=click.Choice(["venv", "host"]), default="venv", show_default=True,
              help="venv: a venv synced from the lock's stage 1; host: an existing interpreter with torch.")
@interpreter_option("that has torch, with --torch-from host (the wheels are compiled against its torch)")
@click.option("--package", "packages", multiple=True, help="Build only this stage-2 package (repeatable).")
@click.option("--cuda-home", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="CUDA toolkit root (nvcc, cuobjdump); default CUDA_HOME / PATH.")
@cache_dir_option()
@click.option("--sdists", "sdist_dir", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Directory holding the locked sdists (e.g. a bundle's files/), for hosts without an index.")
@ca_bundle_option()
@git_mirror_option
@wheel_cache_options(publish=True)
@json_option("Print the per-package report as JSON on stdout (compile time and peak RSS with --timings).")
@timings_option
def wheels(lock: Path, output: Path, arch_list: ArchList | None, jobs: int | None, parallel: int, torch_from: str,
           interpreter: Path | None, packages: tuple[str, ...], cuda_home: Path | None, cache_dir: Path | None,
           sdist_dir: Path | None, ca_bundle: Path | None, git_mirrors: tuple[str, ...],
           wheel_cache: CacheSource | None, publish_to: PublishTarget | None, as_json: bool, timings: bool) -> None:
    """Build every stage-2 package of LOCKDIR into a wheel (cached by ABI and arch list)."""
    console = stderr_console()
    opts = WheelsOptions(lockdir=lock, output=output, arch_list=arch_list, jobs=jobs, torch_from=torch_from,
                         interpreter=interpreter, cache_dir=cache_dir, cuda_home=cuda_home, ca_bundle=ca_bundle,
                         packages=list(packages), sdist_dir=sdist_dir, parallel=parallel,
                         git_mirrors=list(git_mirrors), cache=wheel_cache, publish=publish_to)
    result = run_wheels(opts, load_matrix(), progress=console.print)
    for p in result.packages:
        console.print(styled("[green]{}[/green] {}", p.cache,
                             f"{p.record.wheel} ({p.seconds:.1f}s, archs: {p.record.arch_check})"))
    console.print(f"wrote {output}: {len(result.packages)} wheel(s) in {result.seconds:.1f}s")
    for pub in result.published:
        console.print(styled("[green]{}[/green] {} in {}", pub.status, pub.wheel, publish_to.url if publish_to else ""))
    if as_json:
        emit_json(result.to_dict(), timings=timings)
