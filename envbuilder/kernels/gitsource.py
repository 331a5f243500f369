"""Stage-2 sources built from a git tag (the lock record's `git_sources`): had, checked, packed, cached.

A kernel package whose PyPI sdist ships no CUDA sources (mamba-ssm <= 2.2.4, causal-conv1d
1.2.2.post1) is built from its repository's tag, as NeMo's own container recipes do. The files come
from the first of:
  1. a directory of carried files (a bundle's files/, `wheels --sdists DIR`), by archive name;
  2. the cache, `<cache>/git-sources/<tree>/<archive>`;
  3. a mirror: `--git-mirror URL=PATH` (that repository's clone) or `--git-mirror DIR` (clones found
     below DIR by name: OWNER+NAME/repo as the fetch tool lays them out, OWNER/NAME(.git), NAME(.git)),
     also from ENVBUILDER_GIT_MIRRORS (the same values, comma-separated);
  4. the network: GitHub's archive of the commit over HTTPS (proxy and CA as for PyPI), or
     `git fetch` of the tag from any other URL (file://, ssh, another host).
Whatever the route, the files must recompute to the tree the lock records and hold CUDA sources; then
they are packed into one deterministic archive (gittree.pack), an sdist-like tree the builds unpack.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from envbuilder import procs
from envbuilder.atomic import write_atomic
from envbuilder.errors import GitSourceMismatchError, GitSourceUnavailableError
from envbuilder.kernels import gittree
from envbuilder.lock.record import GitSource, sha256_file
from envbuilder.progress import Progress

MIRRORS_ENV = "ENVBUILDER_GIT_MIRRORS"
CACHE_DIR = "git-sources"


@dataclass(frozen=True)
class Mirror:
    """A local clone (bare or not) of one repository (`url` set), or a directory of clones (`url` None)."""

    path: Path
    url: str | None = None

    def candidates(self, url: str) -> list[Path]:
        if self.url is not None:
            return [self.path] if same_repository(self.url, url) else []
        owner, name = repository_name(url)
        return [self.path / f"{owner}+{name}" / "repo", self.path / f"{owner}+{name}",
                self.path / f"{owner}+{name}.git", self.path / owner / f"{name}.git", self.path / owner / name,
                self.path / f"{name}.git", self.path / name]


@dataclass(frozen=True)
class SourceArchive:
    """One git-tag source as a packed archive: where it lies, its sha256, where it came from."""

    package: str
    version: str
    path: Path
    sha256: str
    origin: str          # carried | cache | mirror PATH | download URL | git fetch URL
    cuda_sources: int

    def to_dict(self) -> dict[str, object]:
        return {"package": self.package, "version": self.version, "archive": self.path.name,
                "sha256": self.sha256, "origin": self.origin, "cuda_sources": self.cuda_sources}


def repository_name(url: str) -> tuple[str, str]:
    """(owner, name) from a repository URL or path: https://github.com/state-spaces/mamba.git -> state-spaces, mamba."""
    parts = [p for p in url.rstrip("/").replace(":", "/").split("/") if p]
    name = parts[-1].removesuffix(".git") if parts else ""
    owner = parts[-2] if len(parts) >= 2 else ""
    return owner, name


def same_repository(a: str, b: str) -> bool:
    def norm(u: str) -> str:
        return u.strip().rstrip("/").removesuffix(".git").lower().replace("http://", "https://")

    return norm(a) == norm(b)


def parse_mirrors(values: Iterable[str], environ: dict[str, str] | None = None) -> list[Mirror]:
    """--git-mirror values, then ENVBUILDER_GIT_MIRRORS (comma-separated): URL=PATH or DIR."""
    env = os.environ if environ is None else environ
    raw = [v for v in values if v] + [v for v in env.get(MIRRORS_ENV, "").split(",") if v.strip()]
    out = []
    for value in raw:
        value = value.strip()
        url, sep, path = value.rpartition("=")
        if sep and ("://" in url or url.startswith("git@")):
            out.append(Mirror(Path(path).expanduser(), url))
        else:
            out.append(Mirror(Path(value).expanduser()))
    return out


def _git(args: list[str], cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}
    try:
        return procs.run(["git", *args], cwd=cwd, capture_output=True, timeout=timeout, env=env)
    except FileNotFoundError as exc:
        raise GitSourceUnavailableError("git is not installed, and a stage-2 source needs it to be read from a "
                                        "mirror", "install git (apt-get install git)") from exc


def _commit_in(repo: Path, commit: str) -> bool:
    return repo.exists() and _git(["-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"]).returncode == 0


def _archive_of(repo: Path, commit: str) -> bytes:
    proc = _git(["-C", str(repo), "archive", "--format=tar", commit])
    if proc.returncode != 0:
        raise GitSourceUnavailableError(f"git archive {commit[:12]} in {repo} failed: "
                                        f"{proc.stderr.decode(errors='replace').strip()[-200:]}",
                                        "check that the mirror is a readable git repository")
    return proc.stdout


def _download(url: str, ca_bundle: Path | None) -> bytes:
    import ssl

    cafile = str(ca_bundle) if ca_bundle else os.environ.get("SSL_CERT_FILE")
    context = ssl.create_default_context(cafile=cafile if cafile and Path(cafile).exists() else None)
    req = urllib.request.Request(url, headers={"User-Agent": "envbuilder"})
    with urllib.request.urlopen(req, timeout=120, context=context) as resp:
        data: bytes = resp.read()
    return data


def _fetch_tag(url: str, src: GitSource, work: Path) -> bytes:
    """`git fetch` of the tag (shallow) from a non-GitHub URL, then its commit's files."""
    repo = work / "fetch.git"
    _git(["init", "-q", "--bare", str(repo)])
    proc = _git(["-C", str(repo), "fetch", "-q", "--depth", "1", "--no-tags", url, f"refs/tags/{src.tag}"])
    if proc.returncode != 0:
        raise OSError(proc.stderr.decode(errors="replace").strip()[-200:] or f"git fetch exit {proc.returncode}")
    got = _git(["-C", str(repo), "rev-parse", "FETCH_HEAD^{commit}"]).stdout.decode().strip()
    if got != src.commit:
        raise GitSourceMismatchError(
            f"{url}: tag {src.tag} is commit {got[:12]}, the lock records {src.commit[:12]} (the tag was moved)",
            "check the repository; the lock builds the recorded commit only: serve it with --git-mirror")
    return _archive_of(repo, src.commit)


def check_files(package: str, src: GitSource, files: list[gittree.SourceFile], origin: str) -> int:
    """Recompute the tree; GitSourceMismatchError unless it is the recorded one and holds CUDA sources.
    Returns the number of CUDA sources."""
    got = gittree.tree_id(files)
    if got != src.tree:
        raise GitSourceMismatchError(
            f"{package}: the files from {origin} recompute to git tree {got[:12]}, the lock records "
            f"{src.tree[:12]} ({src.url} {src.tag}, commit {src.commit[:12]})",
            "the source was changed or is another commit: fetch it again from the repository or a true mirror")
    n = sum(1 for _ in gittree.cuda_sources(files))
    if n == 0:
        raise GitSourceMismatchError(f"{package}: {src.url} {src.tag} holds no CUDA sources either",
                                     "the matrix's git_tags entry is wrong: fix matrices/build_packages.toml")
    return n


def _read_archive(package: str, src: GitSource, path: Path, origin: str) -> int:
    try:
        files = gittree.files_of_archive(path.read_bytes())
    except (OSError, ValueError, EOFError) as exc:  # tarfile errors are ValueErrors / EOFError
        raise GitSourceMismatchError(f"{package}: {path} is not a readable source archive ({exc})",
                                     "fetch it again") from exc
    return check_files(package, src, files, origin)


def obtain(package: str, version: str, src: GitSource, cache: Path, mirrors: list[Mirror] | None = None,
           carried: Iterable[Path] = (), ca_bundle: Path | None = None,
           progress: Progress = lambda _: None) -> SourceArchive:
    """The packed, checked archive of one git-tag source (see the module docstring for the order)."""
    name = src.archive_name(package)
    for d in carried:
        path = Path(d) / name
        if path.is_file():
            n = _read_archive(package, src, path, f"carried {path}")
            return SourceArchive(package, version, path, sha256_file(path), "carried", n)
    cached = cache / CACHE_DIR / src.tree / name
    if cached.is_file():
        try:
            n = _read_archive(package, src, cached, "the cache")
            return SourceArchive(package, version, cached, sha256_file(cached), "cache", n)
        except GitSourceMismatchError:
            progress(f"  {package}: cached {name} is damaged; fetching it again")
    tried: list[str] = []
    data: bytes | None = None
    origin = ""
    for mirror in mirrors or []:
        for repo in mirror.candidates(src.url):
            if _commit_in(repo, src.commit):
                data, origin = _archive_of(repo, src.commit), f"mirror {repo}"
                break
            if mirror.url is not None or repo.exists():
                tried.append(f"mirror {repo} (no commit {src.commit[:12]})")
        if data is not None:
            break
    if data is None:
        web = gittree.github_archive_url(src.url, src.commit)
        try:
            if web is not None:
                progress(f"  {package}: downloading {web}")
                data, origin = _download(web, ca_bundle), f"download {web}"
            else:
                progress(f"  {package}: git fetch {src.url} {src.tag}")
                with tempfile.TemporaryDirectory(prefix="envbuilder-git-") as tmp:
                    data, origin = _fetch_tag(src.url, src, Path(tmp)), f"git fetch {src.url}"
        except (urllib.error.URLError, OSError) as exc:
            tried.append(f"{web or src.url} ({exc})")
    if data is None:
        raise GitSourceUnavailableError(
            f"{package} {version}: the lock builds it from {src.url} {src.tag} (commit {src.commit[:12]}), which "
            f"could not be had: {'; '.join(tried) or 'no mirror given and no network route'}",
            f"pass --git-mirror {src.url}=PATH (a clone holding that commit) or set {MIRRORS_ENV}; or run where "
            f"github.com is reachable; or put {name} into the carried directory", tried=tried)
    try:
        files = gittree.files_of_archive(data)
    except (ValueError, EOFError) as exc:
        raise GitSourceMismatchError(f"{package}: {origin} gave no readable archive ({exc})", "try again") from exc
    n = check_files(package, src, files, origin)
    cached.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(cached, gittree.pack(files, src.archive_prefix(package, version)))
    progress(f"  {package}: {src.tag} from {origin}: tree {src.tree[:12]} verified, {n} CUDA sources")
    return SourceArchive(package, version, cached, sha256_file(cached), origin, n)
