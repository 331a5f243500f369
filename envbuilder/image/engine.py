"""The Docker engine: the `docker` SDK for everything it can do, the engine's CLI for BuildKit.

Why two clients: docker-py (the SDK) talks the engine API, which has no BuildKit session, so
it cannot pass `--secret` or use `RUN --mount=type=cache|secret` (the classic builder it drives
ignores them). The Debian docker.io CLI (/usr/bin/docker, 20.10) speaks BuildKit natively, so
the build step alone runs `DOCKER_BUILDKIT=1 docker build --progress=plain`, streamed to us.
Daemon check, base-image checks, inspection, labels and `docker save` go through the SDK.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from envbuilder import procs
from envbuilder.errors import BaseImageMissingError, DockerUnavailableError
from envbuilder.host.engine import engine_client

# The first `docker` on PATH may be a newer client without buildx (as here: 28.x in
# /usr/local/bin), whose legacy builder has no --secret; the engine's own CLI has BuildKit.
CLI_CANDIDATES = ("/usr/bin/docker",)


def client() -> Any:
    """A connected SDK client, or DockerUnavailableError (host.engine: the one client)."""
    return engine_client()


def buildkit_cli() -> str:
    """Path of a docker CLI whose `build` has BuildKit (--secret)."""
    override = os.environ.get("ENVBUILDER_DOCKER_CLI")
    candidates = [override] if override else [*CLI_CANDIDATES, shutil.which("docker") or ""]
    for cand in candidates:
        if not cand or not Path(cand).exists():
            continue
        probe = procs.run([cand, "build", "--help"], capture_output=True, text=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
        if probe.returncode == 0 and "--secret" in probe.stdout:
            return cand
    raise DockerUnavailableError(
        "no docker CLI with BuildKit found (needs `docker build --secret`)",
        "install Debian's docker.io (its /usr/bin/docker has BuildKit) or set ENVBUILDER_DOCKER_CLI")


def image_exists(c: Any, ref: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        c.images.get(ref)
        return True
    except ImageNotFound:
        return False


def ensure_base(c: Any, ref: str, pull: bool = True) -> str:
    """Make sure `ref` is usable as a base: local, or pulled now. Returns its image id."""
    from docker.errors import APIError, ImageNotFound

    try:
        return str(c.images.get(ref).id)
    except ImageNotFound:
        pass
    why = "not in the local engine"
    if pull:
        try:
            from docker.utils import parse_repository_tag

            repo, tag = parse_repository_tag(ref)
            return str(c.images.pull(repo, tag=tag or "latest").id)
        except (APIError, ImageNotFound) as exc:
            why = f"not in the local engine and the pull failed: {str(exc).splitlines()[0][:200]}"
    raise BaseImageMissingError(
        f"base image {ref} is {why}",
        "load it (docker load / docker import), make the test base with "
        "`python -m envbuilder.image.baseimage`, or pass --base IMAGE",
        image=ref)


def inspect(c: Any, ref: str) -> dict[str, Any]:
    return dict(c.images.get(ref).attrs)


def run_build(argv: list[str], context: Path, on_line: Callable[[str], None],
              env: dict[str, str] | None = None) -> int:
    """Run `docker build` with BuildKit, feeding each progress line to on_line; returns the status."""
    full_env = {**os.environ, **(env or {}), "DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "plain"}
    # own process group, dies with envbuilder: cancelling the CLI client cancels the BuildKit build
    proc = procs.popen(argv, cwd=context, env=full_env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            on_line(line)
    except BaseException:
        procs.kill_group(proc)
        raise
    return proc.wait()


def save_stream(c: Any, ref: str) -> Iterator[bytes]:
    """`docker save` of one image, as the engine streams it (a tar of layer tars)."""
    image = c.images.get(ref)
    yield from image.save(chunk_size=1 << 20, named=False)


def run_in_image(c: Any, ref: str, command: list[str], timeout: int = 1800) -> tuple[int, str]:
    """Run a throwaway container (no network), return (status, combined output)."""
    container = c.containers.run(ref, command, detach=True, network_disabled=True)
    try:
        result = container.wait(timeout=timeout)
        out = container.logs(stdout=True, stderr=True).decode(errors="replace")
        return int(result.get("StatusCode", 1)), out
    finally:
        container.remove(force=True)
