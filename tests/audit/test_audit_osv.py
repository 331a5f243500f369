"""Version matching of OSV records, on the synthetic records of tests/audit/osv_records.py.

The records are stand-ins written by our tests (the OSV service cannot be reached here, and real advisory
records may not be committed): each case names the record's role and what its ranges say. A few in-line
ranges cover what those records do not use (SEMVER ordering, `limit` events).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from audit import osv_records as osv

from envbuilder.audit import AuditOptions, OfflineDatabase, Threshold, run_audit
from envbuilder.audit.osv import Range, RecordError, SemVer, parse_advisory

Rec = Callable[[str], dict[str, Any]]
LOCK = Path(__file__).resolve().parent / "data" / "lock-v2.3.0"


@pytest.mark.parametrize(("vid", "package", "version", "affected", "fixed"), [
    # introduced 1.22, fixed 2.6.3 (the locked urllib3 1.26.20 is inside)
    (osv.URLLIB3_PYPA, "urllib3", "1.26.20", True, ["2.6.3"]),
    (osv.URLLIB3_PYPA, "urllib3", "2.6.2", True, ["2.6.3"]),
    (osv.URLLIB3_PYPA, "urllib3", "2.6.3", False, []),
    (osv.URLLIB3_PYPA, "urllib3", "1.21.1", False, []),  # below `introduced`
    (osv.URLLIB3_PYPA, "urllib3", "2.0.0a1", True, ["2.6.3"]),  # a pre-release inside the range
    (osv.URLLIB3_GH, "urllib3", "1.26.20", True, ["2.6.3"]),  # the GitHub-style record of the same CVE
    (osv.URLLIB3_GH, "urllib3", "2.6.3", False, []),
    # two intervals in one range: 0 -> 1.26.19 and 2.0.0 -> 2.2.2
    (osv.URLLIB3_TWO_INTERVALS, "urllib3", "1.26.18", True, ["1.26.19"]),
    (osv.URLLIB3_TWO_INTERVALS, "urllib3", "1.26.19", False, []),
    (osv.URLLIB3_TWO_INTERVALS, "urllib3", "1.26.20", False, []),
    (osv.URLLIB3_TWO_INTERVALS, "urllib3", "2.0.0a1", False, []),  # above 1.26.19, below the 2nd `introduced`
    (osv.URLLIB3_TWO_INTERVALS, "urllib3", "2.0.0", True, ["2.2.2"]),
    (osv.URLLIB3_TWO_INTERVALS, "urllib3", "2.2.1", True, ["2.2.2"]),
    (osv.URLLIB3_TWO_INTERVALS, "urllib3", "2.2.2", False, []),
    (osv.URLLIB3_MEDIUM, "urllib3", "1.26.20", True, ["2.7.0"]),
    (osv.URLLIB3_MEDIUM, "urllib3", "1.22", False, []),
    # a pre-release of the fix is still below it
    (osv.TRANSFORMERS, "transformers", "4.51.3", True, ["5.0.0"]),
    (osv.TRANSFORMERS, "transformers", "5.0.0rc3", True, ["5.0.0"]),
    (osv.TRANSFORMERS, "transformers", "5.0.0", False, []),
    (osv.CRYPTO_PYPA, "cryptography", "42.0.8", True, ["46.0.5"]),
    (osv.CRYPTO_PYPA, "cryptography", "46.0.5", False, []),
    (osv.CRYPTO_GH, "cryptography", "42.0.8", True, ["46.0.5"]),
    (osv.CRYPTO_GH, "cryptography", "48.0.1", False, []),
    # these records' range ends in an empty event `{}`: their versions list answers
    (osv.TORCH_EMPTY_EVENT_HIGH, "torch", "2.7.0", True, []),
    (osv.TORCH_EMPTY_EVENT_MEDIUM, "torch", "2.8.0", True, []),
    (osv.TORCH_EMPTY_EVENT_HIGH, "torch", "2.10.0", False, []),  # not listed: see the test below
    # the GitHub-style record names the project "pytorch": it says nothing about the `torch` distribution
    (osv.PYTORCH_GH, "torch", "2.7.0", False, []),
    (osv.PYTORCH_GH, "pytorch", "2.7.0", True, ["2.10.0"]),
    (osv.TORCH_PYPA, "torch", "2.7.0", True, ["2.10.0"]),
    (osv.TORCH_PYPA, "torch", "2.10.0", False, []),
    # names compare as PEP 503 names
    (osv.URLLIB3_PYPA, "URLLib3", "1.26.20", True, ["2.6.3"]),
])
def test_records(record: Rec, vid: str, package: str, version: str, affected: bool, fixed: list[str]) -> None:
    adv = parse_advisory(record(vid))
    hit, fixes, _problems = adv.match(package, version)
    assert (hit, fixes) == (affected, fixed)


def test_the_records_versions_lists_agree_with_their_ranges(record: Rec) -> None:
    # the service stand-in (test_audit_service.py) answers by versions lists, the offline match by ranges:
    # every listed version of an evaluable range is inside it, and every release the range covers is listed
    for vid, rec in osv.records().items():
        adv = parse_advisory(rec)
        for aff in adv.affected:
            if not aff.versions or any(r.broken for r in aff.ranges):
                continue
            for v in osv.RELEASES[aff.package]:
                assert any(r.match(v)[0] for r in aff.ranges) == (v in aff.versions), (vid, v)


def test_a_broken_range_is_reported_never_passed_silently(record: Rec) -> None:
    # the record closes its range with an empty event `{}`: the range cannot be evaluated; a version its
    # versions list names is affected, another is not known to be safe, and the audit says so
    vid = osv.TORCH_EMPTY_EVENT_HIGH
    adv = parse_advisory(record(vid))
    assert adv.match("torch", "2.7.0")[0]
    hit, fixes, problems = adv.match("torch", "2.10.0")
    assert not hit and fixes == []
    assert len(problems) == 1 and vid in problems[0] and "{}" in problems[0]
    assert parse_advisory(record(osv.URLLIB3_PYPA)).match("urllib3", "2.6.3")[2] == []


def test_versions_list_compares_pep440_versions(record: Rec) -> None:
    rec = record(osv.URLLIB3_PYPA)
    assert "1.25" in rec["affected"][0]["versions"] and "1.25.0" not in rec["affected"][0]["versions"]
    rec = {**rec, "affected": [{**rec["affected"][0], "ranges": []}]}  # versions list only
    adv = parse_advisory(rec)
    assert adv.match("urllib3", "1.26.20")[0]
    assert adv.match("urllib3", "1.25.0")[0]  # listed as "1.25"
    assert not adv.match("urllib3", "2.6.3")[0]


def test_severity_and_aliases(record: Rec) -> None:
    adv = parse_advisory(record(osv.CRYPTO_GH))
    assert adv.aliases == ("CVE-0000-0005",)
    assert (adv.severity.level, adv.severity.score) == ("high", None)  # the database's word; no vector
    # a word beside a vector (and a v4 vector, not scored): the computed base score of the v3 vector
    gh = parse_advisory(record(osv.URLLIB3_GH))
    assert (gh.severity.level, gh.severity.score) == ("high", osv.V_HIGH_7_5[1])
    assert gh.severity.source == f"CVSS_V3 {osv.V_HIGH_7_5[0]}"
    pypa = parse_advisory(record(osv.URLLIB3_PYPA))
    assert pypa.aliases == ("CVE-0000-0001", osv.URLLIB3_GH)
    assert (pypa.severity.level, pypa.severity.score) == ("high", osv.V_HIGH_7_5[1])
    assert pypa.summary == "Synthetic test advisory"  # a record without `summary`: its details' first line


def test_withdrawn_is_kept_as_such(record: Rec) -> None:
    adv = parse_advisory(record(osv.JINJA2_WITHDRAWN))
    assert adv.withdrawn == osv.WITHDRAWN_AT
    assert adv.match("jinja2", osv.LOCKED["jinja2"])[0]  # its ranges cover the locked jinja2: only `withdrawn`
    # keeps it out of the audit (test_audit_database.py, test_audit_service.py)


def test_the_audit_of_the_lock_lists_the_expected_findings(osv_db: Path) -> None:
    report = run_audit(AuditOptions(LOCK, OfflineDatabase.open(osv_db), Threshold.parse("none")))
    got = {(f.id, f.aliases, f.package, f.version, f.fixed, f.severity.level, f.severity.score)
           for f in report.findings}
    assert got == {(e.id, e.aliases, e.package, e.version, e.fixed, e.level, e.score) for e in osv.LOCK_FINDINGS}
    assert not report.problems  # the empty-event records name the locked torch in their versions lists
    assert "jinja2" not in {f.package for f in report.findings}  # withdrawn


def test_a_github_id_is_shown_before_a_pypa_id(tmp_path: Path) -> None:
    # which id a group is shown under goes by prefix (GitHub's, then PyPA's): the urllib3 pair under synthetic
    # ids with those prefixes (GHSA-0000-... is not a GHSA id: 0 is not in GitHub's alphabet)
    gh, pypa = "GHSA-0000-0000-0000", "PYSEC-0000-1"
    renamed = {osv.URLLIB3_GH: gh, osv.URLLIB3_PYPA: pypa}
    recs = []
    for old, new in renamed.items():
        rec = osv.record(old)
        rec["id"] = new
        rec["aliases"] = [renamed.get(a, a) for a in rec["aliases"]]
        recs.append(rec)
    db = tmp_path / "db.json"
    db.write_text(json.dumps(list(reversed(recs))), encoding="utf-8")
    report = run_audit(AuditOptions(LOCK, OfflineDatabase.open(db), Threshold.parse("none")))
    (f,) = report.findings
    assert (f.id, f.aliases, f.package) == (gh, ("CVE-0000-0001", pypa), "urllib3")


def _range(kind: str, *events: tuple[str, str]) -> Range:
    return Range(kind, tuple(events))


def test_semver_ranges_order_by_semver() -> None:
    r = _range("SEMVER", ("introduced", "1.0.0-alpha"), ("fixed", "1.0.0"))
    assert r.match("1.0.0-beta.2") == (True, "1.0.0")
    assert r.match("1.0.0-alpha.1") == (True, "1.0.0")
    assert r.match("1.0.0") == (False, None)
    assert SemVer.parse("1.0.0-alpha") < SemVer.parse("1.0.0-alpha.1") < SemVer.parse("1.0.0-beta")
    assert SemVer.parse("1.0.0-beta.2") < SemVer.parse("1.0.0-beta.11") < SemVer.parse("1.0.0-rc.1")
    with pytest.raises(ValueError):
        r.match("1.0")  # not SemVer


def test_limit_caps_a_range() -> None:
    r = _range("ECOSYSTEM", ("introduced", "0"), ("limit", "2.0"))
    assert r.match("1.9")[0] and not r.match("2.0")[0]
    assert _range("ECOSYSTEM", ("introduced", "1.0"), ("limit", "*")).match("99")[0]


def test_events_are_sorted_before_the_walk() -> None:
    # the order PYSEC-2023-192 (urllib3, CVE-2023-43804) lists them in: the 2.x interval first
    r = _range("ECOSYSTEM", ("introduced", "2.0.0"), ("fixed", "2.0.6"), ("introduced", "0"), ("fixed", "1.26.17"))
    assert r.match("1.26.16") == (True, "1.26.17")
    assert r.match("1.26.17") == (False, None)
    assert r.match("2.0.5") == (True, "2.0.6")
    assert r.match("2.0.6") == (False, None)


def test_an_unknown_range_type_is_broken_not_ignored() -> None:
    rec = {"id": "X", "affected": [{"package": {"ecosystem": "PyPI", "name": "a"},
                                    "ranges": [{"type": "CALVER", "events": [{"introduced": "0"}]}]}]}
    hit, _fixes, problems = parse_advisory(rec).match("a", "1.0")
    assert not hit and "CALVER" in problems[0]


def test_last_affected_closes_its_interval_before_a_later_fix() -> None:
    r = _range("ECOSYSTEM", ("introduced", "1.0"), ("last_affected", "1.4"), ("introduced", "2.0"), ("fixed", "2.5"))
    assert r.match("1.2") == (True, None)  # the fix 2.5 belongs to the other interval
    assert r.match("1.5") == (False, None)
    assert r.match("2.1") == (True, "2.5")


@pytest.mark.parametrize("bad", [
    [], {"id": 3}, {"id": "X", "aliases": "CVE-1"}, {"id": "X", "affected": {}},
    {"id": "X", "affected": [{"package": {"ecosystem": "PyPI"}}]},
    {"id": "X", "affected": [{"package": {"ecosystem": "PyPI", "name": "a"}, "versions": [1]}]},
    {"id": "X", "affected": [{"package": {"ecosystem": "PyPI", "name": "a"}, "ranges": [{"events": []}]}]},
])
def test_malformed_records_are_refused(bad: Any) -> None:
    with pytest.raises(RecordError):
        parse_advisory(bad)
