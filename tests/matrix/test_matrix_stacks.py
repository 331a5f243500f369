"""Both stacks' min_driver, prebuilt-wheel facts and the preference, and the row options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.choices import LockMode
from envbuilder.errors import SourceBuildRefusedError
from envbuilder.matrix import load_matrix
from envbuilder.matrix.prebuilt import prebuilt_verdict
from envbuilder.matrix.stacks import row_stacks
from envbuilder.resolve import ResolveRequest
from envbuilder.resolve.prebuilt import prefer_prebuilt
from envbuilder.resolve.resolver import resolve

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def m():  # type: ignore[no-untyped-def]
    return load_matrix(REPO / "matrices")


def test_2604_stacks_have_their_own_driver_floor(m) -> None:  # type: ignore[no-untyped-def]
    row = m.find_row(release="26.04")
    stacks = row_stacks(m, row)
    # hermetic: PyPI torch 2.11.0 bundles cuda-toolkit 13.0.2 -> Table 3 'CUDA 13.0 Update 2 | >=580.95.05'
    assert stacks[LockMode.HERMETIC].cuda_toolkit.value == "13.0.2"
    assert stacks[LockMode.HERMETIC].min_driver.value == "580.95.05"  # not the 13.0 GA floor 580.65.06
    assert stacks[LockMode.HERMETIC].minor_compat_floor.value == "580.65.06"
    # container: CUDA 13.1.1 -> its own Table 3 row 'CUDA 13.1 Update 1 | 590.48.01', not the 13.1 GA floor 590.44.01
    assert stacks[LockMode.NGC_BASE].cuda_toolkit.value == "13.1.1"
    assert stacks[LockMode.NGC_BASE].min_driver.value == "590.48.01"
    assert "lower bound" not in stacks[LockMode.NGC_BASE].min_driver.source
    assert stacks[LockMode.NGC_BASE].torch.value.startswith("2.11.0a0")


def test_an_update_with_an_unknown_floor_falls_back_to_its_ga_as_a_lower_bound(m) -> None:  # type: ignore[no-untyped-def]
    from envbuilder.matrix.model import Fact
    from envbuilder.matrix.stacks import min_driver_for

    got = min_driver_for(m, Fact("13.2", "test"), Fact("13.2.2", "test"))  # 13.2 Update 2: no Table 3 row read
    assert got.value == "595.45.04" and "lower bound" in got.source
    assert min_driver_for(m, Fact("13.3", "test"), Fact("13.3.0", "test")).value == "610.43.02"


def test_every_cuda_release_but_one_has_a_known_floor(m) -> None:  # type: ignore[no-untyped-def]
    # the one exception is named in matrices/cuda.toml's header with the reason; a new unknown needs the same
    unknown = [c.version for c in m.cuda_releases if not c.min_driver_linux.known]
    assert unknown == ["13.2.2"]


def test_old_rows_keep_the_ga_floor_and_say_so(m) -> None:  # type: ignore[no-untyped-def]
    stacks = row_stacks(m, m.find_row(nemo="v2.3.0"))
    assert stacks[LockMode.HERMETIC].min_driver.value == "560.28.03"  # CUDA 12.6 GA, as the v2.3.0 locks record
    assert "GA floor" in stacks[LockMode.HERMETIC].min_driver.source
    assert stacks[LockMode.NGC_BASE].min_driver.value == "unknown"  # the 25.04 container's CUDA is not recorded


def test_ngc_base_uses_the_container_cuda(m) -> None:  # type: ignore[no-untyped-def]
    res = resolve(m, ResolveRequest(row="26.04", row_option="release", mode="ngc-base"))
    assert res.cuda == "13.1" and res.min_driver == "590.48.01"
    res = resolve(m, ResolveRequest(row="26.04", row_option="release"))
    assert res.cuda == "13.0" and res.min_driver == "580.95.05"


def test_row_options_name_the_same_rows(m) -> None:  # type: ignore[no-untyped-def]
    assert m.find_row(release="25.11").name == "v2.6.0"
    assert m.find_row(mbridge="0.4") is m.find_row(release="26.04") is m.find_row(mbridge="0.4.0")
    assert m.find_row(nemo="2.3.0").name == "v2.3.0"
    assert m.find_row(nemo="26.04") is None  # a release is not a NeMo tag


def test_flash_attn_wheel_names_and_torch_27(m) -> None:  # type: ignore[no-untyped-def]
    # TE 2.2 accepts flash-attn <= 2.7.4.post1: none of those releases built a torch-2.7 wheel
    for v in ("2.7.3", "2.7.4.post1"):
        assert prebuilt_verdict(m.prebuilt_wheels, "flash-attn", v, "3.12", "2.7.0", "12", True).answer == "no"
    yes = prebuilt_verdict(m.prebuilt_wheels, "flash-attn", "2.8.0.post2", "3.12", "2.7.0", "12", True)
    assert yes.answer == "yes"
    assert yes.wheel == "flash_attn-2.8.0.post2+cu12torch2.7cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"
    # <= 2.6.3 names its wheels with major+minor CUDA: the v2.0.0 row's flash-attn 2.4.2 is cu122
    old = prebuilt_verdict(m.prebuilt_wheels, "flash-attn", "2.4.2", "3.11", "2.1.1", "12", False)
    assert old.answer == "yes" and "+cu122torch2.1cxx11abiFALSE-cp311" in str(old.wheel)
    assert "+cu123torch2.4" in str(prebuilt_verdict(m.prebuilt_wheels, "flash-attn", "2.6.3", "3.11", "2.4.0", "12",
                                                      False).wheel)
    unknown = prebuilt_verdict(m.prebuilt_wheels, "flash-attn", "2.0.4", "3.11", "2.1.1", "12", False)
    assert unknown.answer == "unknown" and unknown.wheel is None
    # recorded from its PyPI sdist (the wheel name setup.py asks for), but its release workflow was not read:
    # the wheel is named, whether it was published is unknown, never "no"
    post2 = prebuilt_verdict(m.prebuilt_wheels, "flash-attn", "2.8.3.post2", "3.12", "2.11.0", "13", True)
    assert post2.answer == "unknown"
    assert post2.wheel == "flash_attn-2.8.3.post2+cu13torch2.11cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"
    for v in ("1.6.2.post1", "1.7.0"):
        cc = prebuilt_verdict(m.prebuilt_wheels, "causal-conv1d", v, "3.12", "2.11.0", "13", True)
        assert cc.answer == "unknown" and f"causal_conv1d-{v}+cu13torch2.11" in str(cc.wheel)


def test_transformer_engine_torch_matches_the_whole_torch_version(m) -> None:  # type: ignore[no-untyped-def]
    """TE-torch's setup.py looks for torch{torch.__version__}: the release build is torch 2.8.0+cu129 only."""
    te = "transformer-engine-torch"
    hit = prebuilt_verdict(m.prebuilt_wheels, te, "2.14.1", "3.12", "2.8.0", "12", True, "2.8.0+cu129")
    assert hit.answer == "yes"
    assert hit.wheel == "transformer_engine_torch-2.14.1+cu12torch2.8.0+cu129cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"
    # PyPI's torch 2.8.0 is the cu128 build: another torch.__version__, so no download
    assert prebuilt_verdict(m.prebuilt_wheels, te, "2.14.1", "3.12", "2.8.0", "12", True, "2.8.0+cu128").answer == "no"
    # an X.Y.0 release is tagged vX.Y, but setup.py asks for vX.Y.0: nothing downloads
    x_y_0 = prebuilt_verdict(m.prebuilt_wheels, te, "2.14.0", "3.12", "2.8.0", "12", True, "2.8.0+cu129")
    assert x_y_0.answer == "no" and "does not resolve" in x_y_0.source
    # without a fixed torch build (ngc-base, host-torch) the answer is unknown, not a guess
    assert prebuilt_verdict(m.prebuilt_wheels, te, "2.16.0", "3.12", "2.12.0", "13", True).answer == "unknown"
    assert prebuilt_verdict(m.prebuilt_wheels, te, "2.7.0", "3.12", "2.8.0", "12", True, "2.8.0+cu128").answer == "no"


def test_lock_verdicts_for_te_torch_by_mode(m) -> None:  # type: ignore[no-untyped-def]
    hermetic = resolve(m, ResolveRequest(row="26.04", row_option="release"))
    verdict = {v.package: v for v in hermetic.prebuilt}["transformer-engine-torch"]
    assert verdict.answer == "no" and "torch2.11.0+cu130" in str(verdict.wheel)
    ngc = resolve(m, ResolveRequest(row="26.04", row_option="release", mode="ngc-base"))
    assert {v.package: v.answer for v in ngc.prebuilt}["transformer-engine-torch"] == "unknown"


def test_preference_picks_a_release_with_a_wheel_inside_te_range(m) -> None:  # type: ignore[no-untyped-def]
    chosen = {"torch": ("2.7.0", "t"), "transformer-engine": ("2.14.0", "t"), "flash-attn": ("2.7.4.post1", "row")}
    out, verdicts = prefer_prebuilt(m, chosen, {}, "3.12", "2.7.0", "12.8", "allow")
    # TE 2.14 accepts flash-attn <= 2.8.3; 2.8.3 is the newest release in range with a torch-2.7 wheel
    assert out["flash-attn"][0] == "2.8.3" and out["flash-attn"][1].startswith("prebuilt:")
    assert {v.package: v.answer for v in verdicts}["flash-attn"] == "yes"
    # an explicit --set is kept, and --no-source-build then refuses it with the versions that would work
    with pytest.raises(SourceBuildRefusedError) as err:
        prefer_prebuilt(m, chosen, {"flash-attn": "2.7.4.post1"}, "3.12", "2.7.0", "12.8", "forbid")
    assert err.value.exit_code == 82 and "2.8.3" in str(err.value.fix)


def test_no_source_build_cli_is_one_line_with_its_code() -> None:
    proc = subprocess.run([sys.executable, "-m", "envbuilder", "lock", "--nemo", "v2.3.0", "--no-detect",
                           "--no-source-build", "-o", "/nonexistent/never-written"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 82, proc.stderr
    assert "--no-source-build: causal-conv1d 1.2.2.post1 has no prebuilt wheel for torch 2.7.0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_row_option_errors(m) -> None:  # type: ignore[no-untyped-def]
    both = subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "show", "--nemo", "v2.3.0", "--release",
                           "26.04"], capture_output=True, text=True, timeout=60)
    assert both.returncode == 18 and "name one matrix row" in both.stderr
    unknown = subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "show", "--release", "99.99"],
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 10 and "unknown release '99.99'" in unknown.stderr


def test_matrix_show_release_json_has_both_stacks() -> None:
    import json

    proc = subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "show", "--release", "26.04", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["release"] == "26.04" and d["megatron_bridge"] == "0.4.0" and d["nemo"] is None
    assert (d["container_cuda"], d["container_cudnn"]) == ("13.1.1", "9.20.0.48")
    assert d["container_torch"] == "2.11.0a0+eb65b36914.nv26.02" and d["torch"] == "2.11.0"
    assert d["stacks"]["hermetic"]["min_driver"] == d["min_driver"] == "580.95.05"
    assert all(d["sources"][k] for k in ("megatron_bridge", "container_cuda", "container_torch", "min_driver"))


def test_mbridge_recipe_and_sp_without_tp_fail_like_megatron_core() -> None:
    ok = subprocess.run([sys.executable, "-m", "envbuilder", "check-parallel", "--from-nemo-recipe", "mbridge_qwen3_8b",
                         "--gpus-per-node", "8", "--nodes", "1", "--json"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    import json

    assert json.loads(ok.stdout)["layout"]["tp"] == 4  # qwen3_8b_pretrain_config: TP=4
    bad = subprocess.run([sys.executable, "-m", "envbuilder", "check-parallel", "--from-nemo-recipe",
                          "mbridge_qwen3_8b", "--gpus-per-node", "8", "--nodes", "1", "--tp", "1", "--sp"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 21
    assert "Cannot use sequence parallelism without tensor parallelism" in bad.stderr
