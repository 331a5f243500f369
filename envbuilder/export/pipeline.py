"""`envbuilder export`: image in the engine -> enroot .sqsh or Apptainer .sif, atomically.

Steps: check the output path, find the image, spool `docker save` to a work dir beside the
output, merge the layers (whiteouts applied), add the runtime's conventions, stream the merged
tar into mksquashfs, (SIF) write header + descriptors around the partition, rename into place,
then render the definition file and launch snippets next to it.

The artifact is written to a hidden temp file in the output directory and renamed at the
end: an error, SIGINT or SIGTERM removes it, so no partial artifact is ever left behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from envbuilder import atomic, canonical, procs
from envbuilder.canonical import sha256_file
from envbuilder.choices import EXPORT_FEEDS, EXPORT_LAYER_SOURCES
from envbuilder.errors import (
    ArtifactImageMismatchError,
    ExportInterruptedError,
    InvalidOptionError,
    LayerStorageUnreadableError,
    OutputPathError,
    OverlayFeedError,
    os_error,
)
from envbuilder.export import image_source, overlay, render, sidecars, squashfs, storage, verify
from envbuilder.export.cache import ExportCache, export_key, mksquashfs_version
from envbuilder.export.flatten import (
    LayerReader,
    LayerSource,
    MergedTree,
    merge_layers,
    merged_stats,
    write_merged_tar,
)
from envbuilder.export.formats import FORMATS, ArtifactFormat, get_format
from envbuilder.image import registry
from envbuilder.image.reference import is_registry_reference
from envbuilder.lock import record as lock_record
from envbuilder.lock.lockdir import open_lockdir
from envbuilder.progress import Progress, no_progress


@dataclass
class ExportOptions:
    image: str
    fmt: str
    output: Path
    squash_options: str | None = None
    lock_dir: Path | None = None
    workdir: Path | None = None
    processors: int | None = None
    launch: render.LaunchParams = field(default_factory=render.LaunchParams)
    snippets: bool = True
    compression: str | None = None  # squashfs.COMPRESSIONS name; default per format
    layers: str = "auto"  # LAYER_SOURCES: the engine's layer directories, docker save, or storage if readable
    feed: str = "auto"  # EXPORT_FEEDS: mount the layers for mksquashfs when this process can, else a tar stream
    cache: bool = True  # reuse / fill the content-addressed export cache
    cache_dir: Path | None = None  # default: ENVBUILDER_EXPORT_CACHE, else ~/.cache/envbuilder/exports


LAYER_SOURCES = EXPORT_LAYER_SOURCES


@dataclass
class ExportResult:
    path: Path
    format: str
    size: int
    sha256: str
    seconds: float
    image: str
    image_id: str
    image_size: int
    source_date_epoch: int
    lock_sha256: str
    row: str
    squash_options: list[str]
    stats: dict[str, int]
    sidecars: list[Path]
    sidecars_kept: list[Path] = field(default_factory=list)  # edited by the user: left as they were
    cache: str = "off"  # hit | miss | off
    cache_key: str = ""
    layers_from: str = ""  # storage | docker-save | cache
    processors: int = 0
    feed: str = ""  # mount | tar: how mksquashfs read the tree (the cached artifact's, on a hit)
    registry_image: str = ""  # IMAGE was a registry reference: the image pulled, REGISTRY/NAME@sha256:...

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.format,
            "size": self.size,
            "sha256": self.sha256,
            "seconds": round(self.seconds, 2),
            "image": self.image,
            "image_id": self.image_id,
            "image_size": self.image_size,
            "source_date_epoch": self.source_date_epoch,
            "lock_sha256": self.lock_sha256,
            "row": self.row,
            "squash_options": self.squash_options,
            "stats": self.stats,
            "sidecars": [str(p) for p in self.sidecars],
            "sidecars_kept": [str(p) for p in self.sidecars_kept],
            "cache": self.cache,
            "cache_key": self.cache_key,
            "layers_from": self.layers_from,
            "processors": self.processors,
            "feed": self.feed,
            "registry_image": self.registry_image,
        }


def check_output(path: Path) -> None:
    """The output's directory must exist and take a new file; the output must not be a directory."""
    parent = path.parent
    if path.is_dir():
        raise OutputPathError(f"output {path} is a directory", "pass a file path, e.g. -o build/nemo.sqsh")
    if not parent.is_dir():
        raise OutputPathError(f"output directory {parent} does not exist", f"create it first: mkdir -p {parent}")
    try:  # one block written and synced: a full disk fails here, before the image is saved
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.probe.", dir=parent)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise os_error(exc, parent, action="write in", flag="-o") from exc


def provenance(info: image_source.ImageInfo, lock_dir: Path | None) -> tuple[int, str, str]:
    """(source_date_epoch, lock_sha256, row): image labels first, then the lock record, else 0/''."""
    labels = info.labels
    record = open_lockdir(lock_dir).record if lock_dir else None  # every hash the record lists, recomputed
    raw_date = labels.get(lock_record.LABEL_SOURCE_DATE) or (record.source_date_epoch if record else 0)
    try:
        epoch = int(raw_date)
    except (TypeError, ValueError):
        epoch = 0
    lock_sha = labels.get(lock_record.LABEL_LOCK_SHA256) or (record.lock_sha256 if record else "")
    row = labels.get(lock_record.LABEL_ROW) or (record.row if record else "")
    return epoch, lock_sha, row


def artifact_labels(info: image_source.ImageInfo, epoch: int, lock_sha: str, row: str) -> dict[str, str]:
    labels = {str(k): str(v) for k, v in info.labels.items()}
    labels.update(
        {
            lock_record.LABEL_LOCK_SHA256: lock_sha,
            lock_record.LABEL_ROW: row,
            lock_record.LABEL_SOURCE_DATE: str(epoch),
            lock_record.LABEL_IMAGE_ID: info.image_id,
        }
    )
    return labels


class _Interrupted(BaseException):
    pass


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise inside the export so cleanup runs (main thread only)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Interrupted(signal.Signals(signum).name)

    try:
        old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _root_attrs(tree: MergedTree) -> tuple[int, int, int]:
    root = tree.get("")
    if root is None or not root.info.isdir():
        return 0o755, 0, 0
    return root.info.mode & 0o7777, root.info.uid, root.info.gid


def export_image(opts: ExportOptions, progress: Progress = no_progress) -> ExportResult:
    """Plan (every option and the image checked, the cache key known before a layer is read), produce the
    artifact (from the export cache, else built), file it in the cache, write its side files."""
    plan = plan_export(opts, progress)
    started = time.monotonic()
    made = produce(plan, progress)
    key = file_in_cache(plan, made, progress)
    written, kept = write_sidecars(plan.output, plan.opts, made.deffile or made.render_deffile(plan.opts.image)) \
        if plan.opts.snippets else ([], [])
    return ExportResult(
        path=plan.output, format=plan.opts.fmt, size=plan.output.stat().st_size, sha256=made.sha256,
        seconds=time.monotonic() - started, image=plan.opts.image, image_id=made.info.image_id,
        image_size=plan.image_size, source_date_epoch=made.epoch, lock_sha256=made.lock_sha, row=made.row,
        squash_options=plan.squash_args, stats=made.stats, sidecars=written, sidecars_kept=kept,
        cache="off" if plan.cache is None else ("hit" if made.from_cache else "miss"), cache_key=key,
        layers_from="cache" if made.from_cache else ("storage" if plan.dirs else "docker-save"),
        processors=plan.processors, feed=made.feed, registry_image=plan.opts.launch.registry_image,
    )  # fmt: skip


@dataclass(frozen=True)
class ExportPlan:
    """An export decided before any layer is read: the checked options, the image, how its layers will be read,
    and everything the artifact's bytes depend on (so the cache key)."""

    opts: ExportOptions
    fmt: ArtifactFormat
    output: Path
    squash_args: list[str]
    processors: int
    image: Any                  # the engine's image (inspected)
    image_size: int
    dirs: list[Path] | None     # the engine's layer directories, or None: docker save
    feed: str                   # mount | tar: what the build will try
    info: image_source.ImageInfo
    epoch: int
    lock_sha: str
    row: str
    cache: ExportCache | None
    mksquashfs: str

    def cache_key(self, feed: str) -> str:
        if self.cache is None:
            return ""
        return export_key(image_id=self.info.image_id, fmt=self.opts.fmt, squash_args=self.squash_args,
                          source_date_epoch=self.epoch, lock_sha256=self.lock_sha, row=self.row,
                          image_ref=self.opts.image, mksquashfs=mksquashfs_version(self.mksquashfs), feed=feed)

    @property
    def work_parent(self) -> Path:
        return Path(self.opts.workdir) if self.opts.workdir else self.output.parent


@dataclass
class Produced:
    """The artifact now at plan.output, and what the report says about it."""

    sha256: str
    stats: dict[str, int]
    feed: str
    info: image_source.ImageInfo
    epoch: int
    lock_sha: str
    row: str
    labels: dict[str, str]
    deffile: str = ""           # rendered for a SIF's build; for a sqsh only when the side files need it
    from_cache: bool = False

    def render_deffile(self, image: str) -> str:
        return _deffile(image, self.labels, self.info, self.row, self.lock_sha)


def _check_options(opts: ExportOptions) -> Path:
    """The absolute output path; every option checked before the engine is asked anything."""
    if not opts.image.strip():
        raise InvalidOptionError("IMAGE is empty", "pass an image reference, e.g. envbuilder/v2.3.0:TAG")
    if str(opts.output) in ("", "."):
        raise OutputPathError(f"-o {str(opts.output)!r} is not a file path", "pass a file path, e.g. -o nemo.sqsh")
    if opts.layers not in LAYER_SOURCES:
        raise InvalidOptionError(f"unknown layer source {opts.layers!r}", f"use one of {', '.join(LAYER_SOURCES)}")
    if opts.feed not in EXPORT_FEEDS:
        raise InvalidOptionError(f"unknown feed {opts.feed!r}", f"use one of {', '.join(EXPORT_FEEDS)}")
    if opts.feed == "mount" and opts.layers == "save":
        raise InvalidOptionError("--feed mount reads the engine's layer directories; --layers save reads none",
                                 "drop one of the two options")
    output = Path(opts.output).absolute()
    if opts.snippets:  # a name the snippets would write into shell: refused before any work
        render.check_launch_names(output, opts.launch)
    check_output(output)
    return output


def plan_export(opts: ExportOptions, progress: Progress) -> ExportPlan:
    fmt = get_format(opts.fmt)
    output = _check_options(opts)
    squash_args = squash_arguments(opts)
    mksquashfs = squashfs.mksquashfs_path()  # ToolMissingError before any work
    lookup = opts.image
    if is_registry_reference(opts.image):  # pulled now, named by the digest the engine verified
        pulled = registry.pull_by_digest(opts.image, progress)
        lookup = pulled.by_digest
        opts = dataclasses.replace(opts, launch=dataclasses.replace(opts.launch, registry_image=pulled.by_digest))
    image = image_source.find_image(lookup)
    dirs = storage.storage_layer_dirs(image) if opts.layers != "save" else None
    if opts.layers == "storage" and dirs is None:
        raise LayerStorageUnreadableError(
            "the engine's layer directories cannot be read from here (not overlay2, a remote engine, "
            "or no permission)", "use --layers save (docker save), or run as a user who can read them")
    info = storage.info_from_inspect(image, opts.image)
    epoch, lock_sha, row = provenance(info, opts.lock_dir)
    return ExportPlan(opts, fmt, output, squash_args, opts.processors or squashfs.default_processors(), image,
                      int(image.attrs.get("Size") or 0), dirs, _intended_feed(opts.feed, dirs), info, epoch,
                      lock_sha, row, ExportCache(opts.cache_dir) if opts.cache else None, mksquashfs)


@dataclass(frozen=True)
class _Staging:
    """The hidden files an export writes beside its output: the artifact being built, a cache hit being copied,
    and a work directory (held with flocks, so a later export knows a live one from a killed one)."""

    tmp: Path
    hit_tmp: Path
    work: Path

    @classmethod
    def create(cls, plan: ExportPlan, progress: Progress) -> _Staging:
        output = plan.output
        # leftovers of an export that was killed (SIGKILL runs no cleanup); a live one holds its flocks
        for stale in (*atomic.remove_abandoned(output.parent, f".{output.name}.", ".tmp"),
                      *atomic.remove_abandoned(plan.work_parent, f".{output.name}.work.")):
            progress(f"removed {stale.name}, left by an earlier export that was killed")
        tmp_fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
        os.close(tmp_fd)
        tmp = Path(tmp_name)
        work = Path(tempfile.mkdtemp(prefix=f".{output.name}.work.", dir=plan.work_parent))
        return cls(tmp, tmp.with_name(tmp.name.removesuffix(".tmp") + ".hit.tmp"), work)

    def remove(self) -> None:
        for leftover in (self.tmp, self.hit_tmp):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        shutil.rmtree(self.work, ignore_errors=True)


def produce(plan: ExportPlan, progress: Progress) -> Produced:
    """The artifact at plan.output, from the export cache or built; interrupted or failed, nothing is left."""
    staging = _Staging.create(plan, progress)
    try:
        with _signals_interrupt(), atomic.hold(staging.tmp), atomic.hold(staging.work):
            return _from_cache(plan, staging.hit_tmp, progress) or _build_artifact(plan, staging, progress)
    except _Interrupted as exc:
        raise ExportInterruptedError(
            f"export interrupted by {exc}; the partial file was removed",
            "run the export again; previous outputs were left as they were",
        ) from None
    except KeyboardInterrupt:
        raise ExportInterruptedError(
            "export interrupted; the partial file was removed", "run the export again"
        ) from None
    except OSError as exc:
        squashfs.raise_if_enospc(exc, plan.output.parent)
        raise
    finally:
        staging.remove()


def _from_cache(plan: ExportPlan, hit_tmp: Path, progress: Progress) -> Produced | None:
    cached = plan.cache.fetch(plan.cache_key(plan.feed), plan.opts.fmt, hit_tmp) if plan.cache is not None else None
    if cached is None:
        return None
    progress(f"cache hit {plan.cache_key(plan.feed)[:12]}: {plan.opts.image} was exported with these options before")
    os.chmod(hit_tmp, 0o644)
    os.replace(hit_tmp, plan.output)
    return Produced(str(cached["sha256"]), {k: int(v) for k, v in (cached.get("stats") or {}).items()},
                    str(cached.get("feed") or plan.feed), plan.info, plan.epoch, plan.lock_sha, plan.row,
                    artifact_labels(plan.info, plan.epoch, plan.lock_sha, plan.row), from_cache=True)


def _build_artifact(plan: ExportPlan, staging: _Staging, progress: Progress) -> Produced:
    opts = plan.opts
    with _open_layers(plan.image, plan.dirs, staging.work, opts.image, plan.image_size, progress) as (info, source):
        epoch, lock_sha, row = provenance(info, opts.lock_dir)
        labels = artifact_labels(info, epoch, lock_sha, row)
        # a SIF carries its definition file; a sqsh does not, so for it the file is rendered for the side files
        # only, after mksquashfs has started
        deffile = _deffile(opts.image, labels, info, row, lock_sha) if plan.fmt.carries_deffile else ""
        job = BuildJob(plan.fmt, staging.tmp, staging.work, info, source, labels, deffile, epoch, lock_sha,
                       plan.squash_args, plan.processors, progress, warm_templates=opts.snippets)
        stats, feed, sha256 = _build(job, plan.feed)
    os.chmod(staging.tmp, 0o644)
    with open(staging.tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(staging.tmp, plan.output)
    return Produced(sha256, stats, feed, info, epoch, lock_sha, row, labels, deffile)


def file_in_cache(plan: ExportPlan, made: Produced, progress: Progress) -> str:
    """The cache key of the artifact; a fresh build is filed under it (the tar feed's key when the mount was
    refused)."""
    key = plan.cache_key(made.feed if not made.from_cache else plan.feed)
    if plan.cache is not None and not made.from_cache:
        progress(f"filing the artifact in the export cache ({plan.cache.root})")
        plan.cache.store(key, plan.opts.fmt, plan.output, {
            "sha256": made.sha256, "size": plan.output.stat().st_size, "image_id": made.info.image_id,
            "format": plan.opts.fmt, "squash_options": plan.squash_args, "stats": made.stats,
            "source_date_epoch": made.epoch, "lock_sha256": made.lock_sha, "row": made.row, "feed": made.feed})
    return key


def squash_arguments(opts: ExportOptions) -> list[str]:
    if opts.squash_options is not None and opts.compression is not None:
        raise InvalidOptionError("--compression and --squash-options both choose the compressor",
                                 "pass one of them")
    if opts.squash_options is not None:
        return squashfs.parse_squash_options(opts.squash_options)
    return squashfs.parse_squash_options(squashfs.compression_options(opts.fmt, opts.compression))


def _deffile(image: str, labels: dict[str, str], info: image_source.ImageInfo, row: str, lock_sha: str) -> str:
    return render.render_deffile(image, _def_labels(labels, info), row, lock_sha)


def _def_labels(labels: dict[str, str], info: image_source.ImageInfo) -> dict[str, str]:
    """Apptainer's docker bootstrap copies the image's labels itself: the definition file lists only ours."""
    return {k: v for k, v in labels.items() if k not in info.labels}


@contextlib.contextmanager
def _open_layers(image: Any, dirs: list[Path] | None, work: Path, ref: str, image_size: int,
                 progress: Callable[[str], None]) -> Iterator[tuple[image_source.ImageInfo, LayerReader]]:
    """(image config, layer reader): the engine's layer directories, else a spooled `docker save`."""
    if dirs is not None:
        progress(f"reading {len(dirs)} layers from the engine's storage")
        yield storage.info_from_inspect(image, ref), storage.StorageLayerSource(dirs)
        return
    progress(f"saving {ref} from the engine")
    archive = work / "image.tar"
    image_source.spool_image(image, archive)
    with image_source.SavedImage(archive, ref, image_size) as saved:
        yield saved.info, LayerSource(saved.layers)


def _intended_feed(requested: str, dirs: list[Path] | None) -> str:
    """mount or tar: what this export will try (the cache key's feed), before any layer is read."""
    if requested == "tar":
        return "tar"
    reason = "the layers are read from docker save" if dirs is None else overlay.unavailable_reason()
    if reason is None:
        return "mount"
    if requested == "mount":
        raise OverlayFeedError(f"cannot mount the image's layers for mksquashfs: {reason}",
                               "run the export as root on the engine's host, or use --feed tar")
    return "tar"


@dataclass(frozen=True)
class BuildJob:
    """One artifact being built: its format and file, the image's config and layers, and how mksquashfs runs."""

    fmt: ArtifactFormat
    tmp: Path
    work: Path
    info: image_source.ImageInfo
    source: LayerReader
    labels: dict[str, str]
    deffile: str
    epoch: int
    lock_sha: str
    squash_args: list[str]
    processors: int
    progress: Progress
    warm_templates: bool = False

    def embedded(self) -> Any:
        return self.fmt.embedded(self.deffile, canonical.dumps(self.labels, ascii_only=True).encode())

    def spec(self, tree: MergedTree, offset: int) -> squashfs.SquashSpec:
        mode, uid, gid = _root_attrs(tree)
        return squashfs.SquashSpec(mtime=self.epoch, options=self.squash_args, processors=self.processors,
                                   offset=offset, root_mode=mode, root_uid=uid, root_gid=gid)


def _build(job: BuildJob, feed: str) -> tuple[dict[str, int], str, str]:
    """Merge the layers, add the runtime's files, give them to mksquashfs (a mounted directory, else
    a tar stream), complete the format's file (SIF: header and descriptors), then check every path and
    symlink against the merged tree. Returns the report's counts, the feed used and the file's sha256."""
    emb = job.embedded()
    job.progress(f"mksquashfs {' '.join(job.squash_args)} on {job.processors} cores")
    if feed == "mount":
        try:
            tree, counts, expected = _build_mounted(job, emb.offset)
            return counts, "mount", _finish(job, emb, tree, counts, expected)
        except (overlay.Unsupported, squashfs.FeedRefused, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno not in overlay.FALLBACK_ERRNOS:
                raise
            job.progress(f"the layers cannot be mounted here ({str(exc).strip() or type(exc).__name__}): "
                         "streaming them to mksquashfs as a tar")
        except ArtifactImageMismatchError as exc:
            job.progress(f"warning: the mounted layers differ from the merged image ({exc.cause}): "
                         "building again from a tar stream")
    job.progress(f"merging {len(job.source.layers)} layers")
    tree = merge_layers(job.source)
    job.fmt.add_runtime_files(tree, job.info, job.labels, job.deffile)
    stats: dict[str, int] = {}

    def stream(stdin: Any) -> None:
        stats.update(write_merged_tar(tree, job.source, stdin, job.epoch))

    squashfs.build_squashfs(job.tmp, job.spec(tree, emb.offset), stream)
    return stats, "tar", _finish(job, emb, tree, stats, verify.tree_from_merged(tree))


def _build_mounted(job: BuildJob, offset: int) -> tuple[MergedTree, dict[str, int], verify.FileTree]:
    """mksquashfs of a read-only overlay of the layer directories plus our top layer, built from point
    lookups so mksquashfs starts at once; the full merge (report counts, the paths to verify) runs
    meanwhile. Raises overlay.Unsupported when the result would not be the tar feed's image."""
    source = job.source
    if not isinstance(source, storage.StorageLayerSource):
        raise overlay.Unsupported("the layers are not directories")
    lazy = overlay.LookupTree(source.dirs)
    job.fmt.add_runtime_files(lazy, job.info, job.labels, job.deffile)
    spec = job.spec(lazy, offset)
    top = job.work / "top"
    overlay.build_top_layer(lazy, set(), top)
    prefix = overlay.mount_command(top, source.dirs, job.work, "mnt")

    def merged() -> tuple[MergedTree, dict[str, int], verify.FileTree]:
        if job.warm_templates:  # the side files are rendered after the build: load jinja2 while mksquashfs works
            import envbuilder.templating  # noqa: F401
        tree = merge_layers(source)
        job.fmt.add_runtime_files(tree, job.info, job.labels, job.deffile)
        return tree, merged_stats(tree, source), verify.tree_from_merged(tree)

    with ThreadPoolExecutor(1) as pool:  # this thread only waits for mksquashfs (another process)
        pending = pool.submit(merged)
        try:
            squashfs.build_squashfs_from_dir(job.tmp, spec, prefix, job.work, "mnt", overlay.mount_failed)
        finally:
            wait([pending])
    tree, stats, expected = pending.result()
    if source.sockets:  # the tar feed drops them (a tar cannot hold one); the mount kept them
        raise overlay.Unsupported(f"a layer holds a socket ({source.sockets[0]})")
    if _root_attrs(tree) != (spec.root_mode, spec.root_uid, spec.root_gid):
        raise overlay.Unsupported("the image's root directory attributes differ from the lookup's")
    return tree, stats, expected


def _finish(job: BuildJob, emb: Any, tree: MergedTree, stats: dict[str, int], expected: verify.FileTree) -> str:
    """Complete the format's file, check every path and symlink in it against the merged tree (adding
    the counts to `stats`); returns the file's sha256."""
    stats["whiteouts"] = tree.whiteouts_applied
    stats["opaque_dirs"] = tree.opaque_dirs_applied
    stats["layers"] = len(job.source.layers)
    job.fmt.finish(job.tmp, emb, job.info, job.lock_sha, job.squash_args, job.epoch)
    job.progress("checking every path and symlink against the image")
    with ThreadPoolExecutor(1) as pool:  # the report's sha256 is read while unsquashfs lists the file
        digest = pool.submit(sha256_file, job.tmp)
        try:
            checked = verify.verify_artifact(job.tmp, expected, emb.offset)
        finally:
            wait([digest])
    stats["paths_verified"], stats["links_verified"] = checked.paths_checked, checked.links_checked
    return digest.result()


def write_sidecars(output: Path, opts: ExportOptions, deffile: str) -> tuple[list[Path], list[Path]]:
    """The definition file and launch snippets beside the artifact, named after its whole file name
    (nemo.sif.def, nemo.sqsh.slurm-pyxis.sh): two formats never share one. Returns (written, kept)."""
    files = {".def": (deffile, 0o644)}
    for suffix, text in render.render_launch(opts.fmt, output, opts.launch).items():
        files[suffix] = (text, 0o755)
    written: list[Path] = []
    kept: list[Path] = []
    for suffix, (text, mode) in files.items():
        p, was_kept = sidecars.write_sidecar(output.with_name(output.name + suffix), text, mode)
        written.append(p)
        if was_kept:
            kept.append(output.with_name(output.name + suffix))
    return written, kept


def native_tools() -> dict[str, str | None]:
    """apptainer / enroot on PATH, offered for a side-by-side build (`--compare`)."""
    return {tool: shutil.which(tool) for tool in sorted(f.native_tool for f in FORMATS.values())}


def _paths(listing: list[str]) -> set[str]:
    """Paths from `unsquashfs -lln` lines (the path is the 6th field on; symlinks end ' -> target')."""
    out = set()
    for line in listing:
        parts = line.split(None, 5)
        if len(parts) == 6:
            out.add(parts[5].split(" -> ")[0])
    return out


def compare_listings(ours: list[str], native: list[str]) -> dict[str, Any]:
    a, b = _paths(ours), _paths(native)
    return {
        "common": len(a & b),
        "only_ours": sorted(a - b)[:50],
        "only_native": sorted(b - a)[:50],
        "only_ours_count": len(a - b),
        "only_native_count": len(b - a),
    }


def compare_with_native(fmt: str, image: str, ours: Path) -> dict[str, Any]:
    """Build the same image with the site's own tool and compare file lists with ours."""

    from envbuilder.errors import RuntimeCommandError, ToolMissingError
    from envbuilder.export import inspect as inspect_mod

    form = get_format(fmt)
    tool = form.native_tool
    path = shutil.which(tool)
    if not path:
        raise ToolMissingError(f"--compare needs {tool} on PATH and it is not there",
                               f"install {tool}, or export without --compare")
    native = ours.with_name(f".{ours.name}.native")
    cmd = form.native_command(path, native, image)
    try:
        proc = procs.run(cmd, capture_output=True, text=True, errors="replace")
        if proc.returncode != 0:
            tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-20:]
            raise RuntimeCommandError(
                f"{tool} failed (exit {proc.returncode}) building the comparison artifact: "
                f"{tail[-1] if tail else 'no output'}",
                f"fix {tool} on this host (its output is below), or export without --compare; "
                "the exported artifact itself was written",
                command=" ".join(cmd), output_tail=tail,
            )
        result = compare_listings(inspect_mod.list_files(ours, form.partition_offset(ours)),
                                  inspect_mod.list_files(native, form.partition_offset(native)))
        result["tool"] = path
        result["command"] = " ".join(cmd)
        return result
    finally:
        with contextlib.suppress(FileNotFoundError):
            native.unlink()
