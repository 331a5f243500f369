"""The one JSON reader: limits checked while reading, strict JSON, every field typed."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest

from envbuilder import errors
from envbuilder.jsonread import Fields, depth, loads_json, read_bytes, read_json, read_object

ERR = errors.MalformedFileError
KW = {"what": "test file", "error": ERR, "fix": "pass the right file"}


def test_endless_input_is_refused_without_reading_it_all() -> None:
    t0 = time.monotonic()
    with pytest.raises(errors.InputTooLargeError) as exc:
        read_json("/dev/zero", **KW, max_bytes=1 << 20)
    assert time.monotonic() - t0 < 5 and "/dev/zero" in exc.value.cause and "1 MiB" in exc.value.cause
    with pytest.raises(errors.InputTooLargeError):
        read_bytes("/dev/urandom", what="key", max_bytes=4096)


def test_size_limit_is_exact(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('"' + "a" * 98 + '"')  # 100 bytes
    assert read_json(p, **KW, max_bytes=100) == "a" * 98
    with pytest.raises(errors.InputTooLargeError):
        read_json(p, **KW, max_bytes=99)
    with pytest.raises(errors.InputTooLargeError):
        loads_json(b"[1]" * 50, **KW, max_bytes=100)


@pytest.mark.parametrize("n", [65, 200, 100_000])
def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path, n: int) -> None:
    p = tmp_path / "deep.json"
    p.write_text("[" * n + "]" * n)
    with pytest.raises(errors.InputTooDeepError) as exc:
        read_json(p, **KW)
    assert "64 levels" in exc.value.cause
    p.write_text('{"a":' * n + "1" + "}" * n)
    with pytest.raises(errors.InputTooDeepError):
        read_json(p, **KW)


def test_depth_at_the_limit_is_read(tmp_path: Path) -> None:
    p = tmp_path / "ok.json"
    p.write_text("[" * 64 + "]" * 64)
    assert depth(read_json(p, **KW)) == 64
    assert depth(1) == 0 and depth([]) == 1 and depth({"a": [1]}) == 2


@pytest.mark.parametrize(("text", "needle"), [
    (b"\xff\xfe{}", "not UTF-8"),
    (b"{oops", "not valid JSON"),
    (b'{"a": 1, "a": 2}', "the key 'a' twice"),
    (b'{"loss": NaN}', "NaN"),
    (b'[Infinity]', "Infinity"),
    (b'[-Infinity]', "-Infinity"),
    (b"", "not valid JSON"),
])
def test_malformed_json_is_the_callers_error(text: bytes, needle: str) -> None:
    with pytest.raises(ERR) as exc:
        loads_json(text, **KW)
    assert needle in exc.value.cause and exc.value.fix == "pass the right file"


def test_nan_allowed_when_asked() -> None:
    assert math.isnan(loads_json(b"[NaN]", **KW, allow_nan=True)[0])
    assert loads_json("\ufeff[1]", **KW) == [1]  # a BOM is not an error


def test_missing_and_unreadable_files_are_typed(tmp_path: Path) -> None:
    with pytest.raises(errors.OutputPathError):
        read_json(tmp_path / "none.json", **KW)
    with pytest.raises(errors.OutputPathError):
        read_json(tmp_path, **KW)  # a directory
    p = tmp_path / "locked.json"
    p.write_text("{}")
    p.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(errors.PermissionDeniedError):
            read_json(p, **KW)


def _fields(doc: object) -> Fields:
    return Fields.of(doc, "manifest m.json", ERR, "rebuild it")


def test_fields_types() -> None:
    f = _fields({"s": "x", "i": 3, "f": 1.5, "n": 2, "b": True, "l": [1], "o": {"k": "v"}, "z": None,
                 "h": "a" * 64, "names": ["a.whl", "b.whl"], "objs": [{"x": 1}]})
    assert f.string("s") == "x" and f.integer("i") == 3 and f.number("f") == 1.5 and f.number("n") == 2.0
    assert f.boolean("b") is True and f.array("l") == [1] and f.obj("o").string("k") == "v"
    assert f.string("z", default="d") == "d" and f.string("absent", default=None) is None
    assert f.sha256("h") == "a" * 64 and f.strings("names", plain=True) == ["a.whl", "b.whl"]
    assert [o.integer("x") for o in f.objs("objs")] == [1]
    assert dict(f) == f.data and f["s"] == "x" and len(f) == 11


@pytest.mark.parametrize(("doc", "call", "needle"), [
    ({}, lambda f: f.string("row"), "field 'row' is missing"),
    ({"row": None}, lambda f: f.string("row"), "field 'row' is null"),
    ({"row": 3}, lambda f: f.string("row"), "field 'row' is the number 3, not a string"),
    ({"n": True}, lambda f: f.integer("n"), "is true, not an integer"),
    ({"n": 1.0}, lambda f: f.integer("n"), "not an integer"),
    ({"n": -1}, lambda f: f.integer("n", min=0), "outside >= 0"),
    ({"x": "1.0"}, lambda f: f.number("x"), "not a finite number"),
    ({"x": float("nan")}, lambda f: f.number("x"), "is NaN, not a finite number"),
    ({"x": float("inf")}, lambda f: f.number("x"), "not a finite number"),
    ({"x": 10**400}, lambda f: f.number("x"), "not a finite number"),
    ({"x": 2.0}, lambda f: f.number("x", max=1.0), "outside <= 1.0"),
    ({"h": "A" * 64}, lambda f: f.sha256("h"), "not a sha256"),
    ({"h": "ab"}, lambda f: f.sha256("h"), "not a sha256"),
    ({"o": []}, lambda f: f.obj("o"), "is a list of 0, not an object"),
    ({"l": {}}, lambda f: f.array("l"), "not a list"),
    ({"l": [1, "x"]}, lambda f: f.strings("l"), "field 'l[0]' is the number 1"),
    ({"p": [{"file": "../x"}]}, lambda f: f.objs("p")[0].string("file", plain=True), "field 'p[0].file'"),
    ({"p": [3]}, lambda f: f.objs("p"), "field 'p[0]' is the number 3, not an object"),
    ({"f": "../../victim.txt"}, lambda f: f.string("f", plain=True), "not a plain name"),
    ({"f": "/etc/passwd"}, lambda f: f.string("f", plain=True), "path separator"),
    ({"f": "/etc/passwd"}, lambda f: f.string("f", relpath=True), "absolute path"),
    ({"f": "a/../b"}, lambda f: f.string("f", relpath=True), "'..'"),
    ({"f": ".hidden"}, lambda f: f.string("f", plain=True), "hidden"),
    ({"f": ""}, lambda f: f.string("f", plain=True), "is empty"),
    ({"f": "a\nb"}, lambda f: f.string("f", plain=True), "'a\\\\nb'"),
    ({"m": "x"}, lambda f: f.string("m", choices=("a", "b")), "not one of a, b"),
    ({"s": "x" * 5000}, lambda f: f.string("s"), "longer than 4096"),
    ({"l": [1, 2, 3]}, lambda f: f.array("l", max_items=2), "more than 2"),
    ({"l": [1, float("nan")]}, lambda f: f.numbers("l"), "field 'l[1]' is NaN"),
])
def test_fields_refuse(doc: dict[str, object], call: object, needle: str) -> None:
    with pytest.raises(ERR) as exc:
        call(_fields(doc))  # type: ignore[operator]
    assert exc.value.cause.startswith("manifest m.json: ") and needle in exc.value.cause, exc.value.cause
    assert "\n" not in exc.value.cause and exc.value.fix == "rebuild it"


def test_numbers_may_allow_a_diverged_loss() -> None:
    vals = _fields({"l": [1, float("nan")]}).numbers("l", allow_nonfinite=True)
    assert vals[0] == 1.0 and math.isnan(vals[1])


def test_read_object_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "m.json"
    p.write_text(json.dumps([1]))
    with pytest.raises(ERR) as exc:
        read_object(p, **KW)
    assert str(p) in exc.value.cause and "not a JSON object (it is a list of 1)" in exc.value.cause
    p.write_text(json.dumps({"a": {"b": {"c": "x"}}}))
    with pytest.raises(ERR) as exc:
        read_object(p, **KW).obj("a").obj("b").integer("c")
    assert "field 'a.b.c' is the string 'x'" in exc.value.cause
