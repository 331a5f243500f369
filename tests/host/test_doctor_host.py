"""Host detection, planning and row evaluation (envbuilder.host).

NVML cannot exist on a CI machine without NVIDIA GPUs, so NVML is replaced by small fakes
that implement the pynvml calls envbuilder makes; everything else (tool probes, uv, disk,
glibc, the matrix) is real.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from envbuilder.errors import InvalidOptionError, UnknownGpuError
from envbuilder.host import detect_host, evaluate_matrix, evaluate_row, host_constraints, plan_host, resolve_host
from envbuilder.host.gpus import find_gpu
from envbuilder.host.nvml import read_nvml
from envbuilder.host.rows import HostGpu, KernelNeed, RowNeeds
from envbuilder.matrix import Fact, Matrix, load_matrix
from envbuilder.matrix.model import Gpu

GIB = 1024**3


class FakeNvml:
    """The subset of pynvml that envbuilder calls, answering like a host with the given GPUs."""

    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE

    def __init__(self, gpus: list[dict[str, Any]], driver: str = "570.86.15", cuda: int = 12080,
                 init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.shutdown_calls = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> Any:
        return h["name"]

    def nvmlDeviceGetCudaComputeCapability(self, h: dict[str, Any]) -> tuple[int, int]:
        if "cc_error" in h:
            raise h["cc_error"]
        return h["cc"]

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any]) -> Any:
        return SimpleNamespace(total=h["mem"], free=h["mem"], used=0)

    def nvmlDeviceGetMigMode(self, h: dict[str, Any]) -> tuple[int, int]:
        if h.get("mig") is None:
            raise pynvml.NVMLError_NotSupported()
        return h["mig"], h["mig"]


def h100(mig: int | None = 0) -> dict[str, Any]:
    return {"name": "NVIDIA H100 80GB HBM3", "cc": (9, 0), "mem": 81559 * 1024**2, "mig": mig}


# --- NVML -------------------------------------------------------------------------------------------


def test_nvml_absent_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr("envbuilder.host.nvml.import_pynvml", missing)
    host = detect_host(local=False)
    assert host.source == "none"
    assert host.gpus == ()
    assert host.driver is None
    assert any("nvidia-ml-py is not installed" in p and "pynvml" in p for p in host.problems)


def test_nvml_failing_on_init_is_reported_not_raised() -> None:
    fake = FakeNvml([h100()], init_error=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    host = detect_host(fake, local=False)
    assert host.source == "none"
    assert host.problems[0].startswith("NVML not available: Driver Not Loaded")
    assert host_constraints(host) == {"kind": "none", "driver": None, "cuda_driver_version": None,
                                      "gpu_count": 0, "gpu_names": [], "sm": []}


def test_real_pynvml_on_this_machine_never_raises() -> None:
    # CI has no NVIDIA driver: the real binding fails inside nvmlInit, which must become a fact.
    reading = read_nvml()
    if reading.ok:
        pytest.skip("this machine has a working NVIDIA driver")
    assert reading.gpus == ()
    assert reading.problems and reading.problems[0].startswith("NVML not available")


def test_fake_nvml_with_two_h100s(gpu_matrices: Path) -> None:
    fake = FakeNvml([h100(), h100()])
    host = detect_host(fake, local=False)
    assert host.source == "detected"
    assert host.driver == "570.86.15"
    assert host.cuda_driver_version == "12.8"
    assert [g.name for g in host.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert [g.sm for g in host.gpus] == ["9.0", "9.0"]
    assert host.gpus[0].memory_gib == pytest.approx(79.6, abs=0.05)
    assert host.gpus[0].mig == "disabled"
    assert host.gpus[0].datacenter is True  # matched to the H100 row of gpus.toml through its alias
    assert host.problems == ()
    assert fake.shutdown_calls == 1
    assert host_constraints(host) == {
        "kind": "detected", "driver": "570.86.15", "cuda_driver_version": "12.8", "gpu_count": 2,
        "gpu_names": ["NVIDIA H100 80GB HBM3"], "sm": ["9.0"],
    }


def test_mig_modes_and_bytes_names() -> None:
    enabled = dict(h100(mig=pynvml.NVML_DEVICE_MIG_ENABLE), name=b"NVIDIA H100 80GB HBM3")
    host = detect_host(FakeNvml([enabled, {"name": "Tesla V100-SXM2-32GB", "cc": (7, 0), "mem": 32 * GIB,
                                           "mig": None}]), local=False)
    assert host.gpus[0].name == "NVIDIA H100 80GB HBM3"  # old nvidia-ml-py returned bytes
    assert host.gpus[0].mig == "enabled"
    assert host.gpus[1].mig == "unsupported"
    assert host.sms == ["7.0", "9.0"]


def test_one_unreadable_gpu_does_not_hide_the_others() -> None:
    broken = dict(h100(), cc_error=pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST))
    host = detect_host(FakeNvml([broken, h100()]), local=False)
    assert host.source == "detected"
    assert host.gpus[0].sm is None and host.gpus[1].sm == "9.0"
    assert any("GPU 0" in p and "compute capability unreadable" in p for p in host.problems)


def test_zero_gpus_is_a_fact() -> None:
    host = detect_host(FakeNvml([]), local=False)
    assert host.source == "detected"
    assert host.gpus == ()
    assert "NVML answered but reports no GPUs" in host.problems


def test_local_tooling_is_real() -> None:
    host = detect_host(FakeNvml([h100()]), disk_path=Path("/"))
    assert set(host.tooling) == {"docker", "enroot", "apptainer", "mksquashfs"}
    assert host.uv_version == version("uv")  # the binary of the installed uv package
    assert host.disk_free_gib is not None and host.disk_free_gib > 0
    assert host.glibc == os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    # mksquashfs is installed by scripts/setup-host.sh; its version line must be reported
    assert host.tooling["mksquashfs"].available and "mksquashfs" in host.tooling["mksquashfs"].detail
    assert not host.tooling["enroot"].available or "enroot" in host.tooling["enroot"].detail


# --- planning -----------------------------------------------------------------------------------


def test_plan_host_from_gpu_name(gpu_matrices: Path) -> None:
    host = plan_host(driver="550.54.15", gpu="H100", gpus=8)
    spec = find_gpu("H100", load_matrix())
    assert spec is not None
    assert host.source == "planned"
    assert len(host.gpus) == 8
    assert {g.sm for g in host.gpus} == {spec.sm}
    assert host.gpus[0].name == spec.name and host.gpus[0].datacenter is True
    assert host_constraints(host)["kind"] == "planned"
    assert host_constraints(host)["driver"] == "550.54.15"


def test_plan_host_from_sm_only() -> None:
    host = plan_host(sm="8.0")
    assert host.source == "planned" and len(host.gpus) == 1 and host.gpus[0].sm == "8.0"
    assert any("no --driver" in p for p in host.problems)


@pytest.mark.parametrize(("kwargs", "error", "text"), [
    ({"driver": "latest"}, InvalidOptionError, "not a driver version"),
    ({"sm": "9"}, InvalidOptionError, "not a compute capability"),
    ({"gpus": 0}, InvalidOptionError, "at least one GPU"),
    ({"gpus": -2}, InvalidOptionError, "at least one GPU"),
    ({"gpu": "NoSuchGPU 9000"}, UnknownGpuError, "not in matrices/gpus.toml"),
    ({"gpu": "H100", "sm": "8.0"}, InvalidOptionError, "only one of --gpu and --sm"),
])
def test_plan_host_rejects_bad_flags(gpu_matrices: Path, kwargs: dict[str, Any], error: type[Exception],
                                     text: str) -> None:
    with pytest.raises(error) as exc:
        plan_host(**kwargs)
    assert text in str(exc.value) + str(getattr(exc.value, "fix", ""))


def test_resolve_host_prefers_flags_then_detection() -> None:
    planned = resolve_host(driver="570.86.15", sm="9.0", gpus=4, nvml=FakeNvml([h100()]))
    assert planned.source == "planned" and len(planned.gpus) == 4
    detected = resolve_host(nvml=FakeNvml([h100()]))
    assert detected.source == "detected" and len(detected.gpus) == 1
    assert detected.tooling == {}  # lock does not pay for tool probes
    nothing = resolve_host(nvml=FakeNvml([], init_error=pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)))
    assert nothing.source == "none"


# --- row evaluation over plain values ----------------------------------------------------------

FA2 = KernelNeed("flash-attn 2", "8.0", True, "test")
FP8 = KernelNeed("TE FP8", "8.9", False, "test")
ROW = RowNeeds("v2.3.0", "12.8", "570.26", (FA2, FP8))


def test_old_driver_excluded_with_forward_compat_fix() -> None:
    v = evaluate_row(ROW, "545.23.06", "12.3", [HostGpu("H100", "9.0", True)])
    assert v.status == "excluded"
    assert v.reasons == ["driver 545.23.06 < 570.26 needed by CUDA 12.8 (nemo v2.3.0)"]
    assert v.fixes == ["upgrade the driver to 570.26 or newer, or use forward compatibility (data-center GPUs only)"]


def test_old_driver_on_consumer_gpu_has_no_forward_compat() -> None:
    v = evaluate_row(ROW, "545.23.06", None, [HostGpu("GeForce RTX 4090", "8.9", False)])
    assert v.status == "excluded"
    assert "forward compatibility needs a data-center GPU; GeForce RTX 4090 is not one" in v.fixes[0]


def test_v100_lacks_flash_attn_and_fp8() -> None:
    v = evaluate_row(ROW, "575.51.03", "12.9", [HostGpu("V100", "7.0", True)])
    assert v.status == "excluded"
    assert v.reasons == ["V100 (sm70): flash-attn 2 needs sm80+; TE FP8 needs sm89+"]


def test_a100_runs_without_fp8() -> None:
    v = evaluate_row(ROW, "575.51.03", "12.9", [HostGpu("A100", "8.0", True)] * 8)
    assert v.status == "ok"
    assert v.notes == ["A100 (sm80): TE FP8 needs sm89+ (the row runs without it)"]


def test_h100_with_new_driver_is_ok() -> None:
    v = evaluate_row(ROW, "570.26", "12.8", [HostGpu("H100", "9.0", True)])
    assert (v.status, v.reasons, v.notes) == ("ok", [], [])


def test_blackwell_needs_cuda_12_8_code() -> None:
    older = RowNeeds("v2.2.1", "12.6", "560.28.03", (FA2,))
    v = evaluate_row(older, "575.51.03", "12.9", [HostGpu("B200", "10.0", True)])
    assert v.status == "excluded"
    assert "B200 (sm100): CUDA 12.6 (nemo v2.2.1) has no code for it; needs CUDA 12.8+" in v.reasons


def test_driver_unknown_and_floor_unknown() -> None:
    assert evaluate_row(ROW, None, None, []).status == "unknown"
    no_floor = RowNeeds("vX", "12.8", None, ())
    assert evaluate_row(no_floor, "570.26", None, []).status == "unknown"
    # without a floor the CUDA version the driver reports decides
    assert evaluate_row(no_floor, "550.54.15", "12.4", []).status == "excluded"
    assert evaluate_row(no_floor, "575.51.03", "12.9", []).status == "ok"


def test_cpu_only_row_runs_anywhere() -> None:
    assert evaluate_row(RowNeeds("smoke", None, None, ()), None, None, []).status == "ok"


def test_evaluate_real_matrix_against_planned_hosts() -> None:
    matrix = load_matrix()
    rows = [r for r in matrix.releases if not r.test_only]
    if not rows:
        pytest.skip("matrices/nemo.toml has no rows yet")
    ancient = evaluate_matrix(plan_host(driver="418.40.04", sm="9.0", gpus=8, matrix=matrix), matrix)
    modern = evaluate_matrix(plan_host(driver="999.99.99", sm="9.0", gpus=8, matrix=matrix), matrix)
    assert [v.tag for v in ancient] == [r.name for r in rows]
    for old, new, row in zip(ancient, modern, rows, strict=True):
        assert old.status in ("excluded", "unknown")  # no CUDA 12 row runs on a CUDA 10.1 driver
        if old.status == "excluded":
            assert old.reasons[0].startswith("driver 418.40.04 < ")
            assert f"({row.label})" in old.reasons[0]
        assert new.status in ("ok", "unknown")
    smoke = evaluate_matrix(plan_host(sm="7.0", matrix=matrix), matrix, include_test=True)
    assert [v.status for v in smoke if v.tag == "smoke"] == ["ok"]


@pytest.mark.gpu
def test_real_nvml_on_a_gpu_machine() -> None:
    host = detect_host(local=False)
    assert host.source == "detected"
    assert host.driver and host.cuda_driver_version
    assert host.gpus and all(g.sm and g.memory_gib for g in host.gpus)
    assert host_constraints(host)["gpu_count"] == len(host.gpus)


def test_gpu_lookup_matches_whole_words() -> None:
    def gpu(name: str, sm: str, aliases: tuple[str, ...] = ()) -> Gpu:
        return Gpu(name, aliases, {"sm": Fact(sm, "test"), "memory_gib": Fact(40, "test")})

    table = Matrix(releases=(), gpus=(gpu("A10", "8.6", ("NVIDIA A10",)), gpu("A100 40GB", "8.0"),
                                      gpu("H100 SXM", "9.0", ("NVIDIA H100 80GB HBM3",)), gpu("H100 NVL", "9.0")))
    assert find_gpu("A100", table) == find_gpu("a100 40gb", table)
    assert (find_gpu("A100", table) or pytest.fail()).sm == "8.0"  # not the A10 whose name it contains
    assert (find_gpu("NVIDIA A10", table) or pytest.fail()).name == "A10"
    assert (find_gpu("NVIDIA H100 NVL", table) or pytest.fail()).name == "H100 NVL"
    assert (find_gpu("NVIDIA H100 80GB HBM3", table) or pytest.fail()).name == "H100 SXM"
    assert find_gpu("A1", table) is None and find_gpu("", table) is None


def test_row_needs_reads_unknown_as_shipped_and_none_as_absent() -> None:
    from envbuilder.host.rows import row_needs
    from envbuilder.matrix import Release
    from envbuilder.matrix.model import CudaRelease

    facts = {"cuda": Fact("12.8", "t"), "flash_attn": Fact("unknown", "t"), "transformer_engine": Fact("none", "t"),
             "mamba_ssm": Fact("2.2.4", "t")}
    from envbuilder.matrix.model import ROW_FACTS

    facts = {**{k: Fact("unknown", "t") for k in ROW_FACTS}, **facts}
    table = Matrix(releases=(Release.from_facts("vT", facts, nemo="vT"),),
                   cuda_releases=(CudaRelease("12.8", "12.8.0", "12.8 GA", Fact("570.26", "t")),))
    needs = row_needs(table.releases[0], table)
    assert needs.cuda == "12.8" and needs.min_driver == "570.26"
    # flash-attn: version unconfirmed but shipped -> checked (fallback sm80); no TE -> no FP8 note;
    # mamba-ssm has no min_sm without build_packages.toml -> not checked
    assert [(k.what, k.min_sm, k.required) for k in needs.kernels] == [("flash-attn", "8.0", True)]
