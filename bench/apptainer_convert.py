"""Apptainer's own converter against `envbuilder export --format sif`, on one image in one run.

    .venv/bin/python bench/apptainer_convert.py IMAGE [--repeat N] [--json]

Apptainer side: `docker save IMAGE` to a file, then `apptainer build OUT.sif docker-archive://FILE`
(Apptainer 1.4.x from the sid rootfs, run unprivileged through scripts/bin/apptainer; it cannot
reach the engine's socket, so docker-daemon:// is not an option for it). envbuilder side: the
whole `export` with its export cache off (layer read, merge, mksquashfs -comp gzip, SIF, path check).
The runs alternate (ours, theirs, ours, ...) so load drift hits both. Ratio = Apptainer / ours.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from envbuilder.export.image_source import docker_client, get_image
from envbuilder.export.pipeline import ExportOptions, export_image

REPO = Path(__file__).resolve().parent.parent
SHIM = REPO / "scripts" / "bin" / "apptainer"


def apptainer_side(image: Any, work: Path) -> dict[str, Any]:
    archive = work / "image.tar"
    t0 = time.monotonic()
    with open(archive, "wb") as fh:
        for chunk in image.save(chunk_size=1 << 20, named=True):
            fh.write(chunk)
    archive.chmod(0o644)
    t1 = time.monotonic()
    out = work / "native.sif"
    proc = subprocess.run([str(SHIM), "build", "--force", str(out), f"docker-archive://{archive}"],
                          capture_output=True, text=True, cwd=work)
    t2 = time.monotonic()
    if proc.returncode != 0:
        raise SystemExit(f"apptainer build failed:\n{proc.stderr[-3000:]}")
    size = out.stat().st_size
    archive.unlink()
    out.unlink()
    return {"docker_save_s": t1 - t0, "apptainer_build_s": t2 - t1, "total_s": t2 - t0, "bytes": size}


def ours(ref: str, work: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    r = export_image(ExportOptions(image=ref, fmt="sif", output=work / "ours.sif", snippets=False, cache=False))
    wall = time.monotonic() - t0
    size = r.size
    r.path.unlink()
    return {"total_s": wall, "bytes": size, "layers_from": getattr(r, "layers_from", "")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    image = get_image(docker_client(), args.image)
    work = Path(tempfile.mkdtemp(prefix="envbuilder-bench-apptainer-", dir="/tmp"))
    work.chmod(0o777)  # Apptainer runs as uid 1000
    version = subprocess.run([str(SHIM), "--version"], capture_output=True, text=True).stdout.strip()
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "apptainer": []}
    try:
        for _ in range(args.repeat):
            runs["ours"].append(ours(args.image, work))
            runs["apptainer"].append(apptainer_side(image, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(r["total_s"] for r in v) for k, v in runs.items()}
    result = {"image": args.image, "image_size": int(image.attrs.get("Size") or 0), "apptainer": version,
              "cpus": os.cpu_count(), "runs": runs, "median_s": med,
              "ratio_apptainer_over_ours": med["apptainer"] / med["ours"]}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    a = runs["apptainer"][-1]
    print(f"| image | {args.image} ({result['image_size'] / 2**20:.0f} MiB) |")
    print(f"| envbuilder export --format sif | {med['ours']:.1f} s, {runs['ours'][-1]['bytes'] / 2**20:.0f} MiB |")
    print(f"| docker save + {version} build docker-archive:// | {med['apptainer']:.1f} s "
          f"(save {a['docker_save_s']:.1f} s + build {a['apptainer_build_s']:.1f} s), {a['bytes'] / 2**20:.0f} MiB |")
    print(f"| ratio (Apptainer / ours) | {result['ratio_apptainer_over_ours']:.2f} |")


if __name__ == "__main__":
    main()
