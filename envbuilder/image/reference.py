"""An image reference (`[REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST]`), parsed once, with one spelling per
consumer: the engine, pyxis/enroot and Apptainer.

Docker's rule decides what the first path component is: a registry host when it has a `.` or a `:`, or is
`localhost`; otherwise it is part of a Docker Hub repository. enroot writes `REGISTRY#IMAGE` and accepts
`@sha256:` digests (NVIDIA/enroot src/docker.sh@v4.1.2, docker::_parse_uri); Apptainer reads
`docker://REGISTRY/IMAGE@sha256:...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envbuilder.errors import InvalidOptionError

# distribution's grammar (reference/regexp.go), narrowed to what a push target needs
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                   r"|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?$")


@dataclass(frozen=True)
class ImageReference:
    registry: str  # "" for Docker Hub
    repository: str
    tag: str = ""
    digest: str = ""

    @classmethod
    def parse(cls, text: str, what: str = "image reference") -> ImageReference:
        bad = InvalidOptionError(f"{what} {text!r} is not REGISTRY/NAME[:TAG][@sha256:DIGEST]",
                                 "e.g. registry.example.com:5000/team/nemo:v2.3.0 (lower-case name)")
        rest, _, digest = text.partition("@")
        if digest and not _DIGEST.fullmatch(digest):
            raise bad
        registry = ""
        first, sep, remainder = rest.partition("/")
        if sep and ("." in first or ":" in first or first == "localhost"):
            if not _HOST.fullmatch(first):
                raise bad
            registry, rest = first, remainder
        name, tag = rest, ""
        if ":" in rest.rsplit("/", 1)[-1]:
            name, _, tag = rest.rpartition(":")
            if not _TAG.fullmatch(tag):
                raise bad
        if not _REPOSITORY.fullmatch(name):
            raise bad
        return cls(registry, name, tag, digest)

    @property
    def name(self) -> str:
        """REGISTRY/REPOSITORY (the engine's repository name)."""
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    @property
    def engine(self) -> str:
        """What `docker push`/`docker pull` take: NAME[:TAG][@DIGEST]."""
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    def with_digest(self, digest: str) -> ImageReference:
        if not _DIGEST.fullmatch(digest):
            raise InvalidOptionError(f"{digest!r} is not a sha256 digest", "a digest is sha256: and 64 hex digits")
        return ImageReference(self.registry, self.repository, "", digest)

    @property
    def by_digest(self) -> str:
        """NAME@sha256:... (the one spelling that names these exact bytes)."""
        if not self.digest:
            raise InvalidOptionError(f"{self.engine} names no digest", "push it first, or pass NAME@sha256:DIGEST")
        return f"{self.name}@{self.digest}"

    @property
    def pyxis(self) -> str:
        """srun --container-image / enroot import docker://: REGISTRY#REPOSITORY@sha256:..."""
        head = f"{self.registry}#{self.repository}" if self.registry else self.repository
        return f"{head}@{self.digest}" if self.digest else head + (f":{self.tag}" if self.tag else "")

    @property
    def apptainer(self) -> str:
        """apptainer exec / pull: docker://REGISTRY/REPOSITORY@sha256:..."""
        return "docker://" + (f"{self.name}@{self.digest}" if self.digest else self.engine)


def is_registry_reference(text: str) -> bool:
    """True when `text` names a registry host (so it can be pulled from there), not only a local name."""
    first, sep, _ = text.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")
