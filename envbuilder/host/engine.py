"""The container engine this host runs (Docker): the one client every stage uses.

`engine_client` connects the docker SDK (imported only when a stage needs the engine) and pings the
daemon; a missing SDK or a daemon that does not answer is DockerUnavailableError (30), whoever asks:
doctor's probe, build, export and certify --image. BuildKit builds go through the engine's CLI
(image/engine.py says why), and export reads image metadata straight off the engine's socket when it
can (export/image_source.py), both beside this client, not instead of it.
"""

from __future__ import annotations

import os
from typing import Any

from envbuilder.errors import DockerUnavailableError

DEFAULT_TIMEOUT_S = 600


def engine_client(timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """A connected docker SDK client, or DockerUnavailableError with the reason."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as exc:  # pragma: no cover - a dependency
        raise DockerUnavailableError("the docker Python SDK is not installed", "pip install docker",
                                     reason="no-sdk") from exc
    try:
        client = docker.from_env(timeout=int(max(1, timeout_s)))
        client.ping()
    except (DockerException, OSError) as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DockerUnavailableError(f"no Docker daemon answers at {host} ({reason[:200]})",
                                     "start it (scripts/setup-host.sh starts dockerd) or set DOCKER_HOST",
                                     reason="no-daemon", said=reason[:200]) from exc
    return client
