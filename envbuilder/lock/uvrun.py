"""Run the real `uv` (the one envbuilder depends on) and classify its failures."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from envbuilder.errors import DiskFullError, NetworkError, UvError
from envbuilder.troubleshoot import troubleshoot

_NETWORK = ("dns error", "failed to lookup address", "name or service not known", "connection refused",
            "operation timed out", "error sending request", "tcp connect error", "invalid peer certificate",
            "unknownissuer", "could not connect")


def uv_binary() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def uv_version() -> str:
    out = subprocess.run([uv_binary(), "--version"], capture_output=True, text=True, check=False)
    parts = out.stdout.split()
    return parts[1] if len(parts) > 1 else "unknown"


def uv_env(ca_bundle: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    # never download interpreters while locking: resolution does not need one, and a
    # download from GitHub would fail behind registry-only proxies
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")
    env.pop("VIRTUAL_ENV", None)
    if ca_bundle is not None:
        env["SSL_CERT_FILE"] = str(ca_bundle)
    return env


def run_uv_lock(project_dir: Path, ca_bundle: Path | None = None, extra: list[str] | None = None) -> str:
    """`uv lock` in project_dir; returns stderr (uv's log). Raises NetworkError / UvError."""
    # not --no-config: it also drops the project's own [tool.uv] table (exclude-newer,
    # no-build-isolation-package), which silently changes the lock
    cmd = [uv_binary(), "lock", *(extra or [])]
    try:
        proc = subprocess.run(cmd, cwd=project_dir, capture_output=True, text=True,
                              env=uv_env(ca_bundle), check=False)
    except OSError as exc:
        raise UvError(f"cannot run uv: {exc}", "reinstall envbuilder (uv is one of its dependencies)") from exc
    log = proc.stderr
    if proc.returncode == 0:
        return log
    # classify on uv's own error report, not its -v DEBUG chatter
    last = [ln for ln in log.strip().splitlines() if ln.strip() and not ln.lstrip().startswith(("DEBUG", "TRACE"))]
    report = "\n".join(last)
    headline = next((ln for ln in last if ln.startswith("error:")), last[0] if last else "uv lock failed")
    causes = [ln.strip() for ln in last if ln.strip().startswith("cause:")]
    detail = causes[-1] if causes else ""
    if "No space left on device" in report or "os error 28" in report:
        raise DiskFullError("uv lock ran out of disk space (uv cache or the lock directory)",
                            "free space (`uv cache prune`), or set UV_CACHE_DIR to a bigger disk",
                            log_tail=last[-15:])
    if "No solution found" not in report and any(s in report.lower() for s in _NETWORK):
        advice = troubleshoot(report)
        raise NetworkError(f"uv lock could not reach a package index: {detail or headline}",
                           advice.fix if advice else "check network access and proxy settings",
                           log_tail=last[-15:])
    advice = troubleshoot(report)
    hint = next((ln.strip() for ln in last if ln.strip().startswith("hint:")), None)
    fix = advice.fix if advice else (hint or "see the uv log above; adjust --set or choose another --nemo row")
    raise UvError(f"uv lock failed: {headline.removeprefix('error: ')}" + (f" ({detail})" if detail else ""),
                  fix, log_tail=last[-25:])
