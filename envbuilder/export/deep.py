"""`inspect --deep`: compare an artifact with the image it was exported from, path by path.

The image is read from the local engine (by `--image`, else the SIF's io.envbuilder.image-id
label), merged and given the format's runtime files exactly as `export` does, and the artifact
must hold every one of those paths with the same kind and every symlink with the same target and
resolution (envbuilder.export.verify).
"""

from __future__ import annotations

from pathlib import Path

from envbuilder.atomic import run_tempdir
from envbuilder.errors import ImageNotFoundError
from envbuilder.export import image_source, verify
from envbuilder.export.flatten import LayerSource, merge_layers
from envbuilder.export.formats import get_format
from envbuilder.export.inspect import inspect_artifact
from envbuilder.lock.record import LABEL_IMAGE_ID

IMAGE_ID_LABEL = LABEL_IMAGE_ID


def image_for(report: dict[str, object], image: str | None) -> str:
    if image:
        return image
    labels = report.get("labels")
    ref = labels.get(IMAGE_ID_LABEL) if isinstance(labels, dict) else None
    if not ref:
        raise ImageNotFoundError(
            f"{report.get('path')}: no {IMAGE_ID_LABEL} label names the image to compare with",
            "pass the image: envbuilder inspect --deep --image REF FILE",
        )
    return str(ref)


def check_artifact_against_image(path: Path, image: str | None = None) -> verify.VerifyReport:
    report = inspect_artifact(path)
    ref = image_for(report, image)
    fmt = get_format(str(report["format"]))
    offset = fmt.partition_offset(path)
    client = image_source.docker_client()
    img = image_source.get_image(client, ref)
    with run_tempdir("deep") as tmp:
        archive = Path(tmp) / "image.tar"
        image_source.spool_image(img, archive)
        with image_source.SavedImage(archive, ref, int(img.attrs.get("Size") or 0)) as saved:
            tree = merge_layers(LayerSource(saved.layers))
            labels = {str(k): str(v) for k, v in dict(report.get("labels") or {}).items()}
            fmt.add_runtime_files(tree, saved.info, labels, str(report.get("deffile") or ""))
            expected = verify.tree_from_merged(tree)
    return verify.verify_artifact(path, expected, offset)
