"""`envbuilder push IMAGE REGISTRY/NAME[:TAG]`: push an image from the local engine and name it by digest."""

from __future__ import annotations

import json
from pathlib import Path

import click

from envbuilder.cli.options import json_option
from envbuilder.console import emit_json, stderr_console, styled


@click.command()
@click.argument("image")
@click.argument("target", metavar="REGISTRY/NAME[:TAG]")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the push record (reference, digest, by_digest) to this JSON file.")
@json_option("Print the push record as JSON on stdout.")
def push(image: str, target: str, output: Path | None, as_json: bool) -> None:
    """Push IMAGE (a tag or id in the local engine) to REGISTRY/NAME[:TAG] and report its digest.

    Credentials come from the engine's Docker config (`docker login REGISTRY`, DOCKER_CONFIG); none is
    ever printed or written. Without a TAG, IMAGE's own tag is used."""
    from envbuilder.atomic import write_atomic
    from envbuilder.image import registry

    default_tag = image.rsplit("/", 1)[-1].partition(":")[2] or "latest"
    ref = registry.push_target(target, default_tag)
    console = stderr_console(quiet=as_json)
    with console.status(f"pushing {image} to {ref.engine}") as status:
        result = registry.push_image(image, ref, progress=lambda m: status.update(m[:120]))
    record = result.to_dict()
    if output is not None:
        write_atomic(output, json.dumps(record, indent=2, sort_keys=True) + "\n")
    if as_json:
        emit_json(record)
        return
    console.print(styled("[green]pushed[/] {}  ({})", result.by_digest, f"{result.seconds:.1f} s"))
