"""Version matching of OSV records, on real records of the PyPA and GitHub advisory databases.

Each case names the record and what its ranges say; a few synthetic ranges cover what no real PyPI
record in the database uses (SEMVER ordering, `limit` events).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from envbuilder.audit.osv import Range, RecordError, SemVer, parse_advisory

Rec = Callable[[str], dict[str, Any]]


@pytest.mark.parametrize(("vid", "package", "version", "affected", "fixed"), [
    # urllib3 CVE-2026-21441: introduced 1.22, fixed 2.6.3 (what every committed lock's urllib3 1.26.20 hits)
    ("PYSEC-2026-1996", "urllib3", "1.26.20", True, ["2.6.3"]),
    ("PYSEC-2026-1996", "urllib3", "2.6.2", True, ["2.6.3"]),
    ("PYSEC-2026-1996", "urllib3", "2.6.3", False, []),
    ("PYSEC-2026-1996", "urllib3", "1.21.1", False, []),  # below `introduced`
    ("PYSEC-2026-1996", "urllib3", "2.0.0a1", True, ["2.6.3"]),  # a pre-release inside the range
    ("GHSA-38jv-5279-wg99", "urllib3", "1.26.20", True, ["2.6.3"]),  # GitHub's record of the same CVE
    # two intervals in one range: 0 -> 1.26.19 and 2.0.0 -> 2.2.2
    ("PYSEC-2026-1995", "urllib3", "1.26.18", True, ["1.26.19"]),
    ("PYSEC-2026-1995", "urllib3", "1.26.19", False, []),
    ("PYSEC-2026-1995", "urllib3", "1.26.20", False, []),
    ("PYSEC-2026-1995", "urllib3", "2.0.0a1", False, []),  # above 1.26.19, below the second `introduced`
    ("PYSEC-2026-1995", "urllib3", "2.0.0", True, ["2.2.2"]),
    ("PYSEC-2026-1995", "urllib3", "2.2.1", True, ["2.2.2"]),
    ("PYSEC-2026-1995", "urllib3", "2.2.2", False, []),
    ("PYSEC-2026-141", "urllib3", "1.26.20", True, ["2.7.0"]),
    ("PYSEC-2026-141", "urllib3", "1.22", False, []),
    # a pre-release of the fix is still below it
    ("PYSEC-2026-2288", "transformers", "4.51.3", True, ["5.0.0"]),
    ("PYSEC-2026-2288", "transformers", "5.0.0rc3", True, ["5.0.0"]),
    ("PYSEC-2026-2288", "transformers", "5.0.0", False, []),
    ("PYSEC-2026-2141", "cryptography", "42.0.8", True, ["46.0.5"]),
    ("PYSEC-2026-2141", "cryptography", "46.0.5", False, []),
    ("GHSA-r6ph-v2qm-q3c2", "cryptography", "48.0.1", False, []),
    # these records' range is broken (an empty event `{}`, as published): their versions list answers
    ("PYSEC-2026-139", "torch", "2.7.0", True, []),
    ("PYSEC-2025-191", "torch", "2.12.0", True, []),
    ("PYSEC-2025-189", "torch", "2.13.0", False, []),  # not listed: see the test below
    # GitHub names the project "pytorch": the record says nothing about the `torch` distribution
    ("GHSA-63cw-57p8-fm3p", "torch", "2.7.0", False, []),
    ("PYSEC-2026-2286", "torch", "2.7.0", True, ["2.10.0"]),
    ("PYSEC-2026-2286", "torch", "2.10.0", False, []),
    # names compare as PEP 503 names; a withdrawn record without ranges names no version
    ("PYSEC-2026-1996", "URLLib3", "1.26.20", True, ["2.6.3"]),
    ("PYSEC-2025-74", "jinja2", "3.1.6", False, []),
])
def test_real_records(record: Rec, vid: str, package: str, version: str, affected: bool, fixed: list[str]) -> None:
    adv = parse_advisory(record(vid))
    hit, fixes, _problems = adv.match(package, version)
    assert (hit, fixes) == (affected, fixed)


def test_a_broken_range_is_reported_never_passed_silently(record: Rec) -> None:
    # PYSEC-2025-189 (as published at the commit kept here) closes its range with an empty event `{}`:
    # the range cannot be evaluated; a version its versions list names is affected, another is not known
    # to be safe, and the audit says so
    adv = parse_advisory(record("PYSEC-2025-189"))
    assert adv.match("torch", "2.7.0")[0]
    hit, fixes, problems = adv.match("torch", "2.13.0")
    assert not hit and fixes == []
    assert len(problems) == 1 and "PYSEC-2025-189" in problems[0] and "{}" in problems[0]
    assert parse_advisory(record("PYSEC-2026-1996")).match("urllib3", "2.6.3")[2] == []


def test_versions_list_compares_pep440_versions(record: Rec) -> None:
    rec = record("PYSEC-2026-1996")
    rec = {**rec, "affected": [{**rec["affected"][0], "ranges": []}]}  # versions list only
    adv = parse_advisory(rec)
    assert adv.match("urllib3", "1.26.20")[0]
    assert adv.match("urllib3", "1.25.0")[0]  # listed as "1.25"
    assert not adv.match("urllib3", "2.6.3")[0]


def test_severity_and_aliases(record: Rec) -> None:
    adv = parse_advisory(record("GHSA-r6ph-v2qm-q3c2"))
    assert adv.aliases == ("CVE-2026-26007",)
    assert (adv.severity.level, adv.severity.score) == ("high", None)  # GitHub's word; no vector
    pysec = parse_advisory(record("PYSEC-2026-1996"))
    assert (pysec.severity.level, pysec.severity.score) == ("high", 7.5)


def test_withdrawn_is_kept_as_such(record: Rec) -> None:
    assert parse_advisory(record("PYSEC-2025-74")).withdrawn == "2026-06-09T15:56:00.000Z"


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
