"""`envbuilder sbom`: a CycloneDX SBOM of a lock directory and, optionally, the image built from it."""

from __future__ import annotations

from pathlib import Path

import click

from envbuilder import procs
from envbuilder.cli.options import json_option, lock_dir_input
from envbuilder.console import emit_json, stderr_console
from envbuilder.errors import SbomError


@click.command()
@lock_dir_input(positional=True, required=True, exists=True, help="Lock directory to describe (the same as LOCKDIR).")
@click.option("--image", help="Docker image built from the lock: add its OS (dpkg) packages.")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="SBOM file to write (CycloneDX 1.5 JSON), e.g. sbom.cdx.json.")
@click.option("--audit", "audit_file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Audit report of the same lock (envbuilder audit LOCKDIR -o audit.json): its findings become "
                   "the SBOM's CycloneDX vulnerabilities.")
@json_option("Print a summary (path, sha256, component counts) as JSON.")
def sbom(lock: Path, image: str | None, output: Path, audit_file: Path | None, as_json: bool) -> None:
    """Write a CycloneDX SBOM: the lock's Python packages (uv export) plus the image's OS packages."""
    from envbuilder.image.sbom import build_sbom, write_sbom

    image_id = None
    if image:
        got = procs.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                        text=True, check=False)
        if got.returncode != 0:
            raise SbomError(f"image {image} is not in the local Docker engine",
                            f"build it first: envbuilder build {lock} --tag {image}")
        image_id = got.stdout.strip()
    audit = None
    if audit_file is not None:
        from envbuilder.audit.report import AuditReport

        audit = AuditReport.read(audit_file)
    result = write_sbom(build_sbom(lock, image, image_id, audit), output)
    stderr_console().print(f"wrote {output}: {result.python_components} Python + {result.os_components} OS "
                           f"component(s)" + (f" ({result.os_note})" if result.os_note else "")
                           + (f", {result.vulnerabilities} vulnerabilit(ies)" if audit is not None else ""))
    if as_json:
        emit_json(result.to_dict())
