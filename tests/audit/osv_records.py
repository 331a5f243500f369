"""A synthetic offline OSV database for the audit tests, written at test time.

SYNTHETIC STAND-INS, and why: the OSV service (api.osv.dev) and OSV's export cannot be reached from the
machines these tests run on, and real advisory records (GitHub's or PyPA's databases) may not be committed
here. Every record below is ours: the ids (`EBTEST-YYYY-NNNN`), the CVE ids (`CVE-0000-NNNN`, a year no CVE
has), the summaries and the dates are invented. What is real are facts: package names, their release
numbers and the versions the pre-override v2.3.0 lock pins (tests/audit/data/lock-v2.3.0/: urllib3 1.26.20,
cryptography 42.0.8, torch 2.7.0, transformers 4.51.3, jinja2 3.1.6), and CVSS v3 vectors with the base
scores FIRST's calculator gives them.

The records hold only what `envbuilder audit` reads (envbuilder/audit/osv.py): id, modified, aliases,
summary or details, severity, database_specific.severity, withdrawn, and affected entries of the PyPI
ecosystem with their ranges and versions lists. They come in the two shapes public databases publish:

- "GitHub-style": ranges only (no `versions` list), a database severity word beside a CVSS vector;
- "PyPA-style": ranges plus the `versions` list they cover, a CVSS vector, `details` without `summary`.

and exercise, against the v2.3.0 lock: a GitHub-style and a PyPA-style record of one CVE that alias each
other (one finding); a severity word beside a vector; a range of two intervals; a pre-release inside a range
and one below a fix; a withdrawn record whose ranges would match the locked jinja2; a GitHub-style record
naming the project `pytorch`, which is not the distribution `torch` the lock pins; ranges ending in an empty
event `{}` (as some published records have) answered by their `versions` lists.

`python tests/audit/osv_records.py DIR` writes the database into DIR (for bench/audit.py or a manual audit).
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

# --- facts: CVSS v3 vectors and their base scores (FIRST's CVSS v3.1 calculator) ---
V_HIGH_7_5 = ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H", 7.5)
V_HIGH_8_8 = ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:H/I:H/A:H", 8.8)
V_MEDIUM_6_1 = ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1)
V_MEDIUM_5_9 = ("CVSS:3.0/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N", 5.9)
V_MEDIUM_5_5 = ("CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:N/A:N", 5.5)
#: a CVSS v4 vector: not scored by the audit (it needs FIRST's lookup table); the record's other entries answer
V4 = "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:N/VI:N/VA:H/SC:N/SI:N/SA:N"

# --- facts: the versions tests/audit/data/lock-v2.3.0/uv.lock pins, and a few releases of each package ---
LOCKED = {"urllib3": "1.26.20", "cryptography": "42.0.8", "torch": "2.7.0", "transformers": "4.51.3",
          "jinja2": "3.1.6"}
RELEASES = {
    "urllib3": ("1.21.1", "1.22", "1.23", "1.24", "1.25", "1.26.0", "1.26.18", "1.26.19", "1.26.20", "2.0.0a1",
                "2.0.0", "2.2.1", "2.2.2", "2.6.2", "2.6.3", "2.7.0"),
    "cryptography": ("41.0.7", "42.0.8", "46.0.4", "46.0.5"),
    "torch": ("2.5.1", "2.6.0", "2.7.0", "2.8.0", "2.9.1", "2.10.0"),
    "transformers": ("4.51.3", "4.57.1", "5.0.0rc1", "5.0.0rc3", "5.0.0"),
    "jinja2": ("3.1.5", "3.1.6", "3.1.7"),
}

# --- the synthetic records, by role ---
URLLIB3_GH = "EBTEST-2026-0001"  # GitHub-style, CVE-0000-0001: introduced 1.22, fixed 2.6.3; word HIGH + vector
URLLIB3_PYPA = "EBTEST-2026-0002"  # PyPA-style record of the same CVE, aliasing URLLIB3_GH
URLLIB3_TWO_INTERVALS = "EBTEST-2026-0003"  # 0 -> 1.26.19 and 2.0.0 -> 2.2.2: misses the locked 1.26.20
URLLIB3_MEDIUM = "EBTEST-2026-0004"  # introduced 1.23, fixed 2.7.0; medium
CRYPTO_GH = "EBTEST-2026-0005"  # GitHub-style, CVE-0000-0005: fixed 46.0.5; a severity word only (HIGH)
CRYPTO_PYPA = "EBTEST-2026-0006"  # PyPA-style record of the same CVE; a medium vector (the word wins: highest)
PYTORCH_GH = "EBTEST-2026-0007"  # GitHub-style, CVE-0000-0007, names the project "pytorch", not "torch"
TORCH_PYPA = "EBTEST-2026-0008"  # PyPA-style record of the same CVE for "torch": fixed 2.10.0
TORCH_EMPTY_EVENT_HIGH = "EBTEST-2026-0009"  # range ends in `{}`; its versions list names 2.7.0 (not 2.10.0)
TORCH_EMPTY_EVENT_MEDIUM = "EBTEST-2026-0010"  # the same shape, medium
TRANSFORMERS = "EBTEST-2026-0011"  # fixed 5.0.0: the release candidates 5.0.0rc* are below the fix
JINJA2_WITHDRAWN = "EBTEST-2025-0012"  # withdrawn; its range and versions list cover the locked jinja2 3.1.6

WITHDRAWN_AT = "2026-10-01T00:00:00Z"


@dataclass(frozen=True)
class Expected:
    """One finding the audit of lock-v2.3.0 against this database must list."""

    id: str  # the id the finding is shown under (the group's smallest id: neither is a GHSA or PYSEC id)
    aliases: tuple[str, ...]
    package: str
    fixed: tuple[str, ...]
    level: str
    score: float | None
    vector: str = ""

    @property
    def version(self) -> str:
        return LOCKED[self.package]


#: every finding of `envbuilder audit tests/audit/data/lock-v2.3.0 --db <this database>`, derived from the
#: records below by hand (their ranges against LOCKED); the tests compare the audit with this
LOCK_FINDINGS = (
    Expected(URLLIB3_GH, ("CVE-0000-0001", URLLIB3_PYPA), "urllib3", ("2.6.3",), "high", 7.5, V_HIGH_7_5[0]),
    Expected(URLLIB3_MEDIUM, ("CVE-0000-0004",), "urllib3", ("2.7.0",), "medium", 6.1, V_MEDIUM_6_1[0]),
    Expected(CRYPTO_GH, ("CVE-0000-0005", CRYPTO_PYPA), "cryptography", ("46.0.5",), "high", None),
    Expected(TORCH_PYPA, ("CVE-0000-0007", PYTORCH_GH), "torch", ("2.10.0",), "high", 8.8, V_HIGH_8_8[0]),
    Expected(TORCH_EMPTY_EVENT_HIGH, ("CVE-0000-0009",), "torch", (), "high", 7.5, V_HIGH_7_5[0]),
    Expected(TORCH_EMPTY_EVENT_MEDIUM, ("CVE-0000-0010",), "torch", (), "medium", 5.5, V_MEDIUM_5_5[0]),
    Expected(TRANSFORMERS, ("CVE-0000-0011",), "transformers", ("5.0.0",), "high", 8.8, V_HIGH_8_8[0]),
)


def _between(package: str, *intervals: tuple[str, str]) -> list[str]:
    """The releases of RELEASES[package] inside [introduced, fixed) of any interval ("0": from the first)."""
    out = []
    for v in RELEASES[package]:
        if any((lo == "0" or Version(v) >= Version(lo)) and Version(v) < Version(hi) for lo, hi in intervals):
            out.append(v)
    return out


def _events(*intervals: tuple[str, str]) -> list[dict[str, str]]:
    return [e for lo, hi in intervals for e in ({"introduced": lo}, {"fixed": hi})]


def _affected(package: str, events: list[dict[str, str]], versions: list[str] | None) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"package": {"ecosystem": "PyPI", "name": package},
                             "ranges": [{"type": "ECOSYSTEM", "events": events}]}
    if versions is not None:
        entry["versions"] = versions
    return [entry]


def _github(vid: str, cve: str, package: str, intervals: tuple[tuple[str, str], ...], word: str,
            vector: str | None, modified: str, summary: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    rec: dict[str, Any] = {"id": vid, "modified": modified, "aliases": [cve], "summary": summary,
                           "affected": _affected(package, _events(*intervals), None),
                           "database_specific": {"severity": word}}
    rec["severity"] = [{"type": "CVSS_V3", "score": vector}] if vector else []
    rec["severity"] += [{"type": "CVSS_V4", "score": v} for v in extra]
    return rec


def _pypa(vid: str, aliases: list[str], package: str, intervals: tuple[tuple[str, str], ...], vector: str,
          modified: str, details: str, versions: list[str] | None = None,
          events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": vid, "modified": modified, "aliases": aliases, "details": details,
            "affected": _affected(package, events if events is not None else _events(*intervals),
                                  versions if versions is not None else _between(package, *intervals)),
            "severity": [{"type": "CVSS_V3", "score": vector}]}


def _build() -> dict[str, dict[str, Any]]:
    urllib3 = (("1.22", "2.6.3"),)
    crypto = (("0", "46.0.5"),)
    torch = (("0", "2.10.0"),)
    recs = [
        _github(URLLIB3_GH, "CVE-0000-0001", "urllib3", urllib3, "HIGH", V_HIGH_7_5[0], "2026-11-02T10:00:00Z",
                "Synthetic test advisory: a crafted response exhausts urllib3's memory", extra=(V4,)),
        _pypa(URLLIB3_PYPA, ["CVE-0000-0001", URLLIB3_GH], "urllib3", urllib3, V_HIGH_7_5[0],
              "2026-11-03T10:00:00Z", "# Synthetic test advisory\n\nThe same flaw as EBTEST-2026-0001."),
        _pypa(URLLIB3_TWO_INTERVALS, ["CVE-0000-0003"], "urllib3", (("0", "1.26.19"), ("2.0.0", "2.2.2")),
              V_MEDIUM_5_9[0], "2026-11-04T10:00:00Z", "Synthetic test advisory fixed on two release lines."),
        _pypa(URLLIB3_MEDIUM, ["CVE-0000-0004"], "urllib3", (("1.23", "2.7.0"),), V_MEDIUM_6_1[0],
              "2026-11-05T10:00:00Z", "Synthetic test advisory of medium severity."),
        _github(CRYPTO_GH, "CVE-0000-0005", "cryptography", crypto, "HIGH", None, "2026-11-06T10:00:00Z",
                "Synthetic test advisory: cryptography with a severity word and no vector"),
        _pypa(CRYPTO_PYPA, ["CVE-0000-0005", CRYPTO_GH], "cryptography", crypto, V_MEDIUM_5_5[0],
              "2026-11-07T10:00:00Z", "Synthetic test advisory, the PyPA-style twin of EBTEST-2026-0005."),
        _github(PYTORCH_GH, "CVE-0000-0007", "pytorch", torch, "HIGH", V_HIGH_8_8[0], "2026-11-08T10:00:00Z",
                "Synthetic test advisory filed under the project name pytorch"),
        _pypa(TORCH_PYPA, ["CVE-0000-0007", PYTORCH_GH], "torch", torch, V_HIGH_8_8[0], "2026-11-09T10:00:00Z",
              "Synthetic test advisory: torch, the distribution EBTEST-2026-0007 means."),
        _pypa(TORCH_EMPTY_EVENT_HIGH, ["CVE-0000-0009"], "torch", (), V_HIGH_7_5[0], "2026-11-10T10:00:00Z",
              "Synthetic test advisory whose range ends in an empty event.",
              versions=["2.5.1", "2.6.0", "2.7.0"], events=[{"introduced": "0"}, {}]),
        _pypa(TORCH_EMPTY_EVENT_MEDIUM, ["CVE-0000-0010"], "torch", (), V_MEDIUM_5_5[0], "2026-11-11T10:00:00Z",
              "Synthetic test advisory whose range ends in an empty event, medium.",
              versions=["2.6.0", "2.7.0", "2.8.0"], events=[{"introduced": "0"}, {}]),
        _pypa(TRANSFORMERS, ["CVE-0000-0011"], "transformers", (("0", "5.0.0"),), V_HIGH_8_8[0],
              "2026-11-12T10:00:00Z", "Synthetic test advisory fixed in a release after its candidates."),
        {**_pypa(JINJA2_WITHDRAWN, ["CVE-0000-0012"], "jinja2", (("0", "3.1.7"),), V_HIGH_8_8[0],
                 "2026-09-01T10:00:00Z", "Synthetic test advisory, withdrawn: it was never a vulnerability."),
         "withdrawn": WITHDRAWN_AT},
    ]
    return {r["id"]: r for r in recs}


_RECORDS = _build()
IDS = tuple(sorted(_RECORDS))


def records() -> dict[str, dict[str, Any]]:
    """Every record, by id (fresh copies: a test may edit its own)."""
    return copy.deepcopy(_RECORDS)


def record(vid: str) -> dict[str, Any]:
    """One record, by id (a fresh copy)."""
    return copy.deepcopy(_RECORDS[vid])


def write_db(directory: Path) -> Path:
    """Write the database into `directory` (created): one `<ID>.json` per record, as `audit --db DIR` reads."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for vid, rec in _RECORDS.items():
        (directory / f"{vid}.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return directory


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/audit/osv_records.py DIR")
    print(write_db(Path(sys.argv[1])))
