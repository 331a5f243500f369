"""`--cache URL` / `--publish URL`: which shared wheel cache, parsed once into a `CacheUrl`.

    /srv/wheels, ./wheels, file:///srv/wheels   a directory (also a shared filesystem); read and write
    oci://registry.example.com[:port]/team/wheels   an OCI registry over TLS; read and write
    oci+http://localhost:5000/team/wheels           the same over plain HTTP (a registry on this host)
    https://wheels.example.com/cache/               a read-only PEP 503 index: a published directory
                                                    served by any static HTTP server (http:// too)

Credentials never go in the URL (it is printed in progress lines and JSON): a registry's come from
$ENVBUILDER_REGISTRY_USER / $ENVBUILDER_REGISTRY_PASSWORD or `docker login` (wheelcache/auth.py).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from envbuilder.choices import WHEEL_CACHE_SCHEMES
from envbuilder.errors import InvalidOptionError

#: the OCI distribution spec's repository name grammar (path components of lower-case alphanumerics)
_REPO = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::\d{1,5})?|\[[0-9A-Fa-f:]+\](?::\d{1,5})?")
_FORMS = "a directory, file:///DIR, oci://HOST[:PORT]/REPO, or https://HOST/PATH/ (a PEP 503 index)"


@dataclass(frozen=True)
class CacheUrl:
    """One shared wheel cache. `kind` picks the transport: directory | oci | http."""

    kind: str
    text: str                       # the canonical spelling, for messages and --json
    path: Path | None = None        # directory
    registry: str | None = None     # oci: host[:port]
    repository: str | None = None   # oci: the repository the entries are tagged in
    base: str | None = None         # http: the index's base URL, ending in "/"
    tls: bool = True                # oci / http: https (False for oci+http:// and http://)

    @classmethod
    def parse(cls, text: str, option: str = "--cache") -> CacheUrl:
        raw = text.strip()
        if not raw:
            raise InvalidOptionError(f"{option}: empty URL", f"pass {_FORMS}")
        scheme, sep, _rest = raw.partition("://")
        if not sep:
            return cls._directory(Path(raw).expanduser().absolute())
        scheme = scheme.lower()
        if scheme not in WHEEL_CACHE_SCHEMES:
            raise InvalidOptionError(f"{option} {raw}: unknown scheme {scheme}://", f"pass {_FORMS}")
        parts = urllib.parse.urlsplit(raw)
        if parts.username is not None or parts.password is not None:
            raise InvalidOptionError(f"{option} {parts.scheme}://…@{parts.hostname}: credentials in the URL would be "
                                     "printed in logs and --json",
                                     "set ENVBUILDER_REGISTRY_USER and ENVBUILDER_REGISTRY_PASSWORD, or run "
                                     "`docker login HOST`")
        if parts.query or parts.fragment:
            raise InvalidOptionError(f"{option} {raw}: a cache URL has no ?query or #fragment", f"pass {_FORMS}")
        if scheme == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise InvalidOptionError(f"{option} {raw}: a file URL names an absolute path",
                                         "pass file:///ABSOLUTE/DIR, or the directory itself")
            return cls._directory(Path(urllib.parse.unquote(parts.path)))
        if not _HOST.fullmatch(parts.netloc):
            raise InvalidOptionError(f"{option} {raw}: {parts.netloc!r} is not a host[:port]", f"pass {_FORMS}")
        if scheme in ("oci", "oci+http"):
            repo = parts.path.strip("/")
            if "@" in repo or ":" in repo:
                raise InvalidOptionError(f"{option} {raw}: names a tag or digest; a wheel cache is a repository "
                                         "(each entry is tagged with its cache key)",
                                         "drop the :TAG / @DIGEST: oci://HOST/REPO")
            if not _REPO.fullmatch(repo):
                raise InvalidOptionError(f"{option} {raw}: {repo!r} is not an OCI repository name",
                                         "use lower-case path components, e.g. oci://HOST/team/kernel-wheels")
            tls = scheme == "oci"
            return cls("oci", f"{scheme}://{parts.netloc}/{repo}", registry=parts.netloc, repository=repo, tls=tls)
        base = f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/"
        return cls("http", base, base=base, tls=scheme == "https")

    @classmethod
    def _directory(cls, path: Path) -> CacheUrl:
        return cls("directory", str(path), path=path, tls=False)

    def __str__(self) -> str:
        return self.text
