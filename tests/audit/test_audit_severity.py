"""CVSS base scores against published scores, and the --fail-on threshold."""

from __future__ import annotations

import pytest

from envbuilder.audit.severity import (
    Severity,
    Threshold,
    cvss2_base_score,
    cvss3_base_score,
    level_of_score,
    severity_of,
)
from envbuilder.errors import InvalidOptionError


@pytest.mark.parametrize(("vector", "score"), [
    # scores as NVD / GitHub publish them for these vectors
    ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H", 7.5),  # CVE-2026-21441 (urllib3)
    ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:H/I:H/A:H", 8.8),  # CVE-2026-24747 (torch)
    ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8),
    ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1),  # the usual reflected XSS
    ("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:C/C:H/I:H/A:H", 9.9),
    ("CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:N/A:N", 5.5),
    ("CVSS:3.0/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N", 5.9),
    ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N", 0.0),
])
def test_cvss3_base_scores(vector: str, score: float) -> None:
    assert cvss3_base_score(vector) == score


@pytest.mark.parametrize(("vector", "score"), [
    ("AV:N/AC:L/Au:N/C:P/I:P/A:P", 7.5),
    ("AV:N/AC:M/Au:N/C:N/I:P/A:N", 4.3),
    ("AV:N/AC:L/Au:N/C:C/I:C/A:C", 10.0),
    ("AV:L/AC:L/Au:N/C:P/I:N/A:N", 2.1),
])
def test_cvss2_base_scores(vector: str, score: float) -> None:
    assert cvss2_base_score(vector) == score


@pytest.mark.parametrize("bad", ["CVSS:3.1/AV:N/AC:L", "CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H",
                                 "CVSS:2.0/AV:N", "CVSS:3.1/AV:N/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H"])
def test_malformed_vectors_raise(bad: str) -> None:
    with pytest.raises(ValueError):
        (cvss2_base_score if bad.startswith("CVSS:2") else cvss3_base_score)(bad)


def test_levels() -> None:
    assert [level_of_score(s) for s in (0.0, 0.1, 3.9, 4.0, 6.9, 7.0, 8.9, 9.0, 10.0)] == [
        "none", "low", "low", "medium", "medium", "high", "high", "critical", "critical"]
    assert level_of_score(9.5, version=2) == "high"


def test_a_record_takes_its_highest_severity() -> None:
    rec = {"severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:N/A:N"}],
           "database_specific": {"severity": "CRITICAL"}}
    assert severity_of(rec).level == "critical"
    v4 = "CVSS:4.0/AV:N/AC:L/AT:P/PR:N/UI:N/VC:N/VI:N/VA:H/SC:N/SI:N/SA:H"
    v4_only = {"severity": [{"type": "CVSS_V4", "score": v4}]}
    assert severity_of(v4_only).level == "unknown"  # v4 scores need FIRST's lookup table, which we do not carry
    assert severity_of({**v4_only, "database_specific": {"severity": "MODERATE"}}).level == "medium"
    assert severity_of({}).level == "unknown"
    assert severity_of({"severity": [{"type": "CVSS_V3", "score": "garbage"}]}).level == "unknown"


@pytest.mark.parametrize(("text", "sev", "reached"), [
    ("low", Severity("low", 3.0), True),
    ("medium", Severity("low", 3.0), False),
    ("high", Severity("critical", 9.8), True),
    ("high", Severity("unknown"), True),  # not knowing is not "below"
    ("none", Severity("critical", 10.0), False),
    ("7.0", Severity("high", 7.5), True),
    ("7.6", Severity("high", 7.5), False),
    ("7.6", Severity("high"), True),  # a word without a score: compared by the level 7.6 falls in
    ("9", Severity("high"), False),
])
def test_threshold(text: str, sev: Severity, reached: bool) -> None:
    assert Threshold.parse(text).reached_by(sev) is reached


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "-0.5", "10.1", "1e309", "severe", "", "7,5"])
def test_threshold_refuses_what_is_not_finite_or_a_level(bad: str) -> None:
    with pytest.raises(InvalidOptionError) as exc:
        Threshold.parse(bad)
    assert exc.value.exit_code == 18
