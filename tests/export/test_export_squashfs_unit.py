"""How a failed mksquashfs is reported: a full disk (said or not), or a typed tool failure, never a bug.

The commands are real processes standing in for mksquashfs (`sh -c ...`): what matters here is the exit
status and stderr they leave, which is all `_run` reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.errors import DiskFullError, SquashfsToolError
from envbuilder.export import squashfs


def test_silent_failure_is_a_typed_tool_error(tmp_path: Path) -> None:
    with pytest.raises(SquashfsToolError) as exc:
        squashfs._run(["sh", "-c", "exit 1"], tmp_path / "x.sqsh", None)
    assert exc.value.exit_code == 46 and "no message" in exc.value.cause and exc.value.fix


def test_enospc_text_is_a_full_disk(tmp_path: Path) -> None:
    with pytest.raises(DiskFullError):
        squashfs._run(["sh", "-c", "echo 'Write failed because No space left on device' >&2; exit 1"],
                      tmp_path / "x.sqsh", None)


def test_silent_failure_on_a_nearly_full_filesystem_is_a_full_disk(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """mksquashfs under the mount feed ended with exit 1 and no message when /tmp filled up (seen in CI)."""
    monkeypatch.setattr(squashfs, "NEARLY_FULL_BYTES", 1 << 62)  # every filesystem counts as nearly full
    with pytest.raises(DiskFullError) as exc:
        squashfs._run(["sh", "-c", "exit 1"], tmp_path / "x.sqsh", None, cwd=tmp_path)
    assert str(tmp_path) in exc.value.cause
