"""`envbuilder audit LOCKDIR`: known vulnerabilities of every locked package, from OSV."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from envbuilder.cli.options import json_option, lock_dir_input
from envbuilder.console import emit_json, plain, stderr_console, stdout_console
from envbuilder.errors import InvalidOptionError, VulnerabilitiesFoundError

if TYPE_CHECKING:
    from envbuilder.audit import AuditReport, Threshold


@click.command()
@lock_dir_input(positional=True, required=True, exists=True, help="Lock directory to audit (the same as LOCKDIR).")
@click.option("--db", type=click.Path(path_type=Path, exists=True),
              help="Offline OSV database instead of the OSV service: a zip of OSV records (OSV's export, "
                   "https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip), a directory of .json "
                   "records, or a .jsonl file of them.")
@click.option("--osv-url", default="https://api.osv.dev", show_default=True,
              help="The OSV service (without --db).")
@click.option("--fail-on", default="low", show_default=True, metavar="LEVEL|SCORE",
              help="Exit 98 when a finding is at least this severe: low, medium, high, critical, a CVSS base "
                   "score from 0 to 10, or none (never). A finding of unknown severity counts as reaching it.")
@click.option("--ignore", "ignore", multiple=True, metavar="ID",
              help="Accept an advisory (its id or any alias); it is listed as ignored and never fails the run. "
                   "Repeatable.")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the report as JSON here (audit.json; read by sbom --audit and report --audit).")
@json_option("Print the report as JSON on stdout.")
def audit(lock: Path, db: Path | None, osv_url: str, fail_on: str, ignore: tuple[str, ...], output: Path | None,
          as_json: bool) -> None:
    """List the known vulnerabilities (OSV) of every package version LOCKDIR's uv.lock pins."""
    from envbuilder.atomic import write_atomic
    from envbuilder.audit import AuditOptions, OfflineDatabase, OsvService, Threshold, run_audit

    threshold = Threshold.parse(fail_on)
    console = stderr_console()
    if db is not None:
        src = click.get_current_context().get_parameter_source("osv_url")
        if src is not None and src.name == "COMMANDLINE":
            raise InvalidOptionError("--db and --osv-url name two databases", "pass one of them")
        source: OfflineDatabase | OsvService = OfflineDatabase.open(db, progress=console.print)
    else:
        if not osv_url.startswith(("https://", "http://")):
            raise InvalidOptionError(f"--osv-url {osv_url!r} is not an http(s) URL", "e.g. --osv-url https://api.osv.dev")
        source = OsvService(osv_url)
    report = run_audit(AuditOptions(lock, source, threshold, tuple(ignore)), progress=console.print)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(output, report.to_json())
        console.print(f"wrote {output}")
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_table(report)
    console.print(_summary(report, threshold))
    failing = report.failing(threshold)
    if failing:
        worst = failing[0]
        err = VulnerabilitiesFoundError(
            f"{len(failing)} finding(s) at or above --fail-on {threshold.text}, e.g. {worst.id} in "
            f"{worst.package} {worst.version} ({worst.severity.level}; fixed in {worst.fixed_text})",
            "upgrade the packages (envbuilder lock --set NAME==FIXED), or accept an advisory with --ignore ID")
        if as_json:  # the report is the JSON document; keep stdout to one document
            click.echo(f"error: {err.cause}\n  fix: {err.fix}", err=True)
            sys.exit(err.exit_code)
        raise err


def _print_table(report: AuditReport) -> None:
    from rich.table import Table

    from envbuilder.console import SETTINGS

    if not report.findings:
        return
    table = Table("severity", "package", "version", "id", "aliases", "fixed in", "summary")
    for f in report.findings:
        score = f" {f.severity.score:g}" if f.severity.score is not None else ""
        cells = (f.severity.level + score + (" (ignored)" if f.ignored else ""), f.package, f.version, f.id,
                 " ".join(f.aliases), f.fixed_text, f.summary)
        table.add_row(*(plain(c) for c in cells))  # advisory text is never read as markup, its escapes shown
    if not SETTINGS.quiet:
        stdout_console().print(table)


def _summary(report: AuditReport, threshold: Threshold) -> str:
    db = report.database
    where = (f"{db.get('path')} ({db.get('records')} records, newest modified {db.get('newest_modified') or '?'})"
             if db.get("kind") == "offline" else str(db.get("url")))
    counts = ", ".join(f"{n} {lvl}" for lvl, n in reversed(list(report.counts.items())) if n)
    ignored = len(report.findings) - len(report.active)
    return (f"{report.row}: {len(report.active)} finding(s) in {report.packages} locked package version(s)"
            + (f" ({counts})" if counts else "") + (f", {ignored} ignored" if ignored else "")
            + f"; {len(report.failing(threshold))} at or above --fail-on {threshold.text}"
            + (f"; {len(report.problems)} advisory range(s) could not be evaluated (see --json 'problems')"
               if report.problems else "") + f"; database: {where}")
