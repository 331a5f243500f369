"""Run the nightly pipeline: rows in parallel (up to --parallel), resumable, then the dashboard.

A row is skipped when its certificate still verifies against its lock and its image (and its SBOM
and exported files are there): a re-run after a crash or a cancelled job redoes only what is
missing. A failing step stops that row, never the others; the summary names the step and the log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envbuilder import procs
from envbuilder.atomic import write_atomic
from envbuilder.nightly.steps import RowConfig, build_is_current, command
from envbuilder.progress import Progress


@dataclass
class StepResult:
    step: str
    status: str  # ok | failed | cached
    exit_code: int = 0
    seconds: float = 0.0
    log: str | None = None
    command: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "status": self.status, "exit_code": self.exit_code,
                "seconds": round(self.seconds, 1), "log": self.log, "command": self.command}


@dataclass
class RowResult:
    row: str
    status: str = "pending"  # certified | failed | resumed
    lock_sha256: str | None = None
    tag: str | None = None
    steps: list[StepResult] = field(default_factory=list)

    @property
    def failed_step(self) -> StepResult | None:
        return next((s for s in self.steps if s.status == "failed"), None)

    def to_dict(self) -> dict[str, Any]:
        f = self.failed_step
        return {"row": self.row, "status": self.status, "lock_sha256": self.lock_sha256, "tag": self.tag,
                "failed_step": f.step if f else None, "steps": [s.to_dict() for s in self.steps]}


@dataclass
class NightlyResult:
    rows: list[RowResult]
    report: StepResult | None = None

    @property
    def failed(self) -> list[RowResult]:
        return [r for r in self.rows if r.status == "failed"]

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "failed": [r.row for r in self.failed],
                "report": self.report.to_dict() if self.report else None}


class _Children:
    """Running step processes, so an interrupt kills them all (no orphan builds or exports)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[Any] = set()
        self.stopping = False

    def kill_all(self) -> None:
        with self.lock:
            self.stopping = True
            running = list(self.procs)
        for p in running:
            procs.kill_group(p)


def run_envbuilder(args: list[str], log: Path, children: _Children | None = None) -> int:
    """`python -m envbuilder ARGS`, output to `log`; the exit code."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("$ envbuilder " + " ".join(args) + "\n")
        fh.flush()
        proc = procs.popen([sys.executable, "-m", "envbuilder", *args], stdout=fh, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, env=env)
        if children is not None:
            with children.lock:
                if children.stopping:
                    procs.kill_group(proc)
                children.procs.add(proc)
        try:
            return proc.wait()
        finally:
            if children is not None:
                with children.lock:
                    children.procs.discard(proc)


def run_step(cfg: RowConfig, step: str, children: _Children | None = None) -> StepResult:
    """One step of one row (what `envbuilder nightly step` and each workflow step run)."""
    args = command(cfg, step)
    log = cfg.rowdir / "logs" / f"{step}.log"
    if step == "build" and build_is_current(cfg):
        log.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(log, f"image {cfg.tag} exists and was built from lock {cfg.lock_sha256()[:12]}; not rebuilt\n")
        return StepResult(step, "cached", 0, 0.0, str(log), args)
    if step == "certify":
        cfg.certdir.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    rc = run_envbuilder(args, log, children)
    return StepResult(step, "ok" if rc == 0 else "failed", rc, time.monotonic() - t0, str(log), args)


def is_current(cfg: RowConfig, children: _Children | None = None) -> bool:
    """Resume rule: the certificate verifies against this lock and image, and every output is there."""
    needed = [cfg.certdir / "certificate.json", cfg.sbom, *(cfg.artifact(f) for f in cfg.formats)]
    if not all(p.exists() for p in needed) or not build_is_current(cfg):
        return False
    return run_step(cfg, "verify", children).status == "ok"


def run_row(cfg: RowConfig, progress: Progress, resume: bool = True, children: _Children | None = None) -> RowResult:
    res = RowResult(cfg.row, lock_sha256=cfg.lock_sha256(), tag=cfg.tag)
    if not cfg.lockdir.joinpath("uv.lock").exists():
        cfg.rowdir.mkdir(parents=True, exist_ok=True)
        log = cfg.rowdir / "logs" / "lock-check.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(log, f"{cfg.lockdir} has no uv.lock: no committed lock for this row (locks/STATUS.md says why)\n")
        res.steps.append(StepResult("lock-check", "failed", 1, 0.0, str(log)))
        res.status = "failed"
    elif resume and is_current(cfg, children):
        res.status = "resumed"
        progress(f"[{cfg.row}] certificate still matches lock {cfg.lock_sha256()[:12]} and {cfg.tag}: skipped")
        if "audit" in cfg.steps():  # advisories are published every day, for locks that did not change
            sr = run_step(cfg, "audit", children)
            res.steps.append(sr)
            progress(f"[{cfg.row}] audit: {sr.status}" + (f", exit {sr.exit_code}, log {sr.log}"
                                                         if sr.status == "failed" else ""))
            if sr.status == "failed":
                res.status = "failed"
    else:
        for step in cfg.steps():
            progress(f"[{cfg.row}] {step} …")
            sr = run_step(cfg, step, children)
            res.steps.append(sr)
            progress(f"[{cfg.row}] {step}: {sr.status} ({sr.seconds:.0f}s)"
                     + (f", exit {sr.exit_code}, log {sr.log}" if sr.status == "failed" else ""))
            if sr.status == "failed":
                break
        res.status = "failed" if res.failed_step else "certified"
    cfg.rowdir.mkdir(parents=True, exist_ok=True)
    write_atomic(cfg.rowdir / "nightly.json", json.dumps(res.to_dict(), indent=2, sort_keys=True) + "\n")
    return res


@dataclass(frozen=True)
class NightlyOptions:
    rows: list[str]
    template: RowConfig  # everything but the row
    parallel: int = 2
    resume: bool = True
    report: bool = True
    site: Path | None = None  # default OUT/site
    history: Path | None = None  # default OUT/history.json
    threshold_pct: float = 10.0
    browser_check: bool = False
    row_flags: dict[str, str] = field(default_factory=dict)  # row -> --nemo / --release (plan.row_flag)


def report_args(opts: NightlyOptions) -> list[str]:
    out = opts.template.output
    site = opts.site or out / "site"
    args = ["report", *(str(out / r / "cert") for r in opts.rows if (out / r / "cert" / "certificate.json").exists()),
            "-o", str(site), "--history", str(opts.history or out / "history.json"), "--locks",
            str(opts.template.locks), "--threshold", f"{opts.threshold_pct:g}", "--gate"]
    if opts.template.audit and any((out / r / "audit.json").exists() for r in opts.rows):
        args += ["--audit", str(out)]
    if opts.template.public_key:
        args += ["--key", str(opts.template.public_key)]
    if opts.browser_check:
        args += ["--browser-check", "--screenshot", str(out / "dashboard.png")]
    return args


def run_nightly(opts: NightlyOptions, progress: Progress = lambda _m: None) -> NightlyResult:
    children = _Children()
    cfgs = [replace(opts.template, row=r, row_flag=opts.row_flags.get(r, "--nemo")) for r in opts.rows]
    pool = ThreadPoolExecutor(max_workers=max(1, opts.parallel), thread_name_prefix="nightly-row")
    try:
        futures = [pool.submit(run_row, c, progress, opts.resume, children) for c in cfgs]
        rows = [f.result() for f in futures]
    except BaseException:
        children.kill_all()  # Ctrl-C / SIGTERM: no build or export keeps running after we exit
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    result = NightlyResult(rows)
    if opts.report and any((c.certdir / "certificate.json").exists() for c in cfgs):
        progress("report …")
        t0 = time.monotonic()
        log = opts.template.output / "logs" / "report.log"
        args = report_args(opts)
        rc = run_envbuilder(args, log, children)
        result.report = StepResult("report", "ok" if rc == 0 else "failed", rc, time.monotonic() - t0, str(log),
                                   args)
        progress(f"report: {result.report.status}" + (f" (exit {rc}, log {log})" if rc else ""))
    opts.template.output.mkdir(parents=True, exist_ok=True)
    write_atomic(opts.template.output / "summary.json", json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
    return result
