"""Benchmark `envbuilder export` against `docker save` and the image's uncompressed size.

    .venv/bin/python bench/export.py IMAGE [--out DIR] [--repeat N] [--squash-options-sqsh '...']

For each run: wall time and bytes of `docker save` (the SDK stream written to a file), of the
sqsh export (enroot's default compression) and of the SIF export (gzip), plus the engine's
uncompressed image size. Prints a Markdown table (for BENCHMARKS.md) and, with --json, JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from envbuilder.export.image_source import docker_client, get_image
from envbuilder.export.pipeline import ExportOptions, export_image


def _docker_save(image: Any, dest: Path) -> tuple[float, int]:
    t = time.monotonic()
    with open(dest, "wb") as fh:
        for chunk in image.save(chunk_size=1 << 20, named=False):
            fh.write(chunk)
    return time.monotonic() - t, dest.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image")
    ap.add_argument("--out", type=Path, default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    image = get_image(docker_client(), args.image)
    uncompressed = int(image.attrs.get("Size") or 0)
    rows: dict[str, list[tuple[float, int]]] = {"docker save": [], "export sqsh": [], "export sif": []}
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        d = Path(tmp)
        for i in range(args.repeat):
            rows["docker save"].append(_docker_save(image, d / "save.tar"))
            os.unlink(d / "save.tar")
            for fmt in ("sqsh", "sif"):
                r = export_image(ExportOptions(image=args.image, fmt=fmt, output=d / f"a{i}.{fmt}", snippets=False))
                rows[f"export {fmt}"].append((r.seconds, r.size))
                os.unlink(r.path)

    result = {
        "image": args.image,
        "uncompressed_bytes": uncompressed,
        "host": f"{platform.node()} {os.cpu_count()} CPUs",
        "repeat": args.repeat,
        "runs": {k: [{"seconds": round(s, 2), "bytes": b} for s, b in v] for k, v in rows.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return
    mib = 2**20
    print(f"image {args.image}: {uncompressed / mib:.1f} MiB uncompressed (engine Size), {args.repeat} run(s)\n")
    print("| step | median s | size MiB | size / uncompressed |")
    print("|---|---:|---:|---:|")
    for name, runs in rows.items():
        secs = statistics.median(s for s, _ in runs)
        size = runs[-1][1]
        print(f"| {name} | {secs:.1f} | {size / mib:.1f} | {size / uncompressed:.2f} |")


if __name__ == "__main__":
    main()
