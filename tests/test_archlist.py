"""One ArchList for every stage: its spellings, the default each lock gets, and the checks against
matrices/cuda_archs.toml."""

from __future__ import annotations

import pytest

from envbuilder.archlist import ArchList
from envbuilder.errors import InvalidOptionError, UnsupportedArchError
from envbuilder.matrix.archs import check_arch_list, default_arch_list, load_arch_table


@pytest.mark.parametrize(("spec", "torch_form", "nvte"), [
    ("8.0;9.0", "8.0;9.0", "80;90"),
    ("sm_80,sm_90", "8.0;9.0", "80;90"),
    ("80 90 100", "8.0;9.0;10.0", "80;90;100"),
    ("9.0+PTX", "9.0+PTX", "90"),
    ("sm_90a", "9.0", "90"),
    ("sm_100f sm_120", "10.0;12.0", "100;120"),
])
def test_every_spelling_parses_to_one_value(spec: str, torch_form: str, nvte: str) -> None:
    archs = ArchList.parse(spec)
    assert archs.torch == torch_form and archs.semicolon_numbers == nvte


def test_torch_s_own_list_reads_with_the_same_parser() -> None:
    """certify reads torch.cuda.get_arch_list() with it: compute_XY is PTX for X.Y."""
    archs = ArchList.parse(["sm_80", "sm_90", "sm_100", "compute_100"])
    assert archs.archs == ("8.0", "9.0", "10.0") and archs.ptx == ("10.0",)


@pytest.mark.parametrize("bad", ["hopper", "", "9", "sm_9x"])
def test_a_bad_arch_list_is_an_option_error(bad: str) -> None:
    with pytest.raises(InvalidOptionError):
        ArchList.parse(bad)


def test_the_default_follows_the_row_s_cuda_and_reaches_every_blackwell() -> None:
    """Today's defaults stopped at 10.0: sm_103 (B300), sm_120 (RTX PRO 6000 / RTX 5090) and sm_121 (GB10) got
    no kernels ('no kernel image', state-spaces/mamba#867, #1019)."""
    assert default_arch_list("12.6", None).torch == "8.0;8.6;8.9;9.0"
    assert default_arch_list("12.8", None).torch == "8.0;8.6;8.9;9.0;10.0;12.0"
    assert default_arch_list("12.9", None).torch == "8.0;8.6;8.9;9.0;10.0;10.3;12.0;12.1"
    assert default_arch_list("13.0", None).torch == "8.0;8.6;8.9;9.0;10.0;10.3;12.0;12.1"
    # no CUDA, or one the table does not know: what every CUDA in the table compiles for, never a guess
    assert default_arch_list(None, None).torch == default_arch_list("99.9", None).torch == "8.0;8.6;8.9;9.0"
    # a lock made for a host builds for that host's GPU
    assert default_arch_list("13.0", "12.1").torch == "12.1"


def test_an_arch_list_is_checked_against_the_matrix() -> None:
    table = load_arch_table()
    assert table is not None and table.default
    assert check_arch_list(ArchList.parse("9.0;12.0"), "12.8") == ArchList(("9.0", "12.0"))
    with pytest.raises(UnsupportedArchError, match=r"12\.5 is not the compute capability"):
        check_arch_list(ArchList.parse("12.5"), None)
    with pytest.raises(UnsupportedArchError, match="cannot compile for sm_121"):
        check_arch_list(ArchList.parse("9.0;12.1"), "12.8")
    with pytest.raises(UnsupportedArchError, match="cannot compile for sm_70"):
        check_arch_list(ArchList.parse("7.0"), "13.0")
