"""The artifact formats, one object each: everything that differs between an enroot squashfs
and an Apptainer SIF lives here, so the export pipeline has no branch on the format.

Modelled on cibuildwheel's platform modules: the pipeline is written once against the
`ArtifactFormat` protocol, and each format supplies its defaults, the runtime files it adds to
the tree, where the squashfs partition sits in the file, what it writes around it, the launch
snippets, and the site's own converter for `--compare`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from envbuilder.choices import EXPORT_FORMATS
from envbuilder.errors import InvalidOptionError
from envbuilder.export import conventions, sif, squashfs
from envbuilder.export.flatten import MergedTree
from envbuilder.export.image_source import ImageInfo
from envbuilder.image.reference import ImageReference


@dataclass(frozen=True)
class Embedded:
    """The small objects embedded beside the squashfs (SIF only) and the partition's offset."""

    objects: list[sif.ObjectSpec]
    offset: int


class ArtifactFormat(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def default_squash_options(self) -> str:
        """mksquashfs options the format's own tool uses by default."""

    @property
    def native_tool(self) -> str:
        """The site tool that makes this format from a Docker image (for --compare and the hint)."""

    @property
    def runtime(self) -> str:
        """The container runtime the launch snippets run the artifact with."""

    @property
    def carries_deffile(self) -> bool:
        """Whether the file embeds its definition file (which names the image reference it came from)."""

    def runtime_image(self, ref: ImageReference) -> str:
        """A pushed image as this format's runtime names it."""

    @property
    def launch_templates(self) -> dict[str, str]:
        """Launch snippet templates (under templates/launch) -> suffix of the file written beside the artifact."""

    def add_runtime_files(self, tree: MergedTree, info: ImageInfo, labels: dict[str, str], deffile: str) -> None:
        """Files the runtime expects inside the image (enroot: /etc/environment; apptainer: .singularity.d)."""

    def embedded(self, deffile: str, labels_json: bytes) -> Embedded:
        """What goes in front of the squashfs partition, and so where mksquashfs writes it."""

    def finish(self, path: Path, emb: Embedded, info: ImageInfo, lock_sha256: str, squash_args: list[str],
               epoch: int) -> None:
        """Complete the file once mksquashfs wrote the partition (SIF: header and descriptors)."""

    def partition_offset(self, path: Path) -> int:
        """Offset of the squashfs partition in an existing artifact of this format."""

    def native_command(self, tool: str, output: Path, image: str) -> list[str]:
        """The native tool's command that converts `image` from the local engine to `output`."""


@dataclass(frozen=True)
class SqshFormat:
    """enroot / pyxis: the file is a bare squashfs; enroot applies /etc/environment and fstab."""

    name: ClassVar[str] = "sqsh"
    default_squash_options: ClassVar[str] = squashfs.ENROOT_SQUASH_OPTIONS
    native_tool: ClassVar[str] = "enroot"
    runtime: ClassVar[str] = "enroot"
    carries_deffile: ClassVar[bool] = False
    launch_templates: ClassVar[dict[str, str]] = {
        "slurm-pyxis.sh.j2": ".slurm-pyxis.sh", "torchrun-multinode.sbatch.j2": ".torchrun-multinode.sbatch",
        "nemo-run.py.j2": ".nemo-run.py"}

    def add_runtime_files(self, tree: MergedTree, info: ImageInfo, labels: dict[str, str], deffile: str) -> None:
        conventions.add_enroot_files(tree, info)

    def embedded(self, deffile: str, labels_json: bytes) -> Embedded:
        return Embedded([], 0)

    def finish(self, path: Path, emb: Embedded, info: ImageInfo, lock_sha256: str, squash_args: list[str],
               epoch: int) -> None:
        return None

    def partition_offset(self, path: Path) -> int:
        return 0

    def native_command(self, tool: str, output: Path, image: str) -> list[str]:
        return [tool, "import", "-o", str(output), f"dockerd://{image}"]

    def runtime_image(self, ref: ImageReference) -> str:
        return ref.pyxis  # REGISTRY#NAME@DIGEST


@dataclass(frozen=True)
class SifFormat:
    """Apptainer / Singularity: a SIF header, the definition file and labels, then the squashfs."""

    name: ClassVar[str] = "sif"
    default_squash_options: ClassVar[str] = squashfs.SIF_SQUASH_OPTIONS
    native_tool: ClassVar[str] = "apptainer"
    runtime: ClassVar[str] = "apptainer"
    carries_deffile: ClassVar[bool] = True
    launch_templates: ClassVar[dict[str, str]] = {
        "apptainer.sh.j2": ".apptainer.sh", "torchrun-multinode.sbatch.j2": ".torchrun-multinode.sbatch"}

    def add_runtime_files(self, tree: MergedTree, info: ImageInfo, labels: dict[str, str], deffile: str) -> None:
        conventions.add_singularity_files(tree, info, labels, deffile)

    def embedded(self, deffile: str, labels_json: bytes) -> Embedded:
        objects = [sif.ObjectSpec(sif.DATA_DEFFILE, deffile.encode()), sif.ObjectSpec(sif.DATA_LABELS, labels_json)]
        return Embedded(objects, sif.layout(objects)[1])

    def finish(self, path: Path, emb: Embedded, info: ImageInfo, lock_sha256: str, squash_args: list[str],
               epoch: int) -> None:
        part_size = path.stat().st_size - emb.offset
        sif_id = sif.deterministic_id(info.image_id, lock_sha256, " ".join(squash_args))
        sif.write_sif_prefix(path, emb.objects, emb.offset, part_size, info.architecture, sif_id, epoch)

    def partition_offset(self, path: Path) -> int:
        part = sif.read_sif(path).primary_partition()
        return part.offset if part else 0

    def native_command(self, tool: str, output: Path, image: str) -> list[str]:
        return [tool, "build", "--force", str(output), f"docker-daemon://{image}"]

    def runtime_image(self, ref: ImageReference) -> str:
        return ref.apptainer  # docker://REGISTRY/NAME@DIGEST


FORMATS: dict[str, ArtifactFormat] = {f.name: f for f in (SqshFormat(), SifFormat())}
assert tuple(FORMATS) == EXPORT_FORMATS, "choices.EXPORT_FORMATS and the format objects disagree"


def get_format(name: str) -> ArtifactFormat:
    fmt = FORMATS.get(name)
    if fmt is None:
        raise InvalidOptionError(f"unknown format {name!r}", f"use --format {' or '.join(FORMATS)}")
    return fmt
