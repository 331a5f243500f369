#!/usr/bin/env python3
"""Time `envbuilder audit LOCKDIR --db DB` end to end (the CLI as a user runs it), median of N runs per database.

    .venv/bin/python bench/audit.py --lock tests/audit/data/lock-v2.3.0 --sample --db /tmp/pypa-all.zip -n 5

Prints one JSON line per database: records, findings, median/min/max seconds of the whole command, and the
in-process split (database read, lookup + matching) of one extra run. A database can be any --db form
(directory, zip, .jsonl, .json). `--sample` also times the tests' synthetic sample (tests/audit/osv_records.py),
written into a temporary directory first: no advisory database is committed to this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envbuilder.audit import AuditOptions, OfflineDatabase, Threshold, run_audit


def cli_seconds(lock: Path, db: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the child: user + system, findings). CPU time is what the command costs;
    wall time on a shared machine also counts the waits for a core."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    got = subprocess.run([sys.executable, "-m", "envbuilder", "audit", str(lock), "--db", str(db), "--json",
                          "--fail-on", "none"], capture_output=True, text=True, check=False)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if got.returncode != 0:
        raise SystemExit(f"audit failed ({got.returncode}): {got.stderr[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu, len(json.loads(got.stdout)["findings"])


SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "audit" / "osv_records.py"


def write_sample(directory: Path) -> Path:
    """The tests' synthetic OSV sample, written into `directory` (by the tests' own generator)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("osv_records", SAMPLE)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {SAMPLE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    written: Path = module.write_db(directory)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lock", type=Path, required=True)
    ap.add_argument("--db", type=Path, action="append", default=[])
    ap.add_argument("--sample", action="store_true", help="also time the tests' synthetic sample (written first)")
    ap.add_argument("-n", type=int, default=5)
    args = ap.parse_args()
    if not args.db and not args.sample:
        ap.error("give --db DB (repeatable) and/or --sample")
    with tempfile.TemporaryDirectory(prefix="audit-sample-") as tmp:
        dbs = ([("tests/audit/osv_records.py (generated)", write_sample(Path(tmp) / "osv"))] if args.sample else [])
        dbs += [(str(db), db) for db in args.db]
        bench(args.lock, dbs, args.n)
    return 0


def bench(lock: Path, dbs: list[tuple[str, Path]], n: int) -> None:
    for label, db in dbs:
        runs = [cli_seconds(lock, db) for _ in range(n)]
        t0 = time.perf_counter()
        opened = OfflineDatabase.open(db)
        t1 = time.perf_counter()
        report = run_audit(AuditOptions(lock, opened, Threshold.parse("none")))
        t2 = time.perf_counter()
        secs = [r[0] for r in runs]
        cpus = [r[1] for r in runs]
        print(json.dumps({"lock": str(lock), "db": label, "format": opened.format,
                          "records": opened.records, "findings": runs[0][2], "packages": report.packages,
                          "cli_wall_median_s": round(statistics.median(secs), 3),
                          "cli_wall_min_s": round(min(secs), 3), "cli_cpu_median_s": round(statistics.median(cpus), 3),
                          "read_db_wall_s": round(t1 - t0, 3), "lookup_match_wall_s": round(t2 - t1, 3),
                          "load_avg_1m": round(os.getloadavg()[0], 1), "runs": n}), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
