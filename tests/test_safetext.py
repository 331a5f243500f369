"""Names from files are plain before they meet a path; text for a terminal has no live control characters."""

from __future__ import annotations

import pytest

from envbuilder.safetext import finite, is_plain_name, plain_relpath_problem, printable


@pytest.mark.parametrize("name", ["torch-2.7.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl", "v2.3.0", "26.04",
                                  "smoke", "flash_attn-2.7.4.post1.tar.gz", "a", "pkg-1!2.0-py3-none-any.whl"])
def test_plain_names(name: str) -> None:
    assert is_plain_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", ".key", "../x", "a/b", "a\\b", "/abs", "a\nb", "a b", "a\x1b[2J",
                                  "-rf", "x" * 256, "a;b", "$(id)", "a`b`", "é", "a\x00", 3, None, ["a"]])
def test_not_plain_names(name: object) -> None:
    assert not is_plain_name(name)


def test_relpaths() -> None:
    assert plain_relpath_problem("wheels/torch-2.7.0-py3-none-any.whl") is None
    for bad in ("/etc/x", "a//b", "a/../b", "a/", "../a", "a/.b"):
        assert plain_relpath_problem(bad) is not None, bad


def test_finite() -> None:
    assert finite(1) == 1.0 and finite(0.5) == 0.5
    for bad in (float("nan"), float("inf"), -float("inf"), True, "1", None, 10**400):
        assert finite(bad) is None, bad


def test_printable_escapes_control_characters() -> None:
    assert printable("plain text, ünïcode") == "plain text, ünïcode"
    shown = printable("ok\x1b]0;pwned\x07\x1b[2J\r\nPASS\x7f\x9b\u2028\u202e")
    assert shown == "ok\\e]0;pwned\\x07\\e[2J\\r\\nPASS\\x7f\\x9b\\u2028\\u202e"
    assert shown.isprintable()
