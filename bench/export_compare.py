"""Benchmark `envbuilder export` against the runtimes' own converters and the machine's limit, in one run.

    .venv/bin/python bench/export_compare.py IMAGE [--formats sqsh,sif] [--compression zstd]
        [--sif-compression gzip] [--out DIR] [--skip-native] [--save-formats sqsh] [--rounds 3]

For each format, on the same image and the same (warm) page cache; limit, envbuilder and tar feed
interleaved --rounds times with the export cache off (the median round is reported, every round's
seconds beside it, and whether every round gave the same bytes), then the rest once:
  limit       `mksquashfs TREE` of the image's merged root filesystem already on disk, same
              compressor options, -processors = all cores: what this disk + CPU can do at best;
  envbuilder  `envbuilder export` reading layers from the engine's storage (the default), fed to
              mksquashfs as a read-only overlay mount when this process may mount (root), else a tar;
  tar feed    the same with `--feed tar` (the merged tree streamed as a tar: the previous default);
  via save    the same with `--layers save` (docker save spooled, the path before that);
  cache miss  an export with the export cache on, into an empty cache;
  cache hit   a second export of the unchanged image with the export cache on;
  apptainer   (sif) `docker save` + `apptainer build --mksquashfs-args OPTS docker-archive://`,
              run through scripts/bin/apptainer (Debian sid's Apptainer in the cached rootfs);
  enroot      (sqsh) `enroot import dockerd://` when enroot is installed; it is not packaged for
              Debian, so otherwise the issue's documented numbers are reported, marked as such.
Each row: wall seconds, the largest process's peak RSS (GNU time %M, over the process tree),
and peak disk used by that step's outputs and temp files (sampled every 0.2 s). The machine's
load average is printed with the results.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envbuilder.export import conventions, image_source, squashfs, storage  # noqa: E402
from envbuilder.export.flatten import merge_layers, write_merged_tar  # noqa: E402

# documented in the issue (2-core machine, caches dropped, 1.05 GB smoke image, enroot defaults)
ENROOT_DOCUMENTED = {"seconds": 35.1, "envbuilder_then_s": 41.5, "output_mb": 880,
                     "options": "-comp lzo -noD (enroot's default)", "source": "issue 13, measured before this work"}


def _du(paths: list[Path]) -> int:
    total = 0
    for root in paths:
        if root.is_file():
            total += root.stat().st_size
            continue
        for dirpath, _, files in os.walk(root):
            for f in files:
                with contextlib.suppress(OSError):  # a temp file vanished between listing and stat
                    total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
    return total


class DiskPeak:
    """Peak bytes under `paths` while the block runs (sampled)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths, self.peak, self._stop = paths, 0, threading.Event()

    def __enter__(self) -> DiskPeak:
        self.base = _du(self.paths)
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _du(self.paths) - self.base)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _du(self.paths) - self.base)


def run(cmd: list[str], disk: list[Path], env: dict[str, str] | None = None, cwd: Path | None = None
        ) -> dict[str, Any]:
    """Wall time, peak RSS of the process tree's largest process, peak disk under `disk`."""
    timefile = Path(tempfile.mktemp(prefix="bench-time-"))
    full = ["/usr/bin/time", "-o", str(timefile), "-f", "%e %M", *cmd]
    with DiskPeak(disk) as dp:
        t = time.perf_counter()
        proc = subprocess.run(full, capture_output=True, text=True, env=env, cwd=cwd, check=False)
        wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    _, rss_kb = timefile.read_text().split()[-2:]
    timefile.unlink()
    return {"seconds": round(wall, 2), "peak_rss_mb": round(int(rss_kb) / 1024), "peak_disk_mb": round(dp.peak / 1e6),
            "stdout": proc.stdout}


def merged_tree(image_ref: str, dest: Path) -> int:
    """The image's merged root filesystem on disk (untimed): the input of the limit measurement."""
    image = image_source.get_image(image_source.docker_client(), image_ref)
    dirs = storage.storage_layer_dirs(image)
    if dirs is None:
        sys.exit("the engine's layer directories are not readable here: the limit cannot be measured")
    source = storage.StorageLayerSource(dirs)
    tree = merge_layers(source)
    conventions.add_enroot_files(tree, storage.info_from_inspect(image, image_ref))
    dest.mkdir(parents=True)
    tar = subprocess.Popen(["tar", "-x", "--numeric-owner", "-C", str(dest)], stdin=subprocess.PIPE)
    assert tar.stdin is not None
    write_merged_tar(tree, source, tar.stdin, 0)
    tar.stdin.close()
    if tar.wait() != 0:
        sys.exit("tar -x of the merged tree failed")
    return int(image.attrs.get("Size") or 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image")
    ap.add_argument("--formats", default="sqsh,sif")
    ap.add_argument("--compression", default="zstd", help="sqsh compression (envbuilder's default: zstd)")
    ap.add_argument("--sif-compression", default="gzip", help="sif compression (Apptainer's default: gzip)")
    ap.add_argument("--out", type=Path, default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--skip-native", action="store_true", help="do not run apptainer/enroot")
    ap.add_argument("--save-formats", default="sqsh", help="formats also exported with --layers save")
    ap.add_argument("--rounds", type=int, default=3,
                    help="limit / envbuilder / tar feed, interleaved this many times (medians reported)")
    args = ap.parse_args()
    cores = squashfs.default_processors()
    scratch = Path(tempfile.mkdtemp(prefix="bench-export-", dir=args.out))
    os.chmod(scratch, 0o777)  # apptainer runs as uid 1000
    envb = [sys.executable, "-m", "envbuilder", "export", args.image, "--no-snippets", "--json", "--timings"]
    env = {**os.environ, "ENVBUILDER_EXPORT_CACHE": str(scratch / "cache")}
    results: dict[str, Any] = {"image": args.image, "cores": cores, "loadavg_before": os.getloadavg()}
    try:
        size = merged_tree(args.image, scratch / "tree")
        results["image_bytes"] = size
        formats = args.formats.split(",")
        timed: dict[str, dict[str, Any]] = {}
        for fmt in formats:  # while the merged tree (image-sized) is on disk: the limit, interleaved
            comp = args.compression if fmt == "sqsh" else args.sif_compression
            out = scratch / fmt
            out.mkdir()
            os.chmod(out, 0o777)  # apptainer runs as uid 1000 and writes its SIF here
            limit_out = scratch / f"limit.{fmt}"
            rounds: dict[str, list[dict[str, Any]]] = {"limit": [], "envbuilder": [], "tar_feed": []}
            for _ in range(args.rounds):
                r = run(["mksquashfs", str(scratch / "tree"), str(limit_out), "-noappend", "-no-xattrs",
                         "-no-progress", "-quiet", "-processors", str(cores),
                         *squashfs.COMPRESSIONS[comp].split()], [limit_out])
                r["output_mb"] = round(limit_out.stat().st_size / 1e6)
                limit_out.unlink()
                rounds["limit"].append(r)
                for name, extra in (("envbuilder", []), ("tar_feed", ["--feed", "tar"])):
                    target = out / f"{name}.{fmt}"
                    rounds[name].append(_report(run([*envb, "-o", str(target), "--compression", comp, "--no-cache",
                                                     *extra], [out], env=env)))
                    target.unlink()
            timed[fmt] = {name: _median(rs) for name, rs in rounds.items()}
        shutil.rmtree(scratch / "tree")
        for fmt in formats:
            comp = args.compression if fmt == "sqsh" else args.sif_compression
            opts = squashfs.COMPRESSIONS[comp].split()
            out = scratch / fmt
            rows: dict[str, Any] = dict(timed[fmt])
            # the cache: a miss on an empty cache (filing the result is one hard link), then a hit
            rows["cache_miss"] = _report(run([*envb, "-o", str(out / f"a.{fmt}"), "--compression", comp], [out],
                                             env=env))
            rows["cache_hit"] = _report(run([*envb, "-o", str(out / f"d.{fmt}"), "--compression", comp], [out],
                                            env=env))
            if fmt in args.save_formats.split(","):
                rows["via_save"] = _report(run([*envb, "-o", str(out / f"b.{fmt}"), "--compression", comp,
                                                "--no-cache", "--layers", "save"], [out], env=env))
            for p in out.iterdir():
                if p.is_file():
                    p.unlink()
            if fmt == "sif" and not args.skip_native:
                rows.update(_apptainer(args.image, out, opts))
            if fmt == "sqsh":
                rows.update(_enroot(args.image, out, args.skip_native))
            lim = rows["limit"]["seconds"]
            for name in ("envbuilder", "tar_feed"):
                rows[name]["fraction_of_limit"] = round(lim / rows[name]["seconds"], 3)
            native = rows.get("apptainer_total") or rows.get("enroot")
            if native and native.get("seconds"):
                rows["envbuilder"]["ratio_vs_native"] = round(rows["envbuilder"]["seconds"] / native["seconds"], 3)
            results[fmt] = {"compression": comp, "options": opts, **rows}
            print(json.dumps({fmt: results[fmt]}, sort_keys=True), file=sys.stderr, flush=True)  # partial results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["loadavg_after"] = os.getloadavg()
    print(json.dumps(results, indent=2, sort_keys=True))


def _report(row: dict[str, Any]) -> dict[str, Any]:
    """A run of `envbuilder export --json`: its timing plus what the report says."""
    rep = json.loads(row.pop("stdout"))
    row.update(output_mb=round(rep["size"] / 1e6), layers_from=rep["layers_from"], cache=rep["cache"],
               sha256=rep["sha256"][:16], feed=rep.get("feed"))
    return row


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round (by seconds), with every round's seconds beside it."""
    rows = [{k: v for k, v in r.items() if k != "stdout"} for r in rows]
    ordered = sorted(rows, key=lambda r: r["seconds"])
    mid = dict(ordered[len(ordered) // 2])
    mid["all_seconds"] = [r["seconds"] for r in rows]
    if "sha256" in mid:
        mid["same_bytes_every_round"] = len({r["sha256"] for r in rows}) == 1
    return mid


def _apptainer(image: str, out: Path, opts: list[str]) -> dict[str, Any]:
    shim = REPO / "scripts" / "bin" / "apptainer"
    env = dict(os.environ)
    cached_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envbuilder/apptainer-sid/root"
    if "APPTAINER_ROOTFS" not in env and (cached_root / "usr/bin/apptainer").exists():
        env["APPTAINER_ROOTFS"] = str(cached_root)  # use the rootfs as it is: never rebuild it mid-benchmark
    tmp = out / "apptainer-tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o777)
    env["APPTAINER_TMPDIR"] = str(tmp)
    archive = out / "image.tar"
    save = run(["docker", "save", "-o", str(archive), image], [out])
    os.chmod(archive, 0o644)
    build = run([str(shim), "build", "--mksquashfs-args", " ".join(opts), str(out / "native.sif"),
                 f"docker-archive://{archive}"], [out], env=env, cwd=out)
    for r in (save, build):
        r.pop("stdout")
    build["output_mb"] = round((out / "native.sif").stat().st_size / 1e6)
    total = {"seconds": round(save["seconds"] + build["seconds"], 2),
             "peak_rss_mb": max(save["peak_rss_mb"], build["peak_rss_mb"]),
             "peak_disk_mb": save["peak_disk_mb"] + build["peak_disk_mb"]}
    return {"docker_save": save, "apptainer_build": build, "apptainer_total": total}


def _enroot(image: str, out: Path, skip: bool) -> dict[str, Any]:
    if shutil.which("enroot") and not skip:
        r = run(["enroot", "import", "-o", str(out / "native.sqsh"), f"dockerd://{image}"], [out])
        r.pop("stdout")
        return {"enroot": r}
    return {"enroot_documented": ENROOT_DOCUMENTED}


if __name__ == "__main__":
    main()
