"""Probe the local tools a build/export needs: Docker daemon, enroot, apptainer, mksquashfs, uv.

Every probe returns a fact (available + version or reason) and never raises, with short
timeouts so a hung daemon cannot hang `doctor`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from envbuilder import procs, uvbin
from envbuilder.errors import DockerUnavailableError
from envbuilder.host.engine import engine_client
from envbuilder.host.model import ToolStatus

PROBE_TIMEOUT_S = 5.0
_GIB = 1024**3


def probe_docker(timeout_s: float = 3.0) -> ToolStatus:
    """A Docker daemon answering a ping through the one engine client (host.engine)."""
    client = None
    try:
        client = engine_client(timeout_s)
        version = client.version().get("Version", "unknown")
        return ToolStatus(True, f"daemon {version}")
    except DockerUnavailableError as exc:
        if exc.details.get("reason") == "no-sdk":
            return ToolStatus(False, "docker SDK not installed (pip install docker)")
        return ToolStatus(False, f"daemon not reachable: {exc.details.get('said') or exc.cause}")
    except Exception as exc:  # the daemon answered the ping, then not the version request
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return ToolStatus(False, f"daemon not reachable: {reason}")
    finally:
        if client is not None:
            client.close()


def probe_command(name: str, version_args: list[str], path: str | None = None) -> ToolStatus:
    """A tool on PATH and the first line its version flag prints."""
    exe = path or shutil.which(name)
    if exe is None:
        return ToolStatus(False, "not found on PATH")
    try:
        proc = procs.run([exe, *version_args], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ToolStatus(False, f"{exe}: {exc}")
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    first = lines[0] if lines else ""
    if proc.returncode != 0 and not first:
        return ToolStatus(False, f"{exe} exited {proc.returncode}")
    return ToolStatus(True, f"{first} ({exe})" if first else exe)


def probe_tools() -> dict[str, ToolStatus]:
    return {
        "docker": probe_docker(),
        "enroot": probe_command("enroot", ["version"]),
        "apptainer": probe_command("apptainer", ["--version"]),
        "mksquashfs": probe_command("mksquashfs", ["-version"]),
    }


def uv_version() -> str | None:
    """Version of the uv binary shipped by the `uv` package (the one `lock` runs); None when unknown."""
    return uvbin.uv_version(timeout=PROBE_TIMEOUT_S)


def disk_free_gib(path: Path) -> float | None:
    try:
        return round(shutil.disk_usage(path).free / _GIB, 1)
    except OSError:
        return None


def glibc_version() -> str | None:
    """'2.36' from os.confstr; None on musl or non-Linux."""
    try:
        raw = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):
        return None
    if not raw:
        return None
    return raw.split()[-1]
