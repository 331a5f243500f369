"""How a failed mksquashfs is reported: a full disk (said or not), or a typed tool failure, never a bug.

The commands are real processes standing in for mksquashfs (`sh -c ...`): what matters here is the exit
status and stderr they leave, which is all `_run` reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.errors import DiskFullError, SquashfsToolError
from envbuilder.export import squashfs
from envbuilder.export.squashfs import parse_squash_options


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


@pytest.mark.parametrize("text", [
    "-comp zstd -Xcompression-level 19 -b 1M", "-comp lzo -noD", "-comp gzip -Xwindow-size 15 -processors 4",
    "-noI -noId -noD -noF -noX", "-comp xz -Xbcj x86 -Xdict-size 100%", "-comp lz4 -Xhc -no-fragments",
    "-mem 512M -no-duplicates -always-use-fragments",
])
def test_compression_and_tuning_options_pass(text: str) -> None:
    assert parse_squash_options(text) == text.split()


@pytest.mark.parametrize(("text", "needle"), [
    ("-p 'file f 644 0 0 echo owned'", "'-p'"),
    ("-pf /tmp/pseudo", "'-pf'"),
    ("-action 'exclude@name(*.so)'", "'-action'"),
    ("-ef /tmp/exclude", "'-ef'"),
    ("-e etc", "'-e'"),
    ("-sort /tmp/sort", "'-sort'"),
    ("-root-becomes x", "'-root-becomes'"),
    ("-all-root", "'-all-root'"),
    ("-force-uid 0", "'-force-uid'"),
    ("-comp zstd /etc", "'/etc'"),
    ("-comp bzip2", "-comp takes a value"),
    ("-b", "not 'nothing'"),
    ("-b 1M;id", "-b takes a value"),
    ("-append", "'-append'"),
])
def test_everything_else_is_refused(text: str, needle: str) -> None:
    from envbuilder.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError) as exc:
        parse_squash_options(text)
    assert needle in exc.value.cause and "allowed:" in (exc.value.fix or "")
