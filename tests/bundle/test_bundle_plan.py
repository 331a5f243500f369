"""What a bundle carries, planned from a real lock (the 26.04 host-torch lock certified on the H100).

`uv export --frozen` runs for real; it needs no network.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from envbuilder.bundle.plan import plan_files
from envbuilder.lock.platform import tag_ranks, target_tags

LOCK = Path(__file__).resolve().parents[2] / "bench" / "results" / "certify-26.04-h100-bundle" / "lock"


def test_one_wheel_per_package_the_one_an_installer_picks() -> None:
    rec = json.loads((LOCK / "envbuilder.lock.json").read_text())
    planned = plan_files(LOCK, "3.12", "2.39", list(rec["stage2_packages"]))
    wheels = Counter(p.package for p in planned if p.kind == "wheel")
    assert wheels and max(wheels.values()) == 1, [n for n, c in wheels.items() if c > 1]
    # uv.lock has two pillow 12.2.0 wheels that run on glibc 2.39; the newer manylinux one is preferred
    pillow = [p.file.filename for p in planned if p.package == "pillow"]
    assert pillow == ["pillow-12.2.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"]
    # stage-2 packages travel as sdists (the target builds them against its torch)
    sdists = {p.package for p in planned if p.kind == "sdist"}
    assert {"mamba-ssm", "causal-conv1d", "transformer-engine-torch"} <= sdists


def test_tag_ranks_cover_the_target_and_prefer_specific_tags() -> None:
    ranks = tag_ranks("3.12", "2.35")
    assert set(ranks) == target_tags("3.12", "2.35")
    by = {str(t): r for t, r in ranks.items()}
    assert by["cp312-cp312-manylinux_2_28_x86_64"] < by["cp312-cp312-manylinux_2_17_x86_64"]
    assert by["cp312-cp312-manylinux_2_17_x86_64"] < by["cp312-abi3-manylinux_2_17_x86_64"]
    assert by["cp312-abi3-manylinux_2_17_x86_64"] < by["py3-none-any"]
