"""envbuilder.lock.json: inputs, chosen row, provenance per pin and file hashes.

Deterministic by construction: sorted keys, no timestamps, no host-specific paths.
Builds, exports and certificates bind to `lock_sha256` (the sha256 of uv.lock).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from envbuilder import __version__
from envbuilder.errors import LockDirError
from envbuilder.resolve.request import ResolveRequest
from envbuilder.resolve.resolver import Resolution

RECORD_NAME = "envbuilder.lock.json"
SCHEMA = 1


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_date_epoch(exclude_newer: str) -> int:
    try:
        return int(datetime.fromisoformat(exclude_newer.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


def build_record(res: Resolution, req: ResolveRequest, lockdir: Path, uv_version: str,
                 constraints_added: list[dict[str, str]], local_wheels: dict[str, str],
                 find_links_used: list[str], stage1_deferred: list[str] | None = None,
                 target_python: str | None = None, source_builds: dict[str, list[str]] | None = None
                 ) -> dict[str, Any]:
    files = {name: sha256_file(lockdir / name) for name in ("pyproject.toml", "uv.lock")}
    for rel in sorted(local_wheels.values()):
        files[rel] = sha256_file(lockdir / rel)
    return {
        "schema": SCHEMA,
        "envbuilder_version": __version__,
        "uv_version": uv_version,
        "row": res.row,
        "mode": res.mode,
        "source": res.source,
        "inputs": {
            "nemo": req.nemo, "python": req.python, "cuda": req.cuda, "torch": req.torch,
            "torch_index": req.torch_index, "set": [f"{n}=={v}" for n, v in req.overrides],
            "source": req.source, "mode": req.mode, "glibc": req.glibc,
            "allow_minor_compat": req.allow_minor_compat, "find_links": find_links_used,
        },
        "host": {"kind": res.host_origin, "driver": res.driver, "sm": res.sm,
                 "gpu": req.host.gpu_name, "gpu_count": req.host.gpu_count},
        "target": {
            "python": target_python or res.python, "requires_python": res.requires_python, "cuda": res.cuda,
            "cudnn": res.cudnn, "torch": res.pins["torch"].version if "torch" in res.pins else None,
            "torch_variant": res.torch_variant, "torch_index": res.torch_index, "min_driver": res.min_driver,
            "glibc": res.glibc, "platform": "linux-x86_64", "container": res.container,
        },
        "pins": {name: {"version": p.version, "stage": p.stage, "provenance": p.provenance,
                        **({"git": p.git_url, "tag": p.git_tag} if p.git_url else {})}
                 for name, p in sorted(res.pins.items())},
        "local_wheels": dict(sorted(local_wheels.items())),
        "provenance": res.provenance,
        "omitted": res.omitted,
        "constraints_added": constraints_added,
        "stage2_packages": sorted(p.name for p in res.stage(2)),
        # stage-2 packages that stage 1 also depends on: stage 1 must skip them
        # (`uv sync --frozen --no-install-package NAME`), stage 2 builds them
        "stage1_deferred": sorted(stage1_deferred or []),
        # what stage 1 builds from source on target.python: compiled = wheels exist but none fit
        "source_builds": source_builds or {"compiled": [], "sdist_only": []},
        "stage2_env": res.stage2_env,
        "warnings": list(res.warnings),
        "notes": [{"severity": n.severity, "text": n.text, "source": n.source} for n in res.notes],
        "exclude_newer": res.exclude_newer,
        "source_date_epoch": source_date_epoch(res.exclude_newer),
        "files": files,
        "lock_sha256": files["uv.lock"],
    }


def dumps_record(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def read_record(lockdir: Path, verify: bool = True) -> dict[str, Any]:
    """Load a lock directory's record; with verify, check every file hash it lists."""
    lockdir = Path(lockdir)
    path = lockdir / RECORD_NAME
    if not path.exists():
        raise LockDirError(f"{lockdir} has no {RECORD_NAME}",
                           f"create it with: envbuilder lock --nemo TAG -o {lockdir}")
    try:
        record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LockDirError(f"{path}: not valid JSON (line {exc.lineno})", "re-run envbuilder lock") from exc
    if verify:
        for name, digest in sorted(record.get("files", {}).items()):
            f = lockdir / name
            if not f.exists():
                raise LockDirError(f"{lockdir}: {name} is missing", "re-run envbuilder lock")
            if sha256_file(f) != digest:
                raise LockDirError(f"{lockdir}: {name} was changed after locking (sha256 differs from the record)",
                                   "re-run envbuilder lock instead of editing lock files by hand")
    return record
