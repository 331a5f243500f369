"""Render the Apptainer definition file and the launch snippets from templates/."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from envbuilder import __version__
from envbuilder.errors import InvalidOptionError, UnsafeNameError
from envbuilder.export.formats import get_format
from envbuilder.image.reference import ImageReference


@dataclass(frozen=True)
class LaunchParams:
    """gpus_per_node=0 renders the CPU form: no GPU request, no --nv, `procs_per_node` workers
    (default 2) that use torch.distributed's gloo backend, e.g. to try a script on a CPU partition."""

    gpus_per_node: int = 8
    nodes: int = 2
    train_script: str = "train.py"
    procs_per_node: int | None = None  # default: one per GPU, or 2 without GPUs
    rdzv_port: int | None = None  # None: 10000 + job id % 20000, so two jobs on one head node never meet
    registry_image: str = ""  # the image pushed by digest (REGISTRY/NAME@sha256:...): named as an alternative

    @property
    def workers_per_node(self) -> int:
        if self.procs_per_node:
            return self.procs_per_node
        return self.gpus_per_node or 2


# C0 and C1 controls, DEL and the Unicode line/paragraph separators: any of them can end a line of a
# generated script (a newline in a comment or an #SBATCH line starts a new command) or rewrite a terminal
CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# what a Slurm job name keeps; anything else becomes `_` (the name is a label, not an identity)
JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def check_one_line(value: str, what: str) -> str:
    """`value` unchanged, or UnsafeNameError when it holds a control character."""
    found = CONTROL_CHARACTER.search(value)
    if found:
        raise UnsafeNameError(f"{what} {value!r} has a control character ({found.group()!r})",
                              "use a name of printable characters (a newline there would start a shell command)")
    return value


def train_command(train_script: str) -> str:
    """--train-script (a script and its arguments, split like a shell would) as quoted shell words."""
    check_one_line(train_script, "--train-script")
    try:
        words = shlex.split(train_script)
    except ValueError as exc:
        raise InvalidOptionError(f"--train-script {train_script!r}: {exc}",
                                 "quote it as you would on a command line: 'train.py --cfg \"a b.yaml\"'") from exc
    if not words:
        raise InvalidOptionError("--train-script is empty", "pass the script to launch, e.g. --train-script train.py")
    return shlex.join(words)


def check_launch_names(artifact: Path, params: LaunchParams) -> None:
    """Everything from the user that the launch snippets write into shell, checked before any work."""
    check_one_line(str(artifact), "the output path")
    train_command(params.train_script)
    if params.registry_image:
        ImageReference.parse(params.registry_image, "the pushed image").by_digest  # noqa: B018 - a check
    if params.rdzv_port is not None and not 1024 <= params.rdzv_port <= 65535:
        raise InvalidOptionError(f"--rdzv-port {params.rdzv_port} is outside 1024-65535",
                                 "pick an unprivileged port, or leave it out to take one from the job id")


def job_name(artifact: Path) -> str:
    return JOB_NAME_UNSAFE.sub("_", artifact.name.rsplit(".", 1)[0]) or "envbuilder"


def render_deffile(image_ref: str, labels: dict[str, str], row: str, lock_sha256: str) -> str:
    """Independent of the output path: it is also embedded in the SIF, which must not change with it."""
    from envbuilder.templating import template_env  # jinja2: imported when something is rendered

    # each of these ends up on a line of its own; a newline would start a new section (%post runs commands)
    check_one_line(image_ref, "the image reference")
    check_one_line(row, "the row label")
    check_one_line(lock_sha256, "the lock sha256 label")
    for key, value in labels.items():
        check_one_line(key, "a label name")
        check_one_line(value, f"label {key}")
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

    check_launch_names(artifact, params)
    env = template_env()
    out: dict[str, str] = {}
    command = train_command(params.train_script)
    registry = ImageReference.parse(params.registry_image) if params.registry_image else None
    form = get_format(fmt)
    for template, suffix in form.launch_templates.items():
        out[suffix] = env.get_template(f"launch/{template}").render(
            format=fmt,
            artifact_name=artifact.name,
            artifact_path=shlex.quote(str(artifact)),
            artifact_path_py=repr(str(artifact)),
            snippet_name=shlex.quote(artifact.name + suffix),
            job_name=job_name(artifact),
            gpus_per_node=params.gpus_per_node,
            procs_per_node=params.workers_per_node,
            nodes=params.nodes,
            train_command=command,
            script_name=shlex.split(command)[0],
            train_words_py=repr(shlex.split(command)),
            rdzv_port=params.rdzv_port,
            registry_image=shlex.quote(form.runtime_image(registry)) if registry else "",
            runtime=form.runtime,
        )
    return out


def _runtime_spelling(fmt: str, ref: ImageReference) -> str:
    """The pushed image as the format's runtime names it: pyxis' REGISTRY#NAME@DIGEST, Apptainer's docker://."""
    return get_format(fmt).runtime_image(ref)
