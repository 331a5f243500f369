"""Row-level fixes of upstream pins: override_dependencies (26.04 / 26.06 cuBLAS, upstream's security overrides)
and a row's default glibc."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from envbuilder.errors import MatrixFileError
from envbuilder.host.torchprobe import HostTorch
from envbuilder.matrix import Matrix, load_matrix
from envbuilder.render import render_pyproject
from envbuilder.resolve import ResolveRequest, lock_glibc, resolve

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
CUBLAS = "nvidia-cublas>=13.2,<13.3"
URLLIB3 = "urllib3>=2.6.3"  # upstream's override for CVE-2026-21441, carried by every Megatron-Bridge row
NEVER_EO = "emerging-optimizers; sys_platform == 'never'"
# the GPU machines' Python: 3.12 with torch 2.11.0+cu130 (plain input data, what probe_torch reads)
GPU_HOST = HostTorch("/usr/bin/python3", "3.12", "cp312", "2.11.0+cu130", "13.0", True, ("torch", "triton"))


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load_matrix(REPO / "matrices")


def _uv(m: Matrix, req: ResolveRequest) -> dict:  # type: ignore[type-arg]
    return tomllib.loads(render_pyproject(resolve(m, req), m))["tool"]["uv"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("row", ["26.04", "26.06"])
def test_hermetic_lock_overrides_torchs_cublas_pin(m: Matrix, row: str) -> None:
    req = ResolveRequest(row=row, row_option="release", glibc="2.39")
    res = resolve(m, req)
    assert CUBLAS in res.override_dependencies and URLLIB3 in res.override_dependencies
    rendered = _uv(m, req)["override-dependencies"]
    assert NEVER_EO in rendered and CUBLAS in rendered and URLLIB3 in rendered
    # provenance: the matrix field, and the reason with its source in the record's notes
    assert res.provenance["nvidia-cublas"] == f"matrix:mbridge.toml#{row}.override_dependencies ({CUBLAS})"
    assert res.provenance["urllib3"] == f"matrix:mbridge.toml#{row}.override_dependencies ({URLLIB3})"
    note = next(n for n in res.notes if n.text.startswith("The lock overrides every pin of nvidia-cublas"))
    assert "cublasLtGroupedMatrixLayoutInit_internal" in note.text and "nm -D" in note.source
    assert not any("nvidia-cublas" in w for w in res.warnings)


def test_nemo_rows_carry_upstreams_security_overrides_only(m: Matrix) -> None:
    res = resolve(m, ResolveRequest(row="v2.7.0"))
    assert res.override_dependencies == (URLLIB3, "cryptography>=43.0.0,<47") and "nvidia-cublas" not in res.provenance
    assert _uv(m, ResolveRequest(row="v2.7.0"))["override-dependencies"] == [URLLIB3, "cryptography>=43.0.0,<47"]
    # NeMo 2.0/2.1 lock no nemo-run: no cryptography cap to set aside, only urllib3's fix
    assert resolve(m, ResolveRequest(row="v2.0.0")).override_dependencies == (URLLIB3,)


def test_host_torch_cannot_override_the_interpreters_cublas_and_says_how_to_fix(m: Matrix) -> None:
    req = ResolveRequest(row="26.04", row_option="release", mode="host-torch", host_torch=GPU_HOST)
    res = resolve(m, req)
    # the interpreter's torch brings its cuBLAS; upstream's urllib3 fix installs into the venv as always
    assert CUBLAS not in res.override_dependencies and URLLIB3 in res.override_dependencies
    assert not any("urllib3" in w and "cannot install" in w for w in res.warnings)
    warning = next(w for w in res.warnings if "nvidia-cublas" in w)
    assert "torch 2.11.0+cu130 brings its own nvidia-cublas" in warning
    assert f"pip install '{CUBLAS}'" in warning and "LD_PRELOAD" in warning
    overrides = _uv(m, req)["override-dependencies"]
    assert CUBLAS not in overrides and URLLIB3 in overrides
    # what the interpreter has is never installed, and the row's dropped package stays out too
    assert overrides[:2] == ["torch; sys_platform == 'never'", "triton; sys_platform == 'never'"]
    assert NEVER_EO in overrides


def test_ngc_base_keeps_the_container_torch_drops_and_overrides(m: Matrix) -> None:
    overrides = _uv(m, ResolveRequest(row="26.04", row_option="release", mode="ngc-base"))["override-dependencies"]
    assert overrides[:3] == ["torch; sys_platform == 'never'", "torchvision; sys_platform == 'never'",
                             "triton; sys_platform == 'never'"]
    assert NEVER_EO in overrides
    assert CUBLAS in overrides and URLLIB3 in overrides


def test_row_glibc_is_the_default_and_an_explicit_glibc_wins(m: Matrix) -> None:
    assert lock_glibc(m, "26.06", "release", None) == ("2.39", True)
    assert lock_glibc(m, "0.5.0", "mbridge", None) == ("2.39", True)
    assert lock_glibc(m, "26.06", "release", "2.35") == ("2.35", False)
    assert lock_glibc(m, "26.04", "release", None) == ("2.39", True)  # derived: the container's Ubuntu 24.04
    assert lock_glibc(m, "v2.3.0", "nemo", None) == ("2.35", False)  # no row glibc: the 2.35 default
    res = resolve(m, ResolveRequest(row="26.06", row_option="release", glibc="2.39", glibc_from_row=True))
    assert res.glibc == "2.39" and res.provenance["glibc"] == "matrix:mbridge.toml#26.06.glibc"
    explicit = resolve(m, ResolveRequest(row="26.06", row_option="release", glibc="2.39"))
    assert "glibc" not in explicit.provenance


def _matrix_copy(tmp_path: Path) -> Path:
    d = tmp_path / "matrices"
    shutil.copytree(REPO / "matrices", d)
    return d


def test_loader_rejects_a_bad_override_and_a_bad_glibc(tmp_path: Path) -> None:
    d = _matrix_copy(tmp_path)
    text = (d / "mbridge.toml").read_text()
    (d / "mbridge.toml").write_text(text.replace(f'requirement = "{CUBLAS}"', 'requirement = "nvidia-cublas>>13"', 1))
    with pytest.raises(MatrixFileError) as exc:
        load_matrix(d)
    assert "override_dependencies" in exc.value.cause and "PEP 508" in exc.value.cause

    (d / "mbridge.toml").write_text(text.replace('glibc              = { value = "2.39"', 'glibc = { value = "ubuntu"',
                                                 1))
    with pytest.raises(MatrixFileError) as exc:
        load_matrix(d)
    assert "is not a glibc version" in exc.value.cause


SECURITY_CUTOFFS = {"cryptography": "2026-02-10T19:19:00Z", "urllib3": "2026-01-07T16:25:00Z"}
ONE_LOGGER = ("nv-one-logger-core", "nv-one-logger-pytorch-lightning-integration", "nv-one-logger-training-telemetry")


def test_v2_5_1_takes_one_logger_past_its_yanked_release(m: Matrix) -> None:
    """nemo-toolkit 2.5.1 needs nv-one-logger-* >= 2.3.0; 2.3.0 is yanked and 2.3.1 came after the cutoff."""
    res = resolve(m, ResolveRequest(row="v2.5.1"))
    # the security fixes' own cutoffs (urllib3 2.6.3, cryptography 46.0.5) come beside the one-logger's
    assert res.exclude_newer_package == (("cryptography", SECURITY_CUTOFFS["cryptography"]),
                                         *((p, "2025-10-30T00:00:00Z") for p in ONE_LOGGER),
                                         ("urllib3", SECURITY_CUTOFFS["urllib3"]))
    assert res.exclude_newer == "2025-10-29T00:00:00Z" and res.latest_cutoff == SECURITY_CUTOFFS["cryptography"]
    uv = tomllib.loads(render_pyproject(res, m))["tool"]["uv"]
    assert uv["exclude-newer"] == "2025-10-29T00:00:00Z"
    assert uv["exclude-newer-package"] == {**{p: "2025-10-30T00:00:00Z" for p in ONE_LOGGER}, **SECURITY_CUTOFFS}
    for p in ONE_LOGGER:
        assert res.provenance[p] == "matrix:nemo.toml#v2.5.1.exclude_newer_package (2025-10-30T00:00:00Z)"
        note = next(n for n in res.notes if n.text.startswith(f"{p} may be newer"))
        assert "yanked" in note.text and f"https://pypi.org/project/{p}/#history" in note.source
    # rows whose cutoff is after the fixes' need no exception, and their cutoff is the row's
    other = resolve(m, ResolveRequest(row="v2.7.0"))
    assert other.latest_cutoff == other.exclude_newer and "exclude-newer-package" not in render_pyproject(other, m)


def test_loader_rejects_a_per_package_cutoff_that_is_no_date(tmp_path: Path) -> None:
    d = _matrix_copy(tmp_path)
    text = (d / "nemo.toml").read_text()
    (d / "nemo.toml").write_text(text.replace('value = "2025-10-30T00:00:00Z"', 'value = "soon"', 1))
    with pytest.raises(MatrixFileError) as exc:
        load_matrix(d)
    assert "exclude_newer_package" in exc.value.cause and "RFC 3339" in exc.value.cause


def test_matrix_show_names_the_rows_glibc_and_fixes() -> None:
    import json
    import subprocess

    def show(*args: str) -> dict:  # type: ignore[type-arg]
        proc = subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "show", *args, "--json"],
                              capture_output=True, text=True, timeout=120, check=True)
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    r2606 = show("--release", "26.06")
    assert r2606["glibc"] == "2.39" and "Dockerfile.ci@v0.5.0" in r2606["sources"]["glibc"]
    fixes = {o["requirement"]: o for o in r2606["override_dependencies"]}
    assert fixes[CUBLAS]["reason"] == "row" and fixes[URLLIB3]["reason"] == "security"
    assert "CVE-2026-21441" in fixes[URLLIB3]["text"] and fixes[URLLIB3]["status"] == "derived"
    r251 = show("--nemo", "v2.5.1")
    assert r251["glibc"] == "2.35" and r251["sources"]["glibc"].startswith("envbuilder default")
    assert sorted(c["package"] for c in r251["exclude_newer_package"]) == sorted([*ONE_LOGGER, *SECURITY_CUTOFFS])


def test_hermetic_lock_on_another_cuda_major_than_the_container_warns_with_the_opt_in(m: Matrix) -> None:
    res = resolve(m, ResolveRequest(row="v2.6.0"))  # 25.11 container: CUDA 13.0.1; PyPI torch 2.9.1: cu128
    warning = next(w for w in res.warnings if w.startswith("the hermetic stack is CUDA 12.8"))
    assert "nvcr.io/nvidia/nemo:25.11 is CUDA 13.0.1" in warning
    assert "--cuda 13.0 --torch-index pytorch locks torch 2.9.1+cu130" in warning
    # the opt-in resolves to the PyTorch index's cu130 wheel, and then nothing is mixed
    opted = resolve(m, ResolveRequest(row="v2.6.0", cuda="13.0", torch_index="pytorch"))
    assert opted.torch_index == "https://download.pytorch.org/whl/cu130"
    assert not any(w.startswith("the hermetic stack") for w in opted.warnings)
    # rows whose PyPI torch already matches the container's major, or whose container CUDA is unknown
    for row, option in (("26.04", "release"), ("v2.6.1", "nemo")):
        assert not any(w.startswith("the hermetic stack") for w in resolve(
            m, ResolveRequest(row=row, row_option=option)).warnings)
