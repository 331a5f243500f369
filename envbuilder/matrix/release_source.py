"""Where `matrix derive` reads a release from: the edge (git, archives, PyPI), kept out of derive.py.

A release source is a local clone or bare mirror (read with `git show` / `git ls-tree`, never
checked out), a git URL (cloned bare, blobs on demand, into a temporary directory), or a source
archive (.tar.gz, .tgz, .tar, .zip; a GitHub archive's top directory is stripped). An archive has
no submodule commits: megatron-core is read from the archive's own 3rdparty/Megatron-LM when it
carries one, else from --megatron-lm, else it is unknown.

PyPI facts are read through the JSON API (first uploads) and the simple API's PEP 658 metadata
(torch's wheel METADATA), or from a recorded snapshot of both (`--snapshot`), so a derivation can
be reviewed and tested offline.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from envbuilder import procs
from envbuilder.atomic import write_atomic
from envbuilder.errors import NetworkError, ReleaseSourceError
from envbuilder.matrix.derive import DerivedRow, PypiFacts, TeRelease, derive_row
from envbuilder.matrix.load import load_pypi_stubs
from envbuilder.matrix.refresh import PYPI_JSON, first_uploads
from envbuilder.matrix.release_files import MBRIDGE_REPO, MEGATRON_LM_REPO, SUBMODULE, read_release
from envbuilder.progress import Progress

GIT_TIMEOUT_S = 600
SIMPLE_JSON = "https://pypi.org/simple/{name}/"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
PYPI_WORKERS = 8  # concurrent JSON reads: a release's closure is ~250 packages
TE_REPO = "NVIDIA/TransformerEngine"


def _git(git_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    proc = procs.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, timeout=GIT_TIMEOUT_S)
    if check and proc.returncode != 0:
        raise ReleaseSourceError(f"git {' '.join(args[:2])} in {git_dir} failed: "
                                 f"{proc.stderr.decode(errors='replace').strip().splitlines()[-1:] or ['']}",
                                 "check the clone or mirror")
    return proc


@dataclass
class GitTree:
    """A repository at one ref, read from a clone's or bare mirror's object store."""

    git_dir: Path
    repo: str
    ref: str

    def read(self, path: str) -> str | None:
        proc = _git(self.git_dir, "show", f"{self.ref}:{path}", check=False)
        return proc.stdout.decode("utf-8", errors="replace") if proc.returncode == 0 else None

    def submodule_commit(self, path: str) -> str | None:
        out = _git(self.git_dir, "ls-tree", self.ref, "--", path).stdout.decode()
        m = re.match(r"160000 commit ([0-9a-f]{40})\t", out)
        return m.group(1) if m else None

    def paths(self, prefix: str) -> list[str]:
        out = _git(self.git_dir, "ls-tree", "-r", "--name-only", self.ref, "--", prefix).stdout.decode()
        return [line for line in out.splitlines() if line]

    def tags(self) -> list[str]:
        return [t for t in _git(self.git_dir, "tag", "--list").stdout.decode().split() if t]


@dataclass
class ArchiveTree:
    """A source archive's files (read into memory once; release archives are a few MB)."""

    files: dict[str, bytes]
    repo: str
    ref: str

    def read(self, path: str) -> str | None:
        data = self.files.get(path)
        return data.decode("utf-8", errors="replace") if data is not None else None

    def submodule_commit(self, path: str) -> str | None:
        return None  # archives carry a submodule's files (if at all), never its commit

    def paths(self, prefix: str) -> list[str]:
        pre = prefix.rstrip("/") + "/"
        return sorted(p for p in self.files if p.startswith(pre))

    def subtree(self, prefix: str, repo: str) -> ArchiveTree | None:
        pre = prefix.rstrip("/") + "/"
        files = {p[len(pre):]: d for p, d in self.files.items() if p.startswith(pre)}
        return ArchiveTree(files, repo, f"{self.ref}:{prefix}") if files else None


def git_dir_of(path: Path) -> Path | None:
    """The object store of a clone (path/.git) or a bare mirror (path itself)."""
    if (path / ".git").exists():
        return path / ".git"
    if (path / "HEAD").is_file() and (path / "objects").is_dir():
        return path
    return None


def _read_archive(path: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    if not info.is_dir():
                        files[info.filename] = z.read(info)
        else:
            with tarfile.open(path) as t:
                for member in t.getmembers():
                    if member.isfile():
                        f = t.extractfile(member)
                        if f is not None:
                            files[member.name] = f.read()
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ReleaseSourceError(f"{path}: not a readable source archive ({exc})",
                                 "pass a .tar.gz/.zip of the release tag, a clone or a mirror") from exc
    tops = {p.split("/", 1)[0] for p in files}
    if len(tops) == 1 and all("/" in p for p in files):  # GitHub's Megatron-Bridge-0.6.0/ prefix
        top = next(iter(tops)) + "/"
        files = {p[len(top):]: d for p, d in files.items()}
    return files


def _is_url(source: str) -> bool:
    return bool(re.match(r"^(https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:", source))


@contextmanager
def open_release(source: str, tag: str, progress: Progress = lambda _: None
                 ) -> Iterator[tuple[GitTree | ArchiveTree, list[GitTree | ArchiveTree]]]:
    """The release tree at `tag` and the trees of newer release tags (the closest first), where
    docs/versions1.json and the software-versions table name a release's container and versions."""
    path = Path(source)
    if _is_url(source):
        with tempfile.TemporaryDirectory(prefix="envbuilder-derive-") as tmp:
            progress(f"cloning {source} (bare, blobs on demand)")
            proc = procs.run(["git", "clone", "--quiet", "--bare", "--filter=blob:none", source, tmp],
                             capture_output=True, timeout=GIT_TIMEOUT_S)
            if proc.returncode != 0:
                last = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["git clone failed"]
                raise ReleaseSourceError(f"cannot clone {source}: {last[0]}",
                                         "check network access, or pass a local clone, mirror or source archive")
            yield _git_release(Path(tmp), tag, MBRIDGE_REPO)
        return
    if path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES):
        yield ArchiveTree(_read_archive(path), MBRIDGE_REPO, tag), []
        return
    git_dir = git_dir_of(path) if path.is_dir() else None
    if git_dir is None:
        raise ReleaseSourceError(f"{source}: not a git clone, bare mirror, git URL or source archive",
                                 "pass --from a clone/mirror path, a git URL or a .tar.gz/.zip of the tag")
    yield _git_release(git_dir, tag, MBRIDGE_REPO)


def _release_version(tag: str) -> Version | None:
    m = re.fullmatch(r"v?(\d+\.\d+\.\d+)", tag)
    try:
        return Version(m.group(1)) if m else None
    except InvalidVersion:
        return None


def _git_release(git_dir: Path, tag: str, repo: str) -> tuple[GitTree, list[GitTree | ArchiveTree]]:
    if _git(git_dir, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}", check=False).returncode != 0:
        raise ReleaseSourceError(f"{git_dir}: no tag {tag}", "fetch the tags (git fetch --tags) or check the version")
    tree = GitTree(git_dir, repo, tag)
    mine = _release_version(tag)
    newer = sorted((v, t) for t in tree.tags() if (v := _release_version(t)) is not None and mine is not None
                   and v > mine)
    return tree, [GitTree(git_dir, repo, t) for _, t in newer]


@contextmanager
def open_megatron_lm(source: str | None, commit: str | None, release: GitTree | ArchiveTree,
                     progress: Progress = lambda _: None) -> Iterator[GitTree | ArchiveTree | None]:
    """Megatron-LM at the submodule commit: --megatron-lm's clone/mirror/URL, else the archive's own
    3rdparty/Megatron-LM, else None (megatron-core is then unknown, said so in its source)."""
    if source is None:
        if isinstance(release, ArchiveTree):
            yield release.subtree(SUBMODULE, MEGATRON_LM_REPO)
        else:
            yield None
        return
    if commit is None:
        yield None
        return
    if _is_url(source):
        with tempfile.TemporaryDirectory(prefix="envbuilder-megatron-lm-") as tmp:
            progress(f"cloning {source} (bare, blobs on demand)")
            proc = procs.run(["git", "clone", "--quiet", "--bare", "--filter=blob:none", source, tmp],
                             capture_output=True, timeout=GIT_TIMEOUT_S)
            if proc.returncode != 0:
                raise ReleaseSourceError(f"cannot clone {source}", "check network access, or pass a local mirror")
            yield _at_commit(Path(tmp), commit, MEGATRON_LM_REPO)
        return
    git_dir = git_dir_of(Path(source))
    if git_dir is None:
        raise ReleaseSourceError(f"--megatron-lm {source}: not a git clone, bare mirror or git URL",
                                 "pass a Megatron-LM clone or mirror")
    yield _at_commit(git_dir, commit, MEGATRON_LM_REPO)


def _at_commit(git_dir: Path, commit: str, repo: str) -> GitTree:
    if _git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
        raise ReleaseSourceError(f"{git_dir} has no commit {commit} ({repo})",
                                 "fetch it (git fetch origin COMMIT) or pass a newer mirror")
    return GitTree(git_dir, repo, commit)


def te_release(source: str | None, commit: str | None) -> TeRelease | None:
    """The first Transformer Engine release tag containing upstream's git pin, with the commit's
    build_tools/VERSION.txt (None without --te or a commit)."""
    if source is None or commit is None:
        return None
    git_dir = git_dir_of(Path(source))
    if git_dir is None:
        raise ReleaseSourceError(f"--te {source}: not a git clone or bare mirror", "pass a TransformerEngine mirror")
    tree = _at_commit(git_dir, commit, TE_REPO)
    version = (tree.read("build_tools/VERSION.txt") or "").strip()
    tags = _git(git_dir, "tag", "--contains", commit).stdout.decode().split()
    releases = sorted((v, t) for t in tags if (v := _te_tag_version(t)) is not None)
    if not version or not releases:
        return None
    return TeRelease(commit, releases[0][1], version)


def _te_tag_version(tag: str) -> Version | None:
    m = re.fullmatch(r"v(\d+\.\d+(?:\.\d+)?)", tag)
    return Version(m.group(1)) if m else None


# --- PyPI ------------------------------------------------------------------------------------


def _context(ca_bundle: Path | None) -> ssl.SSLContext:
    cafile = str(ca_bundle) if ca_bundle else os.environ.get("SSL_CERT_FILE")
    return ssl.create_default_context(cafile=cafile if cafile and Path(cafile).exists() else None)


def _get(url: str, ctx: ssl.SSLContext, accept: str | None = None) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=60, context=ctx) as resp:
        data: bytes = resp.read()
        return data


def fetch_pypi(names: list[str], torch_version: str | None, python: str, ca_bundle: Path | None = None,
               progress: Progress = lambda _: None) -> PypiFacts:
    """First uploads of `names` and the METADATA of torch's cpXY manylinux x86_64 wheel."""
    from concurrent.futures import ThreadPoolExecutor

    ctx = _context(ca_bundle)

    def one(name: str) -> dict[str, str]:
        try:
            return first_uploads(json.loads(_get(PYPI_JSON.format(name=name), ctx)))
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            return {}  # not on PyPI at all

    try:
        progress(f"reading the release history of {len(names)} packages from {PYPI_JSON.format(name='NAME')}")
        with ThreadPoolExecutor(PYPI_WORKERS) as pool:
            uploads = dict(zip(names, pool.map(one, names), strict=True))
        metadata = {}
        if torch_version:
            meta = _torch_metadata(torch_version, python, ctx, progress)
            if meta is not None:
                metadata[f"torch=={torch_version}"] = meta
    except OSError as exc:
        raise NetworkError(f"cannot read PyPI: {exc}",
                           "check network access (or --ca-bundle), or pass --snapshot FILE") from exc
    return PypiFacts(uploads, metadata)


def _torch_metadata(version: str, python: str, ctx: ssl.SSLContext, progress: Progress) -> str | None:
    index = json.loads(_get(SIMPLE_JSON.format(name="torch"), ctx, "application/vnd.pypi.simple.v1+json"))
    tag = f"cp{python.replace('.', '')}"
    for f in index.get("files", []):
        name = str(f.get("filename", ""))
        if name.startswith(f"torch-{version}-{tag}-{tag}-manylinux") and name.endswith("_x86_64.whl"):
            progress(f"reading {name}.metadata")
            return _get(str(f["url"]) + ".metadata", ctx).decode("utf-8", errors="replace")
    return None


def save_snapshot(facts: PypiFacts, path: Path) -> str:
    """The snapshot text (what `--snapshot` reads back): `packages` as `matrix refresh` records them,
    plus `metadata`."""
    from datetime import datetime, timezone

    return json.dumps({"packages": {k: dict(sorted(v.items())) for k, v in sorted(facts.uploads.items())},
                       "metadata": dict(sorted(facts.metadata.items())),
                       "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                       "source": f"{PYPI_JSON.format(name='<name>')} (first upload per version, yanked files ignored); "
                                 "torch's wheel METADATA (its PEP 658 metadata file)"},
                      indent=1, sort_keys=True) + "\n"


def load_pypi_snapshot(path: Path) -> PypiFacts:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        uploads = {str(p): {str(v): str(t) for v, t in vs.items()} for p, vs in data["packages"].items()}
        metadata = {str(k): str(v) for k, v in data.get("metadata", {}).items()}
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise ReleaseSourceError(f"{path}: not a PyPI snapshot ({exc})",
                                 "record one with --save-snapshot, or read PyPI (leave out --snapshot)") from exc
    return PypiFacts(uploads, metadata)


# --- one derivation, end to end -----------------------------------------------------------------

DEFAULT_SOURCE = "https://github.com/NVIDIA-NeMo/Megatron-Bridge.git"


def gitmodules_url(tree: GitTree | ArchiveTree, path: str) -> str | None:
    text = tree.read(".gitmodules") or ""
    m = re.search(rf'path\s*=\s*{re.escape(path)}\s*\n\s*url\s*=\s*(\S+)', text)
    return m.group(1) if m else None


def derive_release(version: str, source: str = DEFAULT_SOURCE, megatron_lm: str | None = None,
                   te: str | None = None, snapshot: Path | None = None, save_to: Path | None = None,
                   ca_bundle: Path | None = None, progress: Progress = lambda _: None) -> DerivedRow:
    """Read Megatron-Bridge `version` (tag vVERSION) from `source` and PyPI, and derive its row.

    megatron_lm: a Megatron-LM clone, mirror or URL (default: the submodule's URL when `source`
    is a URL). te: a TransformerEngine clone or mirror to name the release tag of upstream's TE pin.
    snapshot: read PyPI from a recorded snapshot; save_to: record what was read from PyPI.
    """
    tag = version if version.startswith("v") else f"v{version}"
    version = tag[1:]
    with open_release(source, tag, progress) as (tree, docs):
        progress(f"reading {MBRIDGE_REPO}@{tag}")
        files = read_release(tree)
        if snapshot is not None:
            pypi = load_pypi_snapshot(snapshot)
        else:
            torch = next((p.version for p in files.pins() if p.name == "torch"), None)
            pypi = fetch_pypi(files.pypi_names(), torch, files.python, ca_bundle, progress)
        if save_to is not None:
            write_atomic(save_to, save_snapshot(pypi, save_to))
        commit = tree.submodule_commit(SUBMODULE)
        if megatron_lm is None and _is_url(source):
            megatron_lm = gitmodules_url(tree, SUBMODULE)
        pin = re.search(r"transformer-engine\s*@\s*git\+\S+?@([0-9a-f]{40})", files.pyproject_text)
        te_rel = te_release(te, pin.group(1) if pin else None)
        with open_megatron_lm(megatron_lm, commit, tree, progress) as lm:
            return derive_row(files, version, pypi, docs, lm, te_rel, load_pypi_stubs())


NEMO_NEEDS = ("uv.lock", "docs/versions1.json")


def refuse_nemo(tag: str, source: str | None) -> None:
    """`derive --nemo`: NeMo 2.x tags carry no uv.lock and no container map, so their rows stay
    curated. With --from, the tag is read and the missing files are named."""
    from envbuilder.errors import ReleaseArtifactError

    if source is None:
        raise ReleaseArtifactError(f"NeMo {tag}: NVIDIA/NeMo's release tags carry no uv.lock and no "
                                   "docs/versions1.json, so its row cannot be derived", "keep the curated NeMo row "
                                   "(matrices/nemo.toml); pass --from a NeMo clone to see what the tag holds",
                                   field="nemo", ref=tag)
    path = Path(source)
    git_dir = git_dir_of(path) if path.is_dir() else None
    if git_dir is None:
        raise ReleaseSourceError(f"{source}: not a git clone or bare mirror", "pass a NeMo clone or mirror")
    if _git(git_dir, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}", check=False).returncode != 0:
        raise ReleaseSourceError(f"{source}: no tag {tag}", "fetch the tags (git fetch --tags) or check the tag")
    tree = GitTree(git_dir, "NVIDIA/NeMo", tag)
    missing = [p for p in NEMO_NEEDS if tree.read(p) is None]
    raise ReleaseArtifactError(
        f"NVIDIA/NeMo@{tag} lacks {', '.join(missing) or 'nothing'}: " + (
            "a NeMo row cannot be derived from it" if missing else
            "deriving NeMo rows is not implemented (the tag has the files; open an issue)"),
        "keep the curated NeMo row (matrices/nemo.toml)", file=missing[0] if missing else None, field="nemo",
        ref=tag)


@dataclass
class DeriveOutcome:
    """One new Megatron-Bridge release that `matrix refresh --derive-from` tried to derive."""

    version: str
    row: DerivedRow | None = None
    error: dict[str, object] | None = None  # EnvbuilderError.to_dict() when it could not be derived

    def to_dict(self) -> dict[str, object]:
        return {"version": self.version, "release": self.row.release if self.row else None, "error": self.error}


def derive_new(versions: list[str], source: str, megatron_lm: str | None = None, te: str | None = None,
               snapshot: Path | None = None, ca_bundle: Path | None = None,
               progress: Progress = lambda _: None) -> list[DeriveOutcome]:
    """Derive a row for each new Megatron-Bridge release; one that cannot be derived yet (no tag, no
    container in docs/versions1.json) is reported, not fatal: the next run derives it."""
    from envbuilder.errors import EnvbuilderError

    out = []
    for version in versions:
        try:
            out.append(DeriveOutcome(version, derive_release(version, source, megatron_lm, te, snapshot, None,
                                                             ca_bundle, progress)))
        except EnvbuilderError as exc:
            progress(f"megatron-bridge {version}: not derived: {exc.cause}")
            out.append(DeriveOutcome(version, error=exc.to_dict()))
    return out
