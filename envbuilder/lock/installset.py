"""What a lock installs on its target: the one answer, from `uv export`, with the target's markers evaluated.

uv decides the install set (`uv export --frozen --offline`, the `compile` extra when the lock has one);
envbuilder evaluates the markers for the target (CPython `python` on Linux x86_64). `bundle` plans its
files from it, `install` feeds its hashed requirements to `uv pip install`, and certify's drift check
compares the environment with it.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import InvalidMarker, Marker
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from envbuilder import procs
from envbuilder.atomic import run_tempdir
from envbuilder.errors import LockDirError, UvError
from envbuilder.lock.record import RECORD_NAME
from envbuilder.lock.uvlock import marker_env
from envbuilder.lock.uvrun import uv_binary, uv_env
from envbuilder.toml_cache import tomllib

LOCK_FILES = ("pyproject.toml", "uv.lock", RECORD_NAME)
#: the optional dependency group that holds stage 2 (render/pyproject.py writes it)
STAGE2_EXTRA = "compile"


@dataclass(frozen=True)
class Requirement:
    name: str            # canonical
    version: str         # "" for a path requirement
    path: str | None     # "./wheels/x.whl" for a lock-dir wheel
    marker: str


def export_requirements(lockdir: Path, extras: list[str], no_emit: list[str] | None = None) -> str:
    """`uv export --frozen --offline` of a lock directory (reads uv.lock only): hashed requirements text."""
    with run_tempdir("uv-export") as tmp:
        for name in LOCK_FILES:
            if (lockdir / name).exists():
                shutil.copy2(lockdir / name, Path(tmp) / name)
        cmd = [uv_binary(), "export", "--frozen", "--offline", "--no-emit-project", "--format", "requirements-txt",
               "--no-header", "--no-annotate"]
        for extra in extras:
            cmd += ["--extra", extra]
        for name in no_emit or []:
            cmd += ["--no-emit-package", name]
        proc = procs.run(cmd, cwd=tmp, capture_output=True, text=True, env=uv_env(None))
    if proc.returncode != 0:
        raise UvError(f"uv export failed: {proc.stderr.strip()[-300:]}", "re-run envbuilder lock for this directory")
    return proc.stdout


def parse_requirements(text: str) -> list[Requirement]:
    out = []
    for logical in re.sub(r"\\\n\s*", " ", text).splitlines():
        line = logical.split(" --hash", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        spec, _, marker = line.partition(";")
        spec = spec.strip()
        if spec.startswith(("./", "/", "file:")):
            path = spec
            try:
                name = str(parse_wheel_filename(Path(spec).name)[0])
            except InvalidWheelFilename:
                name = Path(spec).name
            out.append(Requirement(name, "", path, marker.strip()))
            continue
        m = re.match(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;]+)", spec)
        if not m:
            raise LockDirError(f"uv export printed a requirement envbuilder cannot read: {spec!r}",
                               "lock with --source pypi (bundles carry index files and lock-dir wheels only)")
        out.append(Requirement(str(canonicalize_name(m.group(1))), m.group(2), None, marker.strip()))
    return out


def applies(marker: str, python: str, full_version: str | None = None) -> bool:
    if not marker:
        return True
    try:
        return bool(Marker(marker).evaluate(marker_env(python, full_version)))
    except InvalidMarker:
        return True


def declares_stage2(lockdir: Path) -> bool:
    """Whether the lock's pyproject.toml has the stage-2 extra (a lock without stage-2 packages has none)."""
    try:
        data = tomllib.loads((Path(lockdir) / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    extras = (data.get("project") or {}).get("optional-dependencies") or {}
    return isinstance(extras, dict) and STAGE2_EXTRA in extras


def installed_packages(lockdir: Path, python: str, stage2: bool | None = None,
                       full_version: str | None = None) -> list[Requirement]:
    """Every package the lock installs on CPython `python`, Linux x86_64: stage 1 and, with `stage2` (default:
    when the lock declares it), the compile extra. `full_version` (3.11.7) decides the markers on
    python_full_version as the interpreter will (`python_full_version <= '3.11'` holds for 3.11.0, not 3.11.7)."""
    with_stage2 = declares_stage2(lockdir) if stage2 is None else stage2
    text = export_requirements(Path(lockdir), [STAGE2_EXTRA] if with_stage2 else [])
    return [r for r in parse_requirements(text) if applies(r.marker, python, full_version)]
