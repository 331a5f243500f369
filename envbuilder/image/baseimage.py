"""Bootstrap the Debian test base without a registry: mmdebstrap -> `docker import`.

`python -m envbuilder.image.baseimage [--tag T] [--force]` (also `make base-image`).
Skipped when the tag already exists with this recipe (label io.envbuilder.base-recipe, a hash of
the mmdebstrap arguments and import changes): a recipe change rebuilds it. Debian bookworm
minbase + python3 (3.11) + ca-certificates; SOURCE_DATE_EPOCH pins mmdebstrap's timestamps.
mmdebstrap copies the host's /etc/hostname and /etc/resolv.conf into the tree (the latter mode
0755); both are removed: the runtimes provide them (Docker bind-mounts them, export adds empty
mount points).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

from envbuilder import procs
from envbuilder.atomic import run_tempdir
from envbuilder.errors import BaseImageMissingError, ToolMissingError
from envbuilder.image import engine
from envbuilder.image.images import test_base_tag

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "ca-certificates")
# Debian bookworm 12.11 point release date (2025-05-17); fixed so reruns make the same tree.
SOURCE_DATE_EPOCH = "1747440000"
CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/bash"]',
)


def mmdebstrap_argv(out: Path, mirror: str = MIRROR) -> list[str]:
    mode = "root" if os.geteuid() == 0 else "unshare"
    return ["mmdebstrap", f"--mode={mode}", "--variant=minbase", f"--include={','.join(PACKAGES)}",
            "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--customize-hook=rm -rf $1/var/cache/apt/* $1/var/lib/apt/lists/*",
            "--customize-hook=rm -f $1/etc/hostname $1/etc/resolv.conf",
            SUITE, str(out), mirror]


RECIPE_LABEL = "io.envbuilder.base-recipe"


def recipe_id(mirror: str = MIRROR) -> str:
    """What makes the tree: a change here means the tagged image is stale."""
    argv = mmdebstrap_argv(Path("OUT"), mirror)[2:]  # mode and output path do not change the tree
    text = "\n".join([*argv, *CHANGES, SOURCE_DATE_EPOCH])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _current(c: object, tag: str) -> bool:
    if not engine.image_exists(c, tag):
        return False
    labels = (c.images.get(tag).attrs.get("Config") or {}).get("Labels") or {}  # type: ignore[attr-defined]
    return bool(labels.get(RECIPE_LABEL) == recipe_id())


def bootstrap(tag: str | None = None, force: bool = False, log: bool = True) -> str:
    """Return the tag of the base image, creating it when missing (or when force)."""
    tag = tag or test_base_tag()
    c = engine.client()
    if not force and _current(c, tag):
        return tag
    if shutil.which("mmdebstrap") is None:
        raise ToolMissingError("mmdebstrap is not installed (it bootstraps the test base image)",
                               "run scripts/setup-host.sh (apt-get install mmdebstrap)")
    t0 = time.monotonic()
    with run_tempdir("base") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
        proc = procs.run(mmdebstrap_argv(tar), capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-15:]
            raise BaseImageMissingError(f"mmdebstrap failed to bootstrap {SUITE}: {tail[-1] if tail else ''}",
                                        "check access to deb.debian.org (or set a mirror) and rerun", log_tail=tail)
        repo, _, version = tag.rpartition(":")
        changes = [*CHANGES, f"LABEL {RECIPE_LABEL}={recipe_id()}"]
        c.api.import_image_from_file(str(tar), repository=repo, tag=version, changes=changes)
    if not _current(c, tag):
        raise BaseImageMissingError(f"docker import did not produce {tag}", "rerun with --force")
    if log:
        print(f"base image {tag} bootstrapped in {time.monotonic() - t0:.0f}s", file=sys.stderr)
    return tag


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Bootstrap the Debian test base image (mmdebstrap + docker import).")
    ap.add_argument("--tag", default=None, help="image tag (default: matrices/images.toml [test_base])")
    ap.add_argument("--force", action="store_true", help="rebuild even when the tag exists")
    args = ap.parse_args(argv)
    print(bootstrap(args.tag, args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
