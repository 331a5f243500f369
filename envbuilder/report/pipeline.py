"""`envbuilder report`: certificates -> static site + history.json + regressions.

The site is written to a staging directory and swapped in whole, so a reader (or a Pages deploy)
never sees half a dashboard; a directory that is not a previous dashboard is never replaced.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder.atomic import promote_dir, staging_dir, write_atomic
from envbuilder.audit.report import REPORT_NAME, AuditReport
from envbuilder.console import dumps
from envbuilder.errors import EnvbuilderError, ReportInputError
from envbuilder.lock.lockdir import open_lockdir
from envbuilder.lock.record import RECORD_NAME
from envbuilder.progress import Progress
from envbuilder.report.collect import DASHBOARD_MARKER, CertEntry, collect
from envbuilder.report.gate import DEFAULT_THRESHOLD_PCT, find_regressions
from envbuilder.report.history import History
from envbuilder.report.metrics import metrics_of
from envbuilder.report.site import CSS, RowView, render_index, render_row

MARKER = DASHBOARD_MARKER
BESIDE_CERT = ("certificate.json", "certificate.dsse.json", "sbom.cdx.json", "report.md")
LOCK_FILES = ("pyproject.toml", "uv.lock", RECORD_NAME)



@dataclass(frozen=True)
class ReportOptions:
    inputs: list[Path]
    output: Path
    history: Path | None = None  # default: OUTPUT/history.json
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    locks: Path | None = None  # a directory of lock directories (locks/<row>/), matched by uv.lock sha256
    public_key: Path | None = None
    audits: tuple[Path, ...] = ()  # audit reports (files, or directories searched for audit.json), by lock sha256


@dataclass
class ReportResult:
    output: Path
    history: Path
    threshold_pct: float
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def regressed(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["regressions"]]

    def to_dict(self) -> dict[str, Any]:
        return {"output": str(self.output), "history": str(self.history), "threshold_pct": self.threshold_pct,
                "rows": self.rows, "failed": [r["label"] for r in self.rows if r["status"] != "pass"],
                "regressed": [r["label"] for r in self.regressed]}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _locks_by_sha(locks: Path | None) -> dict[str, Path]:
    """{uv.lock sha256: lock directory} of every lock directory under `locks` (locks/<row>/, or any depth)."""
    if locks is None:
        return {}
    if not locks.is_dir():
        raise ReportInputError(f"--locks {locks} is not a directory", "pass the directory holding <row>/uv.lock")
    found: dict[str, Path] = {}
    for p in sorted(locks.rglob("uv.lock")):
        found.setdefault(_sha256(p), p.parent)
    return found


def _lock_names(locks: dict[str, Path]) -> dict[str, str]:
    """{lock sha256: the lock's name} of the lock directories given with --locks that have a record."""
    return {sha: open_lockdir(d, verify_only=("uv.lock",)).record.name for sha, d in locks.items()
            if (d / RECORD_NAME).is_file()}


def _audits_by_sha(paths: tuple[Path, ...]) -> dict[str, tuple[Path, AuditReport]]:
    """Audit reports by the uv.lock sha256 they audited; the first of sorted paths wins for one lock."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += [f for f in sorted(p.rglob(REPORT_NAME)) if not any((d / MARKER).exists() for d in f.parents
                                                                          if d == p or p in d.parents)]
        elif p.is_file():
            files.append(p)
        else:
            raise ReportInputError(f"--audit {p} does not exist", "pass audit.json files or directories holding them")
    out: dict[str, tuple[Path, AuditReport]] = {}
    for f in sorted(files):
        try:
            report = AuditReport.read(f)
        except EnvbuilderError as err:
            raise ReportInputError(f"--audit {f}: {err.cause}", "pass reports written by envbuilder audit -o") from err
        out.setdefault(report.lock_sha256, (f, report))
    return out


def _signature(e: CertEntry, public_key: Any) -> str:
    from envbuilder.certify.sign import envelope_path, verify_signature

    if not envelope_path(e.path).exists():
        return "unsigned"
    if public_key is None:
        return "signed, not checked"
    try:
        out = verify_signature(e.path, public_key)
    except EnvbuilderError as err:
        return f"INVALID signature: {err.cause}"
    return f"signed ✓ key {out['keyid'][:12]}"


def _check_output(out: Path) -> None:
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise ReportInputError(f"{out} exists and is not an envbuilder dashboard; it would be replaced",
                               "pick a new or empty directory for -o")


def build_report(opts: ReportOptions, progress: Progress = lambda _m: None) -> ReportResult:
    out = Path(opts.output)
    _check_output(out)
    locks = _locks_by_sha(opts.locks)
    entries = collect(list(opts.inputs), _lock_names(locks))
    progress(f"read {len(entries)} certificate(s)")
    hist_path = opts.history or out / "history.json"
    history = History.load(hist_path)
    audits = _audits_by_sha(tuple(opts.audits))
    pub = None
    if opts.public_key is not None:
        from envbuilder.dsse import load_public_key

        pub = load_public_key(opts.public_key)
    views: list[RowView] = []
    for e in entries:
        prev = history.previous(e)
        regs = find_regressions(metrics_of(e.cert), prev["metrics"], opts.threshold_pct) if prev else []
        audit = audits.get(str(e.cert.lock_sha256))
        views.append(RowView(e, prev["certificate_sha256"] if prev else None, regs, _signature(e, pub),
                             audit=audit[1] if audit else None, audited=bool(audits)))
    for e in entries:
        history.add(e)
    result = ReportResult(out, hist_path, opts.threshold_pct)
    with staging_dir(out) as stage:
        write_atomic(stage / "style.css", CSS.lstrip())
        for v in views:
            page = stage / "rows" / v.entry.slug
            page.mkdir(parents=True)
            for name in BESIDE_CERT:
                src = v.entry.path.with_name(name)
                if src.is_file():
                    shutil.copyfile(src, page / name)
                    v.files.append(name)
            lockdir = locks.get(str(v.entry.cert.lock_sha256))
            if lockdir is not None:
                (page / "lock").mkdir()
                for name in LOCK_FILES:
                    if (lockdir / name).is_file():
                        shutil.copyfile(lockdir / name, page / "lock" / name)
                        v.lock_files.append(f"lock/{name}")
            audit = audits.get(str(v.entry.cert.lock_sha256))
            if audit is not None:
                shutil.copyfile(audit[0], page / REPORT_NAME)
                v.files.append(REPORT_NAME)
            v.history = history.series(v.entry)
            write_atomic(page / "index.html", render_row(v, opts.threshold_pct))
            result.rows.append({"label": v.entry.label, "row": v.entry.row, "slug": v.entry.slug,
                                "gpu_model": v.entry.gpu_model, "level": v.entry.cert.level,
                                "status": v.entry.cert.status, "perf": v.perf, "signature": v.signature,
                                "certificate": str(v.entry.path), "certificate_sha256": v.entry.sha256,
                                "previous_sha256": v.previous_sha256,
                                "regressions": [r.to_dict() for r in v.regressions],
                                **({"audit": v.audit_summary} if audits else {})})
            progress(f"{v.entry.label}: {v.entry.cert.status}, perf {v.perf}")
        write_atomic(stage / "index.html", render_index(views, opts.threshold_pct))
        inside = hist_path.resolve().parent == out.resolve()
        history.save(stage / hist_path.name if inside else hist_path)
        if not inside:  # a copy next to the pages, so the published site carries its history
            shutil.copyfile(hist_path, stage / "history.json")
        write_atomic(stage / MARKER, dumps(result.to_dict()))
        promote_dir(stage, out)
    return result
