"""`envbuilder keygen`: a new ed25519 key pair for signing certificates (make keys)."""

from __future__ import annotations

from pathlib import Path

import click

from envbuilder.cli.options import json_option
from envbuilder.console import emit_json, stderr_console


@click.command()
@click.option("-o", "--output", type=click.Path(path_type=Path, file_okay=False), default=Path("keys"),
              show_default=True, help="Directory for the pair.")
@click.option("--name", default="envbuilder-signing", show_default=True, help="File stem: NAME.key and NAME.pub.")
@json_option("Print the paths and key id as JSON on stdout.")
def keygen(output: Path, name: str, as_json: bool) -> None:
    """Create an ed25519 key pair: NAME.key (private, mode 0600) and NAME.pub. Never overwrites."""
    from envbuilder.dsse import generate_keypair, key_paths

    pair = generate_keypair(*key_paths(output, name))
    console = stderr_console()
    console.print(f"wrote {pair.private} (private: store it as the CI secret ENVBUILDER_SIGNING_KEY, "
                  f"never commit it) and {pair.public} (public: commit it); key id {pair.keyid[:12]}…")
    if as_json:
        emit_json(pair.to_dict())
