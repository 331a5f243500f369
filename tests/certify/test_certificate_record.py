"""certificate.json as a typed record: every committed certificate round-trips byte for byte, each check can carry
its duration, and malformed certificates and expectations are typed errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuilder.certify.certificate import Certificate, GpuFacts
from envbuilder.certify.expect import Expectations, load_expectations
from envbuilder.certify.result import PASS, CheckResult, Stopwatch, TimedChecks
from envbuilder.errors import CertifyEnvironmentError, InputTooDeepError, InputTooLargeError, MalformedFileError

REPO = Path(__file__).resolve().parents[2]
COMMITTED = sorted((REPO / "bench" / "results").rglob("certificate.json"))


def test_there_are_committed_certificates_to_check() -> None:
    assert len(COMMITTED) >= 7


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(REPO / "bench" / "results").parent))
def test_every_committed_certificate_round_trips_byte_for_byte(path: Path) -> None:
    """The certificates the GPU runs wrote (H100, 2xH200, 4xH200) read into the record and write back unchanged:
    the typed record changes no byte of what certify writes."""
    text = path.read_text(encoding="utf-8")
    cert = Certificate.from_json(text, str(path))
    assert cert.to_json() == text
    # a certificate has a duration on every check (written since durations are recorded) or on none (before)
    durations = [c.seconds for c in cert.checks]
    assert cert.checks and (all(d is None for d in durations) or all(isinstance(d, float) for d in durations))


def test_a_check_duration_is_written_and_read_back() -> None:
    c = CheckResult("gemm-bf16", 1, PASS, {"probe_tflops": 700.0}, None, seconds=12.3456)
    assert c.to_dict()["seconds"] == 12.35
    cert = Certificate(level=1, status=PASS, checks=[c])
    again = Certificate.from_json(cert.to_json())
    assert again.checks[0].seconds == 12.35 and again.to_json() == cert.to_json()


def test_the_stopwatch_stamps_the_time_between_results() -> None:
    clock = iter([100.0, 103.5, 110.0, 111.0])
    checks = TimedChecks(lambda: next(clock))  # starts at 100.0
    checks.append(CheckResult("a", 0, PASS))  # 103.5
    checks.append(CheckResult("b", 0, PASS, seconds=2.0))  # timed itself: kept (the clock moves to 110.0)
    checks.append(CheckResult("c", 0, PASS))  # 111.0
    assert [c.seconds for c in checks] == [3.5, 2.0, 1.0]
    ticks = iter([0.0, 4.0])
    assert Stopwatch(lambda: next(ticks)).stamp(CheckResult("d", 0, PASS)).seconds == 4.0


def _cert_text() -> str:
    return COMMITTED[0].read_text(encoding="utf-8")


def _edited(edit: str) -> str:
    data = json.loads(_cert_text())
    if edit == "level-string":
        data["level"] = "1"
    elif edit == "host-list":
        data["host"] = ["gpu"]
    elif edit == "loss-string":
        next(c for c in data["checks"] if c.get("losses"))["losses"][0] = "8.4"
    elif edit == "status-unknown":
        data["checks"][0]["status"] = "great"
    elif edit == "checks-object":
        data["checks"] = {"drift": "pass"}
    elif edit == "sbom-path":
        data["artifact"]["sbom"] = {"name": "../../etc/passwd", "sha256": "a" * 64}
    elif edit == "lock-not-sha":
        data["lock_sha256"] = "ffff"
    elif edit == "duration-negative":
        data["checks"][0]["seconds"] = -1
    elif edit == "schema-2":
        data["schema"] = 2
    return json.dumps(data)


@pytest.mark.parametrize("edit", ["level-string", "host-list", "loss-string", "status-unknown", "checks-object",
                                  "sbom-path", "lock-not-sha", "duration-negative", "schema-2"])
def test_a_malformed_certificate_is_a_typed_error_naming_the_field(edit: str) -> None:
    with pytest.raises(MalformedFileError) as err:
        Certificate.from_json(_edited(edit), "certificate.json")
    assert err.value.exit_code == 73 and "certificate.json" in err.value.cause
    # the host reading an environment's stdout raises its own class for the same input
    with pytest.raises(CertifyEnvironmentError):
        Certificate.from_json(_edited(edit), "stdout", CertifyEnvironmentError)


def test_deep_and_endless_certificates_are_refused(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text("[" * 200 + "]" * 200)
    with pytest.raises(InputTooDeepError):
        Certificate.read(tmp_path / "c.json")
    with pytest.raises(InputTooLargeError):
        Certificate.read(Path("/dev/zero"))


def test_expectations_round_trip_and_refuse_malformed_input(tmp_path: Path) -> None:
    src = REPO / "bench" / "certify" / "device-expect.json"
    exp = load_expectations(src)
    assert exp.target.cuda == "13.0" and exp.datasheet_tflops("NVIDIA H200") == 989.4 and exp.sha256
    again = Expectations.from_json(exp.to_json())
    assert again.to_dict() == exp.to_dict()
    for bad in ({"schema": 1, "target": []}, {"schema": 1, "packages": {"torch": 2}},
                {"schema": 1, "datasheet": [{"names": "H100", "bf16_dense_tflops": 1}]},
                {"schema": 1, "target": {"cxx11_abi": "yes"}}, {"schema": 3}):
        p = tmp_path / "e.json"
        p.write_text(json.dumps(bad))
        with pytest.raises(MalformedFileError):
            load_expectations(p)


def test_a_certificate_of_an_overridden_lock_names_the_lock() -> None:
    """The lock behind the 26.04 device runs is v2.7.3 with nine --set overrides (torch 2.11, no NeMo): its
    certificate says so (lock_name), so reports label it for its lock, not for the row it started from."""
    from envbuilder.certify.certificate import Artifact
    from envbuilder.certify.expectations import expectations_from_lock, read_lock
    from envbuilder.certify.report import build_certificate

    lock = read_lock(REPO / "bench" / "results" / "certify-26.04-h100" / "lock", strict=False)
    exp = expectations_from_lock(lock, matrices=REPO / "matrices", artifact=Artifact("venv"))
    assert exp.row == "v2.7.3" and exp.lock_name == "v2.7.3+set-48412a9bd209"
    assert Expectations.from_json(exp.to_json()).lock_name == exp.lock_name
    cert = build_certificate(exp, GpuFacts(), [CheckResult("drift", 0, PASS)], 0, None)
    assert cert.name == "v2.7.3+set-48412a9bd209" and '"lock_name": "v2.7.3+set-48412a9bd209"' in cert.to_json()
    assert Certificate.from_json(cert.to_json()).to_json() == cert.to_json()
    # a lock without overrides is its row: no lock_name, the certificate keeps its bytes
    plain = expectations_from_lock(read_lock(REPO / "locks" / "26.04"), matrices=REPO / "matrices",
                                   artifact=Artifact("venv"))
    assert plain.lock_name is None and "lock_name" not in plain.to_dict()
