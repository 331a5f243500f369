"""Read an image out of the local Docker engine: its config and its layer tars, in order.

`docker save` (SDK: `image.save()`) gives a docker-archive tar: manifest.json names the
config blob and the layer tars bottom-to-top. The manifest comes last in the stream, so the
archive is spooled to a work file first and then read with random access.
"""

from __future__ import annotations

import contextlib
import errno
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.errors import DiskFullError, ImageNotFoundError
from envbuilder.host.engine import engine_client

SAVE_TIMEOUT_S = 3600


@dataclass
class ImageInfo:
    ref: str
    image_id: str  # sha256:... of the config
    config: dict[str, Any]  # the image config JSON (architecture, os, config{Env,Cmd,...}, rootfs)
    size: int  # engine-reported uncompressed size

    @property
    def runtime(self) -> dict[str, Any]:
        value = self.config.get("config") or {}
        return value if isinstance(value, dict) else {}

    @property
    def env(self) -> list[str]:
        return list(self.runtime.get("Env") or [])

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.runtime.get("Labels") or {})

    @property
    def entrypoint(self) -> list[str]:
        return list(self.runtime.get("Entrypoint") or [])

    @property
    def cmd(self) -> list[str]:
        return list(self.runtime.get("Cmd") or [])

    @property
    def workdir(self) -> str:
        return str(self.runtime.get("WorkingDir") or "")

    @property
    def volumes(self) -> list[str]:
        return sorted((self.runtime.get("Volumes") or {}).keys())

    @property
    def architecture(self) -> str:
        return str(self.config.get("architecture") or "amd64")


def docker_client() -> Any:
    # `docker save` of a multi-GB image can stall for minutes before its first byte while the
    # engine assembles layer tars: the SDK's 60 s read timeout would abort a healthy export.
    return engine_client(SAVE_TIMEOUT_S)


@dataclass
class InspectedImage:
    """An image as the engine's inspect endpoint describes it: what reading layers from the engine's
    storage needs (`attrs`, `id`). The docker SDK (a quarter-second import) loads only to `save` it."""

    ref: str
    attrs: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.attrs.get("Id") or "")

    def save(self, chunk_size: int, named: bool = False) -> Any:
        return get_image(docker_client(), self.ref).save(chunk_size=chunk_size, named=named)


def find_image(ref: str) -> Any:
    """The image `ref` in the local engine: inspected over its unix socket, else through the SDK."""
    image = _inspect_over_socket(ref)
    return image if image is not None else get_image(docker_client(), ref)


def _inspect_over_socket(ref: str) -> InspectedImage | None:
    """GET /images/REF/json on the engine's unix socket; None when that is not how the engine is reached
    or it does not answer (the SDK then reports what is wrong)."""
    import http.client
    import os
    import socket
    import urllib.parse

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    path = host.removeprefix("unix://")

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(60)
            self.sock.connect(path)

    conn = UnixConnection("localhost")
    try:
        conn.request("GET", f"/images/{urllib.parse.quote(ref, safe='/:@')}/json")
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    if resp.status == 404:
        raise ImageNotFoundError(
            f"image {ref!r} is not in the local Docker engine",
            "build it first (make image / envbuilder build LOCKDIR --tag TAG) or check `docker images`",
        )
    try:
        attrs = json.loads(body) if resp.status == 200 else None
    except ValueError:
        return None
    return InspectedImage(ref, attrs) if isinstance(attrs, dict) and attrs.get("Id") else None


def get_image(client: Any, ref: str) -> Any:
    import docker.errors

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound as exc:
        raise ImageNotFoundError(
            f"image {ref!r} is not in the local Docker engine",
            "build it first (make image / envbuilder build LOCKDIR --tag TAG) or check `docker images`",
        ) from exc
    except docker.errors.APIError as exc:
        raise ImageNotFoundError(
            f"image {ref!r} cannot be read from the engine: {exc.explanation or exc}",
            "check the image reference (name:tag or sha256:ID)",
        ) from exc


def spool_image(image: Any, dest: Path) -> None:
    """Write `docker save` of `image` to `dest` (a work file on the output filesystem)."""
    try:
        with open(dest, "wb") as fh:
            for chunk in image.save(chunk_size=1 << 20, named=False):
                fh.write(chunk)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(
                f"no space left while saving the image to {dest.parent}",
                "free space there or pass --workdir on a larger filesystem",
            ) from exc
        raise


class SavedImage(contextlib.AbstractContextManager["SavedImage"]):
    """An opened docker-archive: the config and one TarFile per layer, bottom first."""

    def __init__(self, archive: Path, ref: str, size: int) -> None:
        self._outer = tarfile.open(archive, mode="r:")  # noqa: SIM115 - closed in close()
        manifest = json.load(self._read("manifest.json"))
        if not manifest:
            raise ImageNotFoundError(f"docker save of {ref!r} returned no image", "check the reference")
        first = manifest[0]
        config = json.load(self._read(first["Config"]))
        config_name = Path(first["Config"]).name
        image_id = "sha256:" + config_name.removesuffix(".json")
        self.info = ImageInfo(ref=ref, image_id=image_id, config=config, size=size)
        self.layers: list[tarfile.TarFile] = []
        for name in first["Layers"]:
            self.layers.append(tarfile.open(fileobj=self._read(name), mode="r:"))  # noqa: SIM115

    def _read(self, name: str) -> Any:
        fh = self._outer.extractfile(name)
        if fh is None:
            raise ImageNotFoundError(f"docker-archive member {name} is missing", "re-run the export")
        return fh

    def close(self) -> None:
        for layer in self.layers:
            layer.close()
        self._outer.close()

    def __exit__(self, *exc: object) -> None:
        self.close()
