"""Certification harness: loss rule, version matching, GPU facts, certificate, report, verify, variants.

No torch and no GPU needed. Where a check needs GPU facts, the test passes a facts dict
(NVML and GPUs cannot exist here) and says so.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envbuilder.certify.certificate import Artifact, Certificate, GpuFacts, GpuInfo
from envbuilder.certify.expect import DatasheetRate, Expectations, ExpectedTarget, load_expectations, normalize
from envbuilder.certify.gpu import check_arch, check_driver
from envbuilder.certify.level0 import check_drift, installed_versions, versions_match
from envbuilder.certify.lossrule import judge_losses
from envbuilder.certify.report import build_certificate, write_outputs
from envbuilder.certify.result import FAIL, NOT_INSTALLED, PASS, SKIPPED, CheckResult, advise, overall_status
from envbuilder.certify.variants import (
    FOUR_GPU,
    TWO_GPU,
    Model,
    Variant,
    check_parallel_failures,
    layout_problems,
    variants_for,
)
from envbuilder.certify.verify import verify_certificate
from envbuilder.errors import CertificateMismatchError, CertificationFailedError, MalformedFileError

# --- loss rule --------------------------------------------------------------------------


def test_loss_rule_passes_a_falling_curve() -> None:
    ok, reason = judge_losses([8.4, 7.9, 7.0, 6.1, 5.0, 4.2])
    assert ok, reason


@pytest.mark.parametrize("losses, why", [
    ([8.4, 8.3, 8.35, 8.4, 8.38], "did not fall"),           # flat, like the VPP bug seen on 4xH200
    ([8.4, 7.0, math.nan, 5.0, 4.0], "non-finite"),
    ([8.4, 7.0, 6.0, 5.0, math.inf], "non-finite"),
    ([8.4, 7.0], "only 2"),
])
def test_loss_rule_fails(losses: list[float], why: str) -> None:
    ok, reason = judge_losses(losses)
    assert not ok and why in reason


def test_loss_rule_margin_is_relative_to_the_first_step() -> None:
    assert judge_losses([10.0, 9.5, 9.0, 9.0, 9.0])[0]          # 10% drop: exactly at the margin
    assert not judge_losses([10.0, 9.5, 9.2, 9.1, 9.1])[0]      # 9% drop


# --- versions and drift -----------------------------------------------------------------


@pytest.mark.parametrize("locked, installed, ok", [
    ("2.11.0", "2.11.0", True),
    ("2.11.0", "2.11.0+cu130", True),       # PEP 440: ==2.11.0 matches any local label
    ("2.7.0+cu128", "2.7.0+cu126", False),  # a locked local label must match exactly
    ("2.7.0+cu128", "2.7.0", False),
    ("1.0", "1.0.0", True),                 # PEP 440 normalization
    ("3.6.0", "3.9.0", False),
])
def test_versions_match(locked: str, installed: str, ok: bool) -> None:
    assert versions_match(locked, installed) is ok


def test_drift_against_this_interpreter() -> None:
    have = installed_versions()
    assert have["click"]  # the test venv has click
    good = Expectations(packages={"click": have["click"], "rich": have["rich"]})
    c = check_drift(good)
    assert c.status == PASS and c.measured["checked"] == 2
    bad = Expectations(packages={"click": "0.0.1", "no-such-package-xyz": "1.0"})
    c = check_drift(bad)
    assert c.status == FAIL
    assert c.measured["missing"] == ["no-such-package-xyz"]
    assert c.measured["mismatched"]["click"]["locked"] == "0.0.1"
    assert "uv sync --frozen" in (c.advice or "")


def test_drift_without_lock_is_skipped_not_passed() -> None:
    assert check_drift(Expectations()).status == SKIPPED


def test_normalize_matches_uv_lock_names() -> None:
    assert normalize("Megatron_Core") == normalize("megatron.core") == "megatron-core"


# --- GPU facts (fake facts dicts: no NVML or GPU exists here) ----------------------------


def test_driver_check_compares_numerically() -> None:
    exp = Expectations(target=ExpectedTarget(min_driver="580.65.06"))
    assert check_driver(exp, GpuFacts("580.159.04")).status == PASS    # 159 > 65, not string order
    c = check_driver(exp, GpuFacts("570.172.08"))
    assert c.status == FAIL and "580.65.06" in (c.advice or "")
    assert check_driver(exp, GpuFacts(None)).status == FAIL
    assert check_driver(Expectations(), GpuFacts("580.159.04")).status == SKIPPED


def test_arch_check_names_the_missing_sm() -> None:
    facts = GpuFacts(None, (GpuInfo("NVIDIA H100 80GB HBM3", "9.0"),))  # fake: no GPU here
    assert check_arch(Expectations(target=ExpectedTarget(arch_list="8.0;9.0")), facts).status == PASS
    c = check_arch(Expectations(target=ExpectedTarget(arch_list="8.0;8.6")), facts)
    assert c.status == FAIL and "9.0" in (c.advice or "") and "--arch-list" in (c.advice or "")
    assert c.measured["arch_list"] == ["8.0", "8.6"] and c.measured["source"] == "lock arch list"


def test_datasheet_lookup_prefers_the_longest_alias() -> None:
    exp = Expectations(datasheet=(DatasheetRate(("H100",), 756.0), DatasheetRate(("H100 80GB HBM3",), 989.4)))
    assert exp.datasheet_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert exp.datasheet_tflops("NVIDIA H100 PCIe") == 756.0
    assert exp.datasheet_tflops("NVIDIA A10") is None


def test_datasheet_from_the_real_gpu_table(repo_root: Path) -> None:
    from envbuilder.certify.expectations import datasheet

    table = datasheet(repo_root / "matrices")
    if not table:
        pytest.skip("matrices/gpus.toml has no bf16_dense_tflops yet")
    exp = Expectations(datasheet=table)
    a10 = exp.datasheet_tflops("NVIDIA A10")
    a100 = exp.datasheet_tflops("NVIDIA A100-SXM4-80GB")
    assert a10 and a100 and a10 != a100  # "A10" is inside the A100's name: the exact alias must win
    assert exp.datasheet_tflops("NVIDIA H100 80GB HBM3")


# --- advice -------------------------------------------------------------------------------


def test_failure_logs_map_to_advice() -> None:
    abi = advise("ImportError: .../flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDevicei")
    assert abi and "ABI" in abi and "rebuild" in abi
    arch = advise("RuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert arch and "--arch-list" in arch
    oom = advise("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert oom and "GPU ran out of memory" in oom  # not the compiler-OOM advice
    assert "NCCL_DEBUG=INFO" in (advise("torch.distributed.DistBackendError: NCCL error in: ...") or "")


# --- certificate, report, verify ----------------------------------------------------------


def _checks(failing: bool = False) -> list[CheckResult]:
    return [
        CheckResult("drift", 0, PASS, {"checked": 3, "missing": [], "mismatched": {}}, "locked versions"),
        CheckResult("kernel:flash-attn", 1, NOT_INSTALLED, None, "rel err <= 0.02", detail="not installed"),
        CheckResult("parallel:pp2", 2, FAIL if failing else PASS, {"tokens_per_s": 1000}, "loss rule",
              losses=[8.4, 7.0, 5.0, 3.0], advice="fix it" if failing else None),
    ]


def _cert(exp: Expectations, failing: bool = False, timestamp: str | None = None) -> Certificate:
    facts = GpuFacts("580.159.04", (GpuInfo("NVIDIA H200", "9.0"),))  # fake
    return build_certificate(exp, facts, _checks(failing), 2, "2.11.0", timestamp)


EXP = Expectations(lock_sha256="a" * 64, row="smoke", artifact=Artifact("sqsh", "x.sqsh", sha256="b" * 64))


def test_certificate_is_deterministic_and_has_no_timestamp() -> None:
    a, b = _cert(EXP).to_json(), _cert(EXP).to_json()
    assert a == b
    data = json.loads(a)
    assert "created" not in data and list(data) == sorted(data)
    assert data["status"] == PASS and data["summary"] == {"pass": 2, "fail": 0, "skipped": 0, "not-installed": 1}
    assert data["lock_sha256"] == "a" * 64 and data["host"]["driver"] == "580.159.04"
    assert json.loads(_cert(EXP, timestamp="2026-01-01T00:00:00Z").to_json())["created"] == "2026-01-01T00:00:00Z"


def test_overall_status_ignores_skipped_and_not_installed() -> None:
    assert overall_status(_checks()) == PASS
    assert overall_status(_checks(failing=True)) == FAIL


def test_report_has_a_table_and_a_valid_svg_per_curve(tmp_path: Path) -> None:
    cert = _cert(EXP, failing=True)
    write_outputs(cert, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# Certificate: FAIL")
    assert "| parallel:pp2 | 2 | fail |" in md and "![parallel:pp2](loss-parallel-pp2.svg)" in md
    svg = ET.parse(tmp_path / "loss-parallel-pp2.svg").getroot()
    assert svg.tag.endswith("svg")
    poly = next(el for el in svg.iter() if el.tag.endswith("polyline"))
    assert len(poly.attrib["points"].split()) == 4
    assert Certificate.read(tmp_path / "certificate.json") == cert


def test_verify_accepts_its_lock_and_artifact() -> None:
    cert = Certificate.from_json(_cert(EXP).to_json())
    art = Artifact("sqsh", "x.sqsh", sha256="b" * 64)
    assert verify_certificate(cert, "a" * 64, art)["verified"] is True
    assert verify_certificate(cert, "a" * 64, None)["verified"] is True


def test_verify_rejects_another_lock_artifact_or_an_edit() -> None:
    cert = Certificate.from_json(_cert(EXP).to_json())
    with pytest.raises(CertificateMismatchError) as e:
        verify_certificate(cert, "c" * 64, None)
    assert e.value.exit_code == 51
    with pytest.raises(CertificateMismatchError):
        verify_certificate(cert, "a" * 64, Artifact("sqsh", "x.sqsh", sha256="d" * 64))
    with pytest.raises(CertificateMismatchError):
        verify_certificate(cert, "a" * 64, Artifact("image", "t", digest="sha256:" + "b" * 64))
    failed = Certificate.from_json(_cert(EXP, failing=True).to_json())
    failed.status = PASS  # hand edit: a failed check under a passing status
    with pytest.raises(CertificateMismatchError):
        verify_certificate(failed, "a" * 64, None)


def test_verify_rejects_a_failed_certificate() -> None:
    cert = Certificate.from_json(_cert(EXP, failing=True).to_json())
    with pytest.raises(CertificationFailedError) as e:
        verify_certificate(cert, "a" * 64, None)
    assert e.value.exit_code == 50 and "parallel:pp2" in e.value.cause


# --- expectations file ------------------------------------------------------------------


def test_expectations_roundtrip(tmp_path: Path) -> None:
    p = tmp_path / "expect.json"
    p.write_text(json.dumps({"schema": 1, "lock_sha256": "f" * 64, "packages": {"Megatron_Core": "0.19.2"},
                             "target": {"cuda": "13.0"}, "nemo_locked": True}))
    exp = load_expectations(p)
    assert exp.packages == {"megatron-core": "0.19.2"} and exp.nemo_locked and exp.sha256
    p.write_text(json.dumps({"schema": 99}))
    with pytest.raises(MalformedFileError, match="schema"):
        load_expectations(p)


def test_device_expectations_file_is_valid(repo_root: Path) -> None:
    exp = load_expectations(repo_root / "bench" / "certify" / "device-expect.json")
    assert exp.target.min_driver and exp.datasheet_tflops("NVIDIA H100 80GB HBM3")


# --- parallel variants --------------------------------------------------------------------


def test_variants_per_gpu_count() -> None:
    assert variants_for(1) == (0, [])
    assert variants_for(2) == (2, TWO_GPU) and variants_for(3) == (2, TWO_GPU)
    assert variants_for(4) == (4, FOUR_GPU) and variants_for(8) == (8, FOUR_GPU)
    assert {v.name for v in TWO_GPU} == {"dp2-distopt", "tp2-sp", "pp2", "cp2"}
    assert {v.name for v in FOUR_GPU} == {"tp2xpp2", "pp2xvpp2", "tp2xcp2"}
    assert [v.name for v in TWO_GPU + FOUR_GPU if v.needs_te] == ["cp2", "tp2xcp2"]


@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_variant_passes_the_check_parallel_rules(world: int) -> None:
    nproc, variants = variants_for(world)
    for v in variants:
        assert layout_problems(v, Model(), nproc) == [], v.name
        assert check_parallel_failures(v, Model(), nproc) == [], v.name  # envbuilder.parallel's rules


def test_layout_rules_catch_bad_dimensions() -> None:
    m = Model(layers=3, heads=6, hidden=480)
    probs = layout_problems(Variant("bad", tp=4, pp=2, vpp=2, sp=False), m, 8)
    assert any("heads" in p for p in probs) and any("layers" in p for p in probs)
    assert any("sequence parallelism" in p for p in layout_problems(Variant("sp1", sp=True), Model(), 2))


def test_interleaved_variant_uses_overlapped_p2p() -> None:
    args = Variant("v", pp=2, vpp=2).args(Model())
    assert "--vpp=2" in args and "--overlap-p2p" in args and "--nmb=4" in args
    assert "--overlap-p2p" not in Variant("p", pp=2).args(Model())  # mcore refuses it without VPP
