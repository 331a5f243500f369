"""Push an image to a registry by digest, and pull one back by digest, through the Docker engine.

Credentials are the engine client's own: the Docker config (`docker login`, DOCKER_CONFIG, credential
helpers), read by the docker SDK and handed to the engine in a request header. envbuilder never takes a
password on its command line, never prints, logs or records one, and nothing it pushes contains one (the
image is the build's, scanned for secrets before the push). TLS is the engine's: a private CA goes in
/etc/docker/certs.d/HOST/ca.crt.

The digest is the registry's name for the manifest it stored. It cannot be an image label (the manifest
holds the labels), so it is recorded in the push result (`build --json`, `push -o`), and every later
consumer (export, the launch snippets, the nightly) names the image by it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from envbuilder.errors import (
    ImageNotFoundError,
    InvalidOptionError,
    RegistryAuthError,
    RegistryPushError,
)
from envbuilder.image import engine
from envbuilder.image.reference import ImageReference
from envbuilder.progress import Progress

_AUTH = re.compile(r"unauthorized|authentication required|no basic auth credentials|denied|401", re.I)
_TLS = re.compile(r"x509|certificate|tls:", re.I)
_DIGEST_LINE = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")


@dataclass(frozen=True)
class PushResult:
    image_id: str
    reference: str  # as asked: REGISTRY/NAME:TAG
    digest: str  # sha256:... of the manifest the registry stored
    seconds: float

    @property
    def by_digest(self) -> str:
        return ImageReference.parse(self.reference).with_digest(self.digest).by_digest

    def to_dict(self) -> dict[str, Any]:
        return {"image_id": self.image_id, "reference": self.reference, "digest": self.digest,
                "by_digest": self.by_digest, "seconds": round(self.seconds, 1)}


@dataclass(frozen=True)
class PulledImage:
    image_id: str
    by_digest: str  # REGISTRY/NAME@sha256:... as the engine verified it


def push_target(text: str, default_tag: str) -> ImageReference:
    """--push REGISTRY/NAME[:TAG], checked before any work; without a tag it gets `default_tag`."""
    ref = ImageReference.parse(text, "--push")
    if ref.digest:
        raise InvalidOptionError(f"--push {text}: a push names a tag, not a digest",
                                 "drop the @sha256:...; the digest is what the push reports")
    return ref if ref.tag else ImageReference(ref.registry, ref.repository, default_tag)


def _fail(message: str, ref: ImageReference) -> Exception:
    line = message.strip().splitlines()[0][:300] if message.strip() else "(no message)"
    if _AUTH.search(line):
        return RegistryAuthError(f"{ref.registry or 'Docker Hub'} refused the credentials for {ref.name}: {line}",
                                 f"log in with `docker login {ref.registry}` (or set DOCKER_CONFIG to a config "
                                 "that has them) and push again")
    if _TLS.search(line):
        return RegistryPushError(f"TLS with {ref.registry} failed: {line}",
                                 f"put the registry's CA in /etc/docker/certs.d/{ref.registry}/ca.crt")
    return RegistryPushError(f"the engine could not reach or write {ref.name}: {line}",
                             "check the registry's address and that it is up (the engine does the transfer)")


def _events(stream: Iterable[dict[str, Any]], ref: ImageReference, progress: Progress) -> str:
    """Follow the engine's push/pull events; the digest it reports, or a typed error."""
    digest = ""
    for ev in stream:
        if "error" in ev or "errorDetail" in ev:
            raise _fail(str((ev.get("errorDetail") or {}).get("message") or ev.get("error") or ""), ref)
        aux = ev.get("aux") or {}
        if isinstance(aux, dict) and str(aux.get("Digest", "")).startswith("sha256:"):
            digest = str(aux["Digest"])
        status = str(ev.get("status", ""))
        if m := _DIGEST_LINE.search(status.lower()):
            digest = digest or m.group(1)
        if status:
            progress(f"{ref.name}: {status} {ev.get('progress', '')}".strip())
    return digest


def push_image(image: str, target: ImageReference, progress: Progress = lambda _m: None) -> PushResult:
    """Tag `image` as `target` and push it; the registry's digest, checked against the engine's record."""
    from docker.errors import APIError, ImageNotFound

    c = engine.client()
    t0 = time.monotonic()
    try:
        img = c.images.get(image)
    except ImageNotFound as exc:
        raise ImageNotFoundError(f"image {image} is not in the local engine", "build it first") from exc
    img.tag(target.name, target.tag)
    try:
        digest = _events(c.api.push(target.name, tag=target.tag, stream=True, decode=True), target, progress)
    except APIError as exc:
        raise _fail(str(exc.explanation or exc), target) from exc
    if not digest:
        raise RegistryPushError(f"the engine pushed {target.engine} but reported no digest",
                                "push again; if it persists, the registry is not a distribution registry")
    # the engine records what it pushed: the digest must be among the image's repo digests
    repo_digests = set(engine.inspect(c, img.id).get("RepoDigests") or [])
    by_digest = target.with_digest(digest).by_digest
    if by_digest not in repo_digests:
        raise RegistryPushError(f"{target.engine}: the engine reported digest {digest}, but its record of the image "
                                f"names {sorted(repo_digests) or 'none'}", "push again")
    return PushResult(image_id=str(img.id), reference=target.engine, digest=digest, seconds=time.monotonic() - t0)


def pull_by_digest(text: str, progress: Progress = lambda _m: None) -> PulledImage:
    """Pull REGISTRY/NAME:TAG or REGISTRY/NAME@sha256:... and return it by digest.

    A reference by digest is pulled by that digest: the engine checks the manifest's sha256 against it and
    each layer against the manifest. A tag is resolved by the registry now (never the engine's old copy of
    the tag) and named by the digest the engine pulled."""
    from docker.errors import APIError, ImageNotFound

    ref = ImageReference.parse(text, "IMAGE")
    c = engine.client()
    if ref.digest:  # already pulled earlier: the engine keeps images by digest, content-addressed
        try:
            img = c.images.get(ref.by_digest)
            return PulledImage(str(img.id), ref.by_digest)
        except ImageNotFound:
            pass
    try:
        tag_or_digest = ref.digest or ref.tag or "latest"
        digest = _events(c.api.pull(ref.name, tag=tag_or_digest, stream=True, decode=True), ref, progress)
    except APIError as exc:
        raise _fail(str(exc.explanation or exc), ref) from exc
    digest = ref.digest or digest
    if not digest:
        raise RegistryPushError(f"the engine pulled {ref.engine} but reported no digest", "pull it again")
    by_digest = ref.with_digest(digest).by_digest
    try:
        img = c.images.get(by_digest)
    except ImageNotFound as exc:
        raise RegistryPushError(f"{ref.engine} was pulled, but the engine has no image {by_digest}",
                                "pull it again") from exc
    if by_digest not in set(img.attrs.get("RepoDigests") or []):
        raise RegistryPushError(f"{by_digest} is not among the pulled image's digests", "pull it again")
    return PulledImage(str(img.id), by_digest)
