"""Where advisories come from: an offline OSV database file, or the OSV service. One protocol, two sources.

Offline (`--db PATH`), for air-gapped hosts and CI; any of
- a zip of OSV JSON records, one per member: OSV's own export of an ecosystem
  (https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip),
- a directory holding `*.json` records (searched recursively),
- a JSON Lines file (`*.jsonl`), one record per line,
- a `*.json` file holding one record or a list of records.

Online: the OSV service's batch API (`POST /v1/querybatch`, then `GET /v1/vulns/ID` for each id it
names), at https://api.osv.dev unless `--osv-url` says otherwise.

Every byte read is bounded (a record, a member, a response, the sum of a zip's members) and every record is
checked for shape before use: a malformed database is refused with a typed error naming the file and
the record, never half-used.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from packaging.utils import canonicalize_name

from envbuilder import __version__
from envbuilder.audit.osv import ECOSYSTEM, Advisory, RecordError, parse_advisory
from envbuilder.errors import AuditDatabaseError, NetworkError, os_error
from envbuilder.jsonread import loads_json, read_bytes, too_large
from envbuilder.progress import Progress

OSV_URL = "https://api.osv.dev"
OSV_EXPORT_URL = "https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip"
#: one record, one zip member, one service response
MAX_RECORD_BYTES = 16 << 20
MAX_RESPONSE_BYTES = 64 << 20
#: the sum of a zip's members (OSV's PyPI export is a few hundred MB unpacked)
MAX_ZIP_BYTES = 4 << 30
MAX_DEPTH = 32
BATCH = 1000  # the service's limit of queries per querybatch request
MAX_PAGES = 100
TIMEOUT_S = 30.0
RETRIES = 3
FETCH_WORKERS = 8

_DB_FIX = (f"pass an OSV database: a zip such as {OSV_EXPORT_URL}, a directory of OSV .json records, "
           "or a .jsonl file of them")


def parse_json(raw: bytes | str, where: str, fix: str, max_bytes: int | None = None) -> Any:
    """JSON text as data, through the one validated reader: AuditDatabaseError for text that is not strict
    JSON, InputTooLargeError (121) / InputTooDeepError (122) past the limits."""
    return loads_json(raw, what=where, error=AuditDatabaseError, fix=fix,
                      max_bytes=MAX_RECORD_BYTES if max_bytes is None else max_bytes, max_depth=MAX_DEPTH)


class AdvisorySource(Protocol):
    """A database the audit asks: which advisories may affect these (package, version) pairs."""

    def describe(self) -> dict[str, Any]:
        """What the report names as its database (kind, location, and what identifies its contents)."""
        ...

    def lookup(self, packages: list[tuple[str, str]], progress: Progress) -> Lookup:
        ...


@dataclass
class Lookup:
    """A source's answer: advisories per canonical package name, and for the service which ids it
    reported for each (name, version) (None offline: every advisory naming the package is a candidate)."""

    by_package: dict[str, list[Advisory]]
    reported: dict[tuple[str, str], set[str]] | None = None
    problems: list[str] = field(default_factory=list)


# ---- offline ----------------------------------------------------------------------------------------


@dataclass
class OfflineDatabase:
    """OSV records read from a file or directory (see the module docstring for the formats)."""

    path: Path
    format: str = ""
    sha256: str = ""
    records: int = 0
    newest_modified: str = ""
    #: records by the canonical names of the PyPI packages they affect: parsed (and checked field by field) only
    #: when a lock asks for one of those packages, so a full export reads in the time of its JSON
    _raw: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    _parsed: dict[str, list[Advisory]] = field(default_factory=dict)
    _withdrawn: int = 0

    @classmethod
    def open(cls, path: Path, progress: Progress = lambda _m: None) -> OfflineDatabase:
        path = Path(path)
        db = cls(path)
        if path.is_dir():
            db.format = "directory"
            items = _directory_records(path)
        elif path.is_file():
            db.format = _file_format(path)
            items = {"zip": _zip_records, "jsonl": _jsonl_records, "json": _json_records}[db.format](path)
        else:
            raise AuditDatabaseError(f"--db {path} does not exist", _DB_FIX)
        digest = hashlib.sha256()
        for where, raw in items:
            # a directory is named by its records' relative names and bytes (not where it sits)
            name = str(Path(where).relative_to(path)) if db.format == "directory" else where
            digest.update(name.encode() + b"\0" + hashlib.sha256(raw).digest())
            data = parse_json(raw, where, _DB_FIX, max_bytes=MAX_RESPONSE_BYTES if db.format == "json" else None)
            for rec in data if isinstance(data, list) and db.format == "json" else [data]:
                db._add(rec, where)
        if db.records == 0:
            raise AuditDatabaseError(f"--db {path} holds no OSV records", _DB_FIX)
        db.sha256 = digest.hexdigest() if db.format == "directory" else _sha256_file(path)
        progress(f"read {db.records} OSV record(s) from {path} ({db.format})")
        return db

    def _add(self, rec: Any, where: str) -> None:
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
            raise AuditDatabaseError(f"--db {self.path}: {where}: not an OSV record (an object with a string 'id')",
                                     _DB_FIX)
        self.records += 1
        modified = rec.get("modified")
        if isinstance(modified, str):
            self.newest_modified = max(self.newest_modified, modified)
        if rec.get("withdrawn"):
            self._withdrawn += 1
            return
        affected = rec.get("affected")
        names = set()
        for aff in affected if isinstance(affected, list) else []:
            pkg = aff.get("package") if isinstance(aff, dict) else None
            if isinstance(pkg, dict) and pkg.get("ecosystem") == ECOSYSTEM and isinstance(pkg.get("name"), str):
                names.add(canonicalize_name(pkg["name"]))
        for name in names:
            self._raw.setdefault(name, []).append((where, rec))

    def _advisories(self, name: str) -> list[Advisory]:
        if name not in self._parsed:
            try:
                self._parsed[name] = sorted((parse_advisory(rec, where) for where, rec in self._raw.get(name, [])),
                                            key=lambda a: a.id)
            except RecordError as exc:
                raise AuditDatabaseError(f"--db {self.path}: {exc}", _DB_FIX) from exc
        return self._parsed[name]

    def describe(self) -> dict[str, Any]:
        return {"kind": "offline", "path": str(self.path), "format": self.format, "sha256": self.sha256,
                "records": self.records, "withdrawn": self._withdrawn, "newest_modified": self.newest_modified}

    def lookup(self, packages: list[tuple[str, str]], progress: Progress) -> Lookup:
        names = {canonicalize_name(n) for n, _v in packages}
        return Lookup({n: self._advisories(n) for n in sorted(names)})


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _file_format(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise os_error(exc, path, action="read", flag="--db") from exc
    if head.startswith(b"PK"):
        return "zip"
    if path.suffix == ".jsonl":
        return "jsonl"
    if path.suffix == ".json":
        return "json"
    raise AuditDatabaseError(f"--db {path} is not a zip, a .jsonl or a .json file", _DB_FIX)


def _directory_records(path: Path) -> Iterator[tuple[str, bytes]]:
    for f in sorted(path.rglob("*.json")):
        if f.is_file():
            yield str(f), read_bytes(f, what="OSV record", max_bytes=MAX_RECORD_BYTES)


def _json_records(path: Path) -> Iterator[tuple[str, bytes]]:
    yield str(path), read_bytes(path, what="OSV database", max_bytes=MAX_RESPONSE_BYTES)


def _jsonl_records(path: Path) -> Iterator[tuple[str, bytes]]:
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; lines are yielded while it is open
    except OSError as exc:
        raise os_error(exc, path, action="read", flag="--db") from exc
    with fh:
        for n, line in enumerate(iter(lambda: fh.readline(MAX_RECORD_BYTES + 1), b""), start=1):
            if len(line) > MAX_RECORD_BYTES:
                raise too_large(f"{path}:{n}", "OSV record", MAX_RECORD_BYTES)
            if line.strip():
                yield f"{path}:{n}", line


def _zip_records(path: Path) -> Iterator[tuple[str, bytes]]:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise AuditDatabaseError(f"--db {path} is not a readable zip ({exc})", _DB_FIX) from exc
    with zf:
        members = [i for i in zf.infolist() if not i.is_dir() and i.filename.endswith(".json")]
        if sum(i.file_size for i in members) > MAX_ZIP_BYTES:
            raise AuditDatabaseError(f"--db {path} unpacks to more than {MAX_ZIP_BYTES >> 30} GiB", _DB_FIX)
        for info in sorted(members, key=lambda i: i.filename):
            if info.file_size > MAX_RECORD_BYTES:
                raise too_large(f"{path}:{info.filename}", "OSV record", MAX_RECORD_BYTES)
            try:
                with zf.open(info) as fh:
                    raw = fh.read(MAX_RECORD_BYTES + 1)  # the header's size is not trusted
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise AuditDatabaseError(f"{path}:{info.filename} cannot be read ({exc})", _DB_FIX) from exc
            if len(raw) > MAX_RECORD_BYTES:  # larger than its header says
                raise too_large(f"{path}:{info.filename}", "OSV record", MAX_RECORD_BYTES)
            yield f"{path}:{info.filename}", raw


# ---- online -----------------------------------------------------------------------------------------


@dataclass
class OsvService:
    """The OSV service's API (https://google.github.io/osv.dev/api/)."""

    url: str = OSV_URL
    timeout_s: float = TIMEOUT_S
    workers: int = FETCH_WORKERS
    backoff_s: float = 0.5  # first retry's wait; doubled each time

    def describe(self) -> dict[str, Any]:
        return {"kind": "osv-service", "url": self.url}

    def lookup(self, packages: list[tuple[str, str]], progress: Progress) -> Lookup:
        reported = self._query(packages, progress)
        ids = sorted({i for found in reported.values() for i in found})
        progress(f"{self.url}: {len(ids)} advisory id(s) for {len(packages)} package(s); fetching the records")
        with ThreadPoolExecutor(max_workers=max(1, self.workers), thread_name_prefix="osv-fetch") as pool:
            records = list(pool.map(self._vuln, ids))
        # a withdrawn advisory is no finding (the service should not name one; a stale cache may)
        by_id = {a.id: a for a in records if not a.withdrawn}
        by_package: dict[str, list[Advisory]] = {}
        for (name, _version), found in sorted(reported.items()):
            bucket = by_package.setdefault(canonicalize_name(name), [])
            for vid in sorted(found & set(by_id)):
                if by_id[vid] not in bucket:
                    bucket.append(by_id[vid])
        return Lookup(by_package, {(canonicalize_name(n), v): s & set(by_id) for (n, v), s in reported.items()})

    def _query(self, packages: list[tuple[str, str]], progress: Progress) -> dict[tuple[str, str], set[str]]:
        out: dict[tuple[str, str], set[str]] = {p: set() for p in packages}
        pending: list[tuple[tuple[str, str], str | None]] = [(p, None) for p in packages]
        pages = 0
        while pending:
            pages += 1
            if pages > MAX_PAGES:
                raise AuditDatabaseError(f"{self.url} kept paging past {MAX_PAGES} pages",
                                         "retry later, or audit offline with --db")
            nxt: list[tuple[tuple[str, str], str | None]] = []
            for start in range(0, len(pending), BATCH):
                chunk = pending[start:start + BATCH]
                queries = [{"package": {"name": n, "ecosystem": ECOSYSTEM}, "version": v,
                            **({"page_token": tok} if tok else {})} for (n, v), tok in chunk]
                body = self._post("/v1/querybatch", {"queries": queries})
                results = body.get("results") if isinstance(body, dict) else None
                if not isinstance(results, list) or len(results) != len(chunk):
                    raise AuditDatabaseError(f"{self.url}/v1/querybatch answered {len(chunk)} queries with "
                                             f"{len(results) if isinstance(results, list) else 'no'} results",
                                             "retry; if it persists, audit offline with --db")
                for (pkg, _tok), res in zip(chunk, results, strict=True):
                    vulns = (res.get("vulns") or []) if isinstance(res, dict) else None
                    if not isinstance(vulns, list) or not all(isinstance(v, dict) and isinstance(v.get("id"), str)
                                                              for v in vulns):
                        raise AuditDatabaseError(f"{self.url}/v1/querybatch: a result for {pkg[0]} is malformed",
                                                 "retry; if it persists, audit offline with --db")
                    out[pkg].update(v["id"] for v in vulns)
                    token = res.get("next_page_token")
                    if isinstance(token, str) and token:
                        nxt.append((pkg, token))
                progress(f"{self.url}: queried {min(start + BATCH, len(pending))}/{len(pending)} package(s)")
            pending = nxt
        return out

    def _vuln(self, vid: str) -> Advisory:
        data = self._request("GET", f"/v1/vulns/{urllib.parse.quote(vid, safe='')}", None)
        try:
            adv = parse_advisory(data, f"{self.url}/v1/vulns/{vid}")
        except RecordError as exc:
            raise AuditDatabaseError(str(exc), "retry; if it persists, audit offline with --db") from exc
        if adv.id != vid:
            raise AuditDatabaseError(f"{self.url}/v1/vulns/{vid} answered with record {adv.id}",
                                     "retry; if it persists, audit offline with --db")
        return adv

    def _post(self, path: str, payload: dict[str, Any]) -> Any:
        return self._request("POST", path, json.dumps(payload, sort_keys=True).encode())

    def _request(self, method: str, path: str, body: bytes | None) -> Any:
        url = self.url.rstrip("/") + path
        fix = (f"check the network (or a proxy: HTTPS_PROXY), or audit offline: --db FILE (OSV's PyPI export, "
               f"{OSV_EXPORT_URL})")
        last: str = ""
        for attempt in range(RETRIES):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            req = urllib.request.Request(url, data=body, method=method, headers={
                "Content-Type": "application/json", "Accept": "application/json",
                "User-Agent": f"envbuilder/{__version__} (audit)"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read(MAX_RESPONSE_BYTES + 1)
            except urllib.error.HTTPError as exc:
                if exc.code == 429 or exc.code >= 500:
                    last = f"HTTP {exc.code}"
                    continue
                raise AuditDatabaseError(f"{url} answered HTTP {exc.code} ({exc.reason})",
                                         "report it with this line; meanwhile audit offline with --db") from exc
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                last = str(getattr(exc, "reason", exc))
                continue
            return parse_json(raw, f"the answer of {url}", "retry; if it persists, audit offline with --db",
                              max_bytes=MAX_RESPONSE_BYTES)
        raise NetworkError(f"the OSV service at {self.url} cannot be reached ({last}; {RETRIES} tries)", fix)
