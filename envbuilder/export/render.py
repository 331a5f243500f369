"""Render the Apptainer definition file and the launch snippets from templates/."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from envbuilder import __version__
from envbuilder.export.formats import get_format

RDZV_PORT = 29500


@dataclass(frozen=True)
class LaunchParams:
    """gpus_per_node=0 renders the CPU form: no GPU request, no --nv, `procs_per_node` workers
    (default 2) that use torch.distributed's gloo backend, e.g. to try a script on a CPU partition."""

    gpus_per_node: int = 8
    nodes: int = 2
    train_script: str = "train.py"
    procs_per_node: int | None = None  # default: one per GPU, or 2 without GPUs
    rdzv_port: int = RDZV_PORT

    @property
    def workers_per_node(self) -> int:
        if self.procs_per_node:
            return self.procs_per_node
        return self.gpus_per_node or 2





def render_deffile(image_ref: str, labels: dict[str, str], row: str, lock_sha256: str) -> str:
    """Independent of the output path: it is also embedded in the SIF, which must not change with it."""
    from envbuilder.templating import template_env  # jinja2: imported when something is rendered

    return template_env().get_template("apptainer.def.j2").render(
        image_ref=image_ref,
        labels=labels,
        row=row,
        lock_sha256=lock_sha256,
        envbuilder_version=__version__,
    )


def render_launch(fmt: str, artifact: Path, params: LaunchParams) -> dict[str, str]:
    """{suffix: text} of the launch snippets for `fmt` ('sqsh' or 'sif')."""
    from envbuilder.templating import template_env

    env = template_env()
    stem = artifact.name.rsplit(".", 1)[0]
    out: dict[str, str] = {}
    for template, suffix in get_format(fmt).launch_templates.items():
        out[suffix] = env.get_template(f"launch/{template}").render(
            format=fmt,
            artifact_name=artifact.name,
            artifact_path=shlex.quote(str(artifact)),
            job_name=stem,
            gpus_per_node=params.gpus_per_node,
            procs_per_node=params.workers_per_node,
            nodes=params.nodes,
            train_script=params.train_script,
            rdzv_port=params.rdzv_port,
        )
    return out
