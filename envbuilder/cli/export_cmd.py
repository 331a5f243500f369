"""`envbuilder export` (image -> enroot .sqsh / Apptainer .sif) and `envbuilder inspect FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envbuilder.choices import EXPORT_COMPRESSIONS, EXPORT_FEEDS, EXPORT_FORMATS, EXPORT_LAYER_SOURCES, FORMAT_SUFFIXES
from envbuilder.cli.options import choice, json_option, lock_dir_input, timings_option
from envbuilder.console import emit_json, stderr_console, styled
from envbuilder.errors import InvalidOptionError, ToolMissingError
from envbuilder.safetext import printable


def _format_from(output: Path, fmt: str | None) -> str:
    if fmt:
        return fmt
    suffix = output.suffix.lower().lstrip(".")
    if suffix in FORMAT_SUFFIXES:
        return FORMAT_SUFFIXES[suffix]
    raise InvalidOptionError(
        f"cannot tell the format from {output.name!r}", "pass --format sqsh or --format sif"
    )


@click.command()
@click.argument("image")
@click.option("--format", "fmt", type=choice(EXPORT_FORMATS), default=None,
              help="sqsh: enroot/pyxis squashfs; sif: Apptainer/Singularity image (default: from -o suffix).")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Artifact file to write.")
@click.option("--compression", type=choice(EXPORT_COMPRESSIONS), default=None,
              help="Squashfs compression (default sqsh: zstd, the pyxis guidance - compressed images usually "
                   "start faster because reading them is the bottleneck; sif: gzip, Apptainer's default).")
@click.option("--squash-options", default=None, metavar="'OPTS'",
              help="Raw mksquashfs options instead of --compression (enroot's own default: '-comp lzo -noD').")
@lock_dir_input(exists=True, help="Lock directory: source date, lock sha256 and row when the image lacks the "
                                  "envbuilder labels.")
@click.option("--workdir", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="Where to spool `docker save` (default: the output's directory).")
@click.option("--processors", type=click.IntRange(min=1), default=None,
              help="mksquashfs threads (default: every core this process may use).")
@click.option("--layers", "layers", type=choice(EXPORT_LAYER_SOURCES), default="auto", show_default=True,
              help="Where layers are read: storage = the engine's overlay2 directories (one pass, no docker "
                   "save); save = docker save; auto = storage when readable here.")
@click.option("--feed", type=choice(EXPORT_FEEDS), default="auto", show_default=True,
              help="How mksquashfs reads the image: mount = a read-only overlay of the layer directories "
                   "(needs root; fastest); tar = a tar stream on its stdin; auto = mount when possible. Each "
                   "is deterministic; the two give different bytes.")
@click.option("--no-cache", is_flag=True,
              help="Neither reuse nor fill the export cache (ENVBUILDER_EXPORT_CACHE, default "
                   "~/.cache/envbuilder/exports), keyed by image ID and options.")
@click.option("--gpus-per-node", type=click.IntRange(min=0), default=8, show_default=True,
              help="For the launch snippets; 0 renders their CPU form (no GPU request, gloo workers).")
@click.option("--procs-per-node", type=click.IntRange(min=1), default=None,
              help="Workers torchrun starts per node (default: one per GPU; 2 with --gpus-per-node 0).")
@click.option("--nodes", type=click.IntRange(min=1), default=2, show_default=True,
              help="Node count of the multi-node snippet.")
@click.option("--train-script", default="train.py", show_default=True,
              help="Script (and arguments) the snippets launch, relative to the directory jobs are submitted from.")
@click.option("--rdzv-port", type=click.IntRange(min=1024, max=65535), default=None,
              help="Fixed rendezvous port of the multi-node snippet (default: 10000 + job id % 20000, so two "
                   "jobs on one head node never meet).")
@click.option("--no-snippets", is_flag=True, help="Do not write the .def file and launch snippets.")
@click.option("--compare", is_flag=True,
              help="Also build with the site's apptainer (sif) or enroot (sqsh) and compare the file lists.")
@json_option("Print the export report as JSON on stdout.")
@timings_option
def export(image: str, fmt: str | None, output: Path, compression: str | None, squash_options: str | None,
           lock: Path | None, workdir: Path | None, processors: int | None, layers: str, feed: str, no_cache: bool,
           gpus_per_node: int, procs_per_node: int | None, nodes: int, train_script: str, rdzv_port: int | None,
           no_snippets: bool,
           compare: bool, as_json: bool, timings: bool) -> None:
    """Export IMAGE from the local Docker engine to an enroot .sqsh or an Apptainer .sif."""
    from envbuilder.export.formats import get_format
    from envbuilder.export.pipeline import ExportOptions, compare_with_native, export_image, native_tools
    from envbuilder.export.render import LaunchParams

    console = stderr_console(quiet=as_json)
    opts = ExportOptions(
        image=image, fmt=_format_from(output, fmt), output=output, squash_options=squash_options,
        lock_dir=lock, workdir=workdir, processors=processors, snippets=not no_snippets,
        compression=compression, layers=layers, feed=feed, cache=not no_cache,
        launch=LaunchParams(gpus_per_node=gpus_per_node, nodes=nodes, train_script=train_script,
                            procs_per_node=procs_per_node, rdzv_port=rdzv_port),
    )  # fmt: skip
    if compare:  # fail before the export, not after it
        tool = get_format(opts.fmt).native_tool
        if not native_tools()[tool]:
            raise ToolMissingError(f"--compare needs {tool} on PATH and it is not there",
                                   f"install {tool}, or export without --compare")
    with console.status(f"exporting {image}") as status:
        result = export_image(opts, progress=lambda m: status.update(m))
        report: dict[str, Any] = result.to_dict()
        if compare:
            status.update("building with the native tool to compare")
            report["compare"] = compare_with_native(opts.fmt, image, result.path)
    tools = native_tools()
    report["native_tools"] = tools
    if as_json:
        emit_json(report, timings=timings)
        return
    mib = result.size / 2**20
    console.print(styled("[green]wrote[/] {}", f"{result.path} ({result.format}, {mib:.1f} MiB, "
                         f"{result.seconds:.1f} s)"))
    read = "a mounted directory" if result.feed == "mount" else "a tar stream"
    console.print(f"  sha256 {result.sha256} (mksquashfs read {read})")
    console.print(
        f"  {result.stats['layers']} layers, {result.stats['whiteouts']} whiteouts, "
        f"{result.stats['opaque_dirs']} opaque dirs; source date {result.source_date_epoch}"
    )
    console.print(f"  checked {result.stats['paths_verified']} paths and {result.stats['links_verified']} "
                  "symlinks against the image")
    for p in result.sidecars:
        console.print(f"  + {p}")
    for p in result.sidecars_kept:
        console.print(styled("  [yellow]kept[/] {}: it was edited; the new version is {}.new", p, p))
    if "compare" in report:
        c = report["compare"]
        console.print(f"  compared with {c['command']}: {c['common']} paths in both, "
                      f"{c['only_ours_count']} only ours, {c['only_native_count']} only native")
    form = get_format(opts.fmt)
    if tools[form.native_tool]:
        native = " ".join(form.native_command(form.native_tool, Path(f"native.{form.name}"), image))
        console.print(f"  {form.native_tool} found at {tools[form.native_tool]}: compare with "
                      f"`{native}` and `envbuilder inspect --list`")


@click.command()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--list", "with_listing", is_flag=True, help="Also list every file (unsquashfs -lln).")
@click.option("--deep", is_flag=True,
              help="Also compare every path and symlink with the image in the local engine.")
@click.option("--image", default=None,
              help="With --deep: the image to compare with (default: the SIF's io.envbuilder.image-id label).")
@json_option("Print the report as JSON on stdout.")
def inspect(file: Path, with_listing: bool, deep: bool, image: str | None, as_json: bool) -> None:
    """Read an exported .sqsh or .sif back, show its header and labels, and verify its structure."""
    from envbuilder.export.inspect import inspect_artifact

    report = inspect_artifact(file, with_listing=with_listing)
    if deep:
        from envbuilder.export.deep import check_artifact_against_image

        with stderr_console(quiet=as_json).status("comparing every path and symlink with the image"):
            report["deep"] = check_artifact_against_image(file, image).to_dict()
    if as_json:
        emit_json(report)
        return
    console = stderr_console()
    # what the file says is shown as text with every control character escaped: a crafted SIF cannot
    # rewrite the terminal (or add a line) around this verdict
    console.print(styled("[bold]{}[/]  {}", report["path"], f"{report['format']}  {report['size']} bytes  "
                         f"checks: {report['checks']}"))
    if report.get("header"):  # a format with a header of its own (SIF)
        for key, value in report["header"].items():
            console.print(f"  {key:20} {value!r}" if key == "launch" else f"  {key:20} {printable(value)}")
        console.print("  descriptors:")
        for d in report["descriptors"]:
            extra = f" {d['fstype']} {d['parttype']} {d['arch']}" if "fstype" in d else ""
            console.print(printable(f"    #{d['id']} {d['datatype']:12} offset {d['offset']:>10} size {d['size']:>12}"
                                    f"{extra} {d['name']}"))
    console.print("  labels:")
    for key, value in sorted(report["labels"].items()):
        console.print(f"    {printable(key)} = {printable(value)}")
    sb = report["squashfs"]
    console.print(f"  squashfs {sb['version']}: {sb['compression']}, block {sb['block_size']}, "
                  f"{sb['inodes']} inodes, {sb['bytes_used']} bytes, mkfs_time {sb['mkfs_time']}")
    if deep:
        d = report["deep"]
        console.print(f"  deep: {d['paths_checked']} paths and {d['links_checked']} symlinks as in the image")
    if with_listing:
        for line in report["files"]:
            click.echo(printable(line))
