"""The lock record's stage-2 build environment, for the image build.

    stage2_env.py envbuilder.lock.json              -> `export VAR='value'` lines (eval them), and
                                                       ENVBUILDER_STAGE2_SKIP: `--no-install-package NAME` for
                                                       each pin built from its git tag (git_sources.py)
    stage2_env.py --cache-key envbuilder.lock.json  -> a short key for the stage-2 uv cache

Runs inside the image build, so the Dockerfile stays the same for every lock: the variables come
from the lock, not the template. The cache key matters because uv keys a wheel it built from an
sdist by the sdist alone: without it, a stage-2 rebuild after a change of torch, of the arch list
or of stage2_env would install the wheel compiled for the old ones. So stage 2 uses a uv cache
directory per key: the stage-2 env, TORCH_CUDA_ARCH_LIST, NVTE_CUDA_ARCHS, the installed torch
(version and local tag, e.g. +cu126) and the Python. A pure-Python pin change keeps the key, so
the compiled wheels are reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
from importlib import metadata
from typing import Any

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
KEY_ENV = ("TORCH_CUDA_ARCH_LIST", "NVTE_CUDA_ARCHS")


def export_lines(record: dict[str, Any]) -> list[str]:
    env = record.get("stage2_env") or {}
    lines = []
    for name in sorted(env):
        if not _NAME.match(name):
            raise SystemExit(f"stage2_env: {name!r} is not a valid variable name")
        lines.append(f"export {name}={shlex.quote(str(env[name]))}")
    # uv.lock names the kernel-less PyPI sdist of a pin built from its git tag: uv must never build that one
    skip = " ".join(f"--no-install-package {shlex.quote(n)}" for n in sorted(record.get("git_sources") or {}))
    lines.append(f"export ENVBUILDER_STAGE2_SKIP={shlex.quote(skip)}")
    return lines


def cache_key(record: dict[str, Any], environ: dict[str, str]) -> str:
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    facts = {
        "stage2_env": {k: str(v) for k, v in sorted((record.get("stage2_env") or {}).items())},
        "env": {k: environ.get(k, "") for k in KEY_ENV},
        "torch": torch,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def main(argv: list[str]) -> int:
    want_key = "--cache-key" in argv
    paths = [a for a in argv[1:] if a != "--cache-key"]
    with open(paths[0], encoding="utf-8") as fh:
        record = json.load(fh)
    if want_key:
        print(cache_key(record, dict(os.environ)))
        return 0
    for line in export_lines(record):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
