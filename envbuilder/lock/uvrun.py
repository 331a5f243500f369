"""Run the real `uv` (the one envbuilder depends on) and classify its failures."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from envbuilder import procs
from envbuilder.errors import DiskFullError, NetworkError, UvError
from envbuilder.troubleshoot import troubleshoot
from envbuilder.uvbin import uv_binary, uv_version

_NETWORK = ("dns error", "failed to lookup address", "name or service not known", "connection refused",
            "operation timed out", "error sending request", "tcp connect error", "invalid peer certificate",
            "unknownissuer", "could not connect")


__all__ = ["run_uv_lock", "uv_binary", "uv_env", "uv_version"]


def uv_env(ca_bundle: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    # never download interpreters while locking: resolution does not need one, and a
    # download from GitHub would fail behind registry-only proxies
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")
    env.pop("VIRTUAL_ENV", None)
    if ca_bundle is not None:
        env["SSL_CERT_FILE"] = str(ca_bundle)
    return env


LOG_TAIL_LINES = 20


def _cache_dir(env: dict[str, str]) -> Path:
    if env.get("UV_CACHE_DIR"):
        return Path(env["UV_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "uv"


def _free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):
        if p.exists():
            try:
                st = os.statvfs(p)
            except OSError:
                return None
            return st.f_bavail * st.f_frsize
    return None


def _save_log(log: str) -> str:
    """uv's whole log in a temp file, so the error can say where to read all of it."""
    try:
        fd, path = tempfile.mkstemp(prefix="envbuilder-uv-lock-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(log)
        return path
    except OSError:
        return ""


def _same_fs(a: Path, b: str | Path) -> bool:
    """One filesystem holds both (their free space, read twice, may differ by what others wrote meanwhile)."""
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def _index_and_proxy(env: dict[str, str], report: str) -> str:
    urls = re.findall(r"https?://[^\s`'\")]+", report)
    index = urls[0] if urls else (env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL") or "https://pypi.org/simple")
    proxy = next((env[v] for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy") if env.get(v)), "")
    return f"{index} ({'via proxy ' + _redact(proxy) if proxy else 'no proxy set'})"


def _redact(url: str) -> str:
    """Proxy URLs may carry user:password@: never print them."""
    return re.sub(r"//[^/@]+@", "//***@", url)


def run_uv_lock(project_dir: Path, ca_bundle: Path | None = None, extra: list[str] | None = None) -> str:
    """`uv lock` in project_dir; returns stderr (uv's log). Raises NetworkError / UvError / DiskFullError.

    uv runs in its own process group and dies with envbuilder (procs.run), so an interrupted
    or killed lock leaves no uv writing into the staging directory.
    """
    # not --no-config: it also drops the project's own [tool.uv] table (exclude-newer,
    # no-build-isolation-package), which silently changes the lock
    cmd = [uv_binary(), "lock", *(extra or [])]
    env = uv_env(ca_bundle)
    try:
        proc = procs.run(cmd, cwd=project_dir, capture_output=True, text=True, env=env)
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
    log_file = _save_log(log)
    tail = {"log_tail": last[-LOG_TAIL_LINES:], "log_file": log_file}
    where = f"uv's last lines are above; its whole log is in {log_file}" if log_file else "uv's last lines are above"
    if "No space left on device" in report or "os error 28" in report:
        cache = _cache_dir(env)
        free_out, free_cache = _free_bytes(project_dir), _free_bytes(cache)
        if free_out is not None and (free_cache is None or free_out <= free_cache or _same_fs(project_dir, cache)):
            raise DiskFullError(f"uv lock ran out of disk space on the filesystem of {project_dir.parent}",
                                "free space there or pass an -o on a bigger disk; the previous lock was kept", **tail)
        raise DiskFullError(f"uv lock ran out of disk space in uv's cache ({cache})",
                            "free space (`uv cache prune`), or set UV_CACHE_DIR to a bigger disk", **tail)
    if "No solution found" not in report and any(s in report.lower() for s in _NETWORK):
        advice = troubleshoot(report)
        raise NetworkError(f"uv lock could not reach a package index at {_index_and_proxy(env, report)}: "
                           f"{detail or headline}",
                           advice.fix if advice else "check network access and proxy settings", **tail)
    advice = troubleshoot(report)
    hint = next((ln.strip() for ln in last if ln.strip().startswith("hint:")), None)
    fix = advice.fix if advice else (hint or f"{where}; adjust --set or choose another --nemo row")
    raise UvError(f"uv lock failed: {headline.removeprefix('error: ')}" + (f" ({detail})" if detail else ""),
                  fix, **tail)
