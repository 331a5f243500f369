"""The nightly's push step: last, only with --push, named after the row's tag, recorded by digest."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.errors import InvalidOptionError
from envbuilder.nightly.steps import RowConfig, command


def test_push_is_the_last_step_and_only_with_push(tmp_path: Path) -> None:
    plain = RowConfig(row="v2.3.0", output=tmp_path, locks=tmp_path / "locks")
    assert "push" not in plain.steps()
    with pytest.raises(InvalidOptionError):
        command(plain, "push")
    cfg = RowConfig(row="v2.3.0", output=tmp_path, locks=tmp_path / "locks", push="registry.example.com:5000/team/")
    assert cfg.steps()[-2:] == ["verify", "push"]  # only an image whose certificate verified is pushed
    assert command(cfg, "push") == ["push", "envbuilder/nightly-v2.3.0:nolock",
                                    "registry.example.com:5000/team/nightly-v2.3.0:nolock",
                                    "-o", str(tmp_path / "v2.3.0" / "push.json")]
