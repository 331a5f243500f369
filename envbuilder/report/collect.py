"""Find certificates (files, or directories searched recursively) and key them by row and GPU model."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path

from envbuilder.certify.certificate import Certificate
from envbuilder.errors import ReportInputError
from envbuilder.jsonread import read_bytes

CERT_NAME = "certificate.json"
#: a rendered dashboard holds copies of certificates; searching a directory skips them
DASHBOARD_MARKER = "dashboard.json"


def _in_dashboard(f: Path, top: Path) -> bool:
    return any((d / DASHBOARD_MARKER).exists() for d in f.parents if d == top or top in d.parents)


@dataclass(frozen=True)
class CertEntry:
    path: Path
    cert: Certificate
    sha256: str
    lock_name: str | None = None  # from the lock directory (report --locks) when the certificate names none
    # the lock's sha256 prefix, set only where certificates of different locks share a row, GPUs and level
    # (26.04 host-torch and 26.04 hermetic): each keeps its own page and says which lock it certifies
    lock_tag: str | None = None

    @property
    def row(self) -> str:
        """What the entry is labelled: its lock's name (a lock with --set overrides is not its row), else its row."""
        return self.cert.lock_name or self.lock_name or self.cert.name

    @property
    def gpu_model(self) -> str:
        """The GPU model the numbers were measured on ('cpu' when none): regressions compare like with like."""
        return self.cert.host.gpu_model

    @property
    def gpu_count(self) -> int:
        return self.cert.host.gpu_count

    @property
    def label(self) -> str:
        gpus = f"{self.gpu_count} × {self.gpu_model}" if self.gpu_count else "CPU"
        return f"{self.row} · L{self.cert.level} · {gpus}" + (f" · lock {self.lock_tag}" if self.lock_tag else "")

    @property
    def slug(self) -> str:
        lock = f"-lock-{self.lock_tag}" if self.lock_tag else ""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{self.row}-L{self.cert.level}-{self.gpu_count}x-"
                      f"{self.gpu_model}{lock}").strip("-").lower()


_FIX = "pass certificate.json files written by `envbuilder certify -o DIR`"


def _load(path: Path, lock_names: dict[str, str]) -> CertEntry:
    raw = read_bytes(path, what="certificate")
    cert = Certificate.from_json(raw, f"certificate {path}", ReportInputError, _FIX)
    return CertEntry(path, cert, hashlib.sha256(raw).hexdigest(), lock_names.get(cert.lock_sha256 or ""))


def collect(paths: list[Path], lock_names: dict[str, str] | None = None) -> list[CertEntry]:
    """Every certificate under `paths`, sorted by label; the same file named twice counts once. `lock_names`
    ({lock sha256: LockRecord.name}) names the certificates of an overridden lock that predate `lock_name`."""
    found: dict[Path, CertEntry] = {}
    for p in paths:
        if p.is_dir():
            files = [f for f in sorted(p.rglob(CERT_NAME)) if not _in_dashboard(f, p)]
            if not files:
                raise ReportInputError(f"{p} holds no {CERT_NAME}", "pass the directories written by certify -o")
        elif p.is_file():
            files = [p]
        elif p.exists():
            raise ReportInputError(f"{p} is not a regular file (a device or a pipe)",
                                   "pass certificate files or directories holding them")
        else:
            raise ReportInputError(f"{p} does not exist", "pass certificate files or directories holding them")
        for f in files:
            found.setdefault(f.resolve(), _load(f, lock_names or {}))
    if not found:
        raise ReportInputError("no certificates given", "envbuilder report CERT_OR_DIR... -o site/")
    entries = _tag_locks(list(found.values()))
    entries.sort(key=lambda e: (e.label, str(e.path)))
    seen: dict[str, Path] = {}
    for e in entries:
        if e.slug in seen:
            raise ReportInputError(f"{e.path} and {seen[e.slug]} certify the same row on the same GPUs and level",
                                   "report one night at a time; older nights belong in the history file")
        seen[e.slug] = e.path
    return entries


def _tag_locks(entries: list[CertEntry]) -> list[CertEntry]:
    """Certificates of one row, GPUs and level but of different locks are different results: each is tagged
    with its lock. Two of the same lock stay one key (two nights of one thing: refused by collect)."""
    locks: dict[str, set[str]] = {}
    for e in entries:
        locks.setdefault(e.slug, set()).add(e.cert.lock_sha256 or "")
    return [replace(e, lock_tag=(e.cert.lock_sha256 or "none")[:12]) if len(locks[e.slug]) > 1 else e
            for e in entries]
