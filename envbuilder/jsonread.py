"""The one validated reader of JSON inputs: every JSON file envbuilder reads comes in through here.

Standard library only (certify's in-environment modules may use it).

Reading (`read_json`, `loads_json`):
- a size limit, checked while reading: an endless input (`/dev/zero`, a FIFO that never ends) is
  refused after `max_bytes` + 1 bytes, never read whole (`InputTooLargeError`, 121);
- a depth limit: nesting deeper than `max_depth` is refused (`InputTooDeepError`, 122), never a
  RecursionError here or in the code that walks the value later;
- strict JSON: UTF-8, no duplicate keys (two parsers must not see two different objects), and no
  NaN/Infinity literals unless the caller allows them (a certificate may record a diverged loss);
- every other failure is the caller's own error class (`error=`), with the file named in its cause.

Checking (`Fields`): a JSON object read field by field, each with its type:

    doc = read_object(path, what="bundle manifest", error=BundleInvalidError, fix="rebuild the bundle")
    schema = doc.integer("schema", min=1)
    row = doc.string("row", plain=True)              # a plain name: safe to join to a path
    files = [p.string("file", plain=True) for p in doc.objs("packages")]
    threshold = doc.number("threshold", default=0.05, min=0)   # finite, or refused

A wrong field raises `error` with a cause naming the file and the field path (`packages[3].file`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

from envbuilder.errors import EnvbuilderError, InputTooDeepError, InputTooLargeError, os_error
from envbuilder.safetext import finite, plain_name_problem, plain_relpath_problem, printable

#: the default size limit: far above any record envbuilder writes (the biggest, a history, is ~100 KiB)
MAX_BYTES = 16 << 20
#: the default depth limit: envbuilder's own records nest at most ~8 levels
MAX_DEPTH = 64
#: a PEM CA bundle or a secret file (the system bundle is ~200 KiB)
CA_BUNDLE_MAX_BYTES = 16 << 20

_CHUNK = 1 << 20
_MISSING: Any = object()


def read_bytes(path: os.PathLike[str] | str, *, what: str, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of `path`, refused once longer than `max_bytes` (read in chunks, never whole).

    OSErrors become typed errors through errors.os_error (a missing file, no permission, EIO).
    """
    try:
        with open(path, "rb") as fh:
            chunks: list[bytes] = []
            size = 0
            while True:
                chunk = fh.read(min(_CHUNK, max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    raise too_large(path, what, max_bytes)
    except OSError as exc:
        raise os_error(exc, path, action="read") from exc
    return b"".join(chunks)


def too_large(path: os.PathLike[str] | str, what: str, max_bytes: int) -> InputTooLargeError:
    return InputTooLargeError(
        f"{what} {printable(path)} is larger than {_size(max_bytes)} (or endless); it was not read",
        f"pass the real {what}; a {what} is never that big")


def read_json(path: os.PathLike[str] | str, *, what: str, error: type[EnvbuilderError], fix: str,
              max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, allow_nan: bool = False) -> Any:
    """Parse the JSON file `path` (a `what`, e.g. "bundle manifest") within the limits above."""
    raw = read_bytes(path, what=what, max_bytes=max_bytes)
    return loads_json(raw, what=f"{what} {printable(path)}", error=error, fix=fix, max_bytes=max_bytes,
                      max_depth=max_depth, allow_nan=allow_nan)


def loads_json(data: bytes | str, *, what: str, error: type[EnvbuilderError], fix: str,
               max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, allow_nan: bool = False) -> Any:
    """Parse JSON text already in memory (a tar member, a DSSE payload, a child's stdout)."""
    if len(data) > max_bytes:
        raise InputTooLargeError(f"{what} is larger than {_size(max_bytes)}; it was not parsed",
                                 f"pass the real {what.split(' /')[0]}")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{what} is not UTF-8 JSON (byte {exc.start})", fix) from None
    else:
        text = data
    if text.startswith("\ufeff"):
        text = text[1:]

    def constant(name: str) -> float:
        if not allow_nan:
            raise _Refused(f"holds {name}, which is not JSON")
        return float(name)

    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=constant)
    except _Refused as exc:
        raise error(f"{what} {exc}", fix) from None
    except RecursionError:
        raise too_deep(what, max_depth) from None
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", fix) from None
    if depth(value) > max_depth:
        raise too_deep(what, max_depth)
    return value


def too_deep(what: str, max_depth: int) -> InputTooDeepError:
    return InputTooDeepError(f"{what} nests deeper than {max_depth} levels", f"pass the real {what.split(' /')[0]}")


def depth(value: Any) -> int:
    """How deeply `value` nests (a scalar is 0, [] is 1), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            d += 1
            stack.extend((x, d) for x in v.values())
        elif isinstance(v, list):
            d += 1
            stack.extend((x, d) for x in v)
        deepest = max(deepest, d)
    return deepest


class _Refused(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Refused(f"has the key {printable(k)!r} twice in one object")
        out[k] = v
    return out


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


# --- field checking -------------------------------------------------------------------------------


def read_object(path: os.PathLike[str] | str, *, what: str, error: type[EnvbuilderError], fix: str,
                max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, allow_nan: bool = False) -> Fields:
    """`read_json` of a file whose top level must be an object, ready to be checked field by field."""
    value = read_json(path, what=what, error=error, fix=fix, max_bytes=max_bytes, max_depth=max_depth,
                      allow_nan=allow_nan)
    return Fields.of(value, f"{what} {printable(path)}", error, fix)


class Fields(Mapping[str, Any]):
    """A JSON object whose fields are read with their types checked; a wrong one raises `error`.

    Each getter takes the key and, optionally, `default=` (the field may then be absent or null);
    without a default the field is required. `where` names the object in error messages.
    """

    def __init__(self, data: dict[str, Any], where: str, error: type[EnvbuilderError], fix: str,
                 path: str = "") -> None:
        self.data = data
        self.where = where
        self.error = error
        self.fix = fix
        self.path = path

    @classmethod
    def of(cls, value: Any, where: str, error: type[EnvbuilderError], fix: str) -> Fields:
        """Wrap `value`, which must be a JSON object."""
        if not isinstance(value, dict):
            raise error(f"{where} is not a JSON object (it is {_kind(value)})", fix)
        return cls(value, where, error, fix)

    # Mapping: a Fields can still be read like the dict it wraps
    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def fail(self, key: str | None, problem: str) -> NoReturn:
        """Raise this reader's error for field `key` (or the object itself when None)."""
        name = self._name(key) if key is not None else (self.path or "the top level")
        raise self.error(f"{self.where}: {name} {problem}", self.fix)

    def _name(self, key: str) -> str:
        return f"field '{self.path}.{key}'" if self.path else f"field '{key}'"

    def _get(self, key: str, default: Any, expected: str) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                self.fail(key, "is missing" if key not in self.data else f"is null (it must be {expected})")
            return default
        return value

    def _typed(self, key: str, default: Any, check: Callable[[Any], bool], expected: str) -> Any:
        value = self._get(key, default, expected)
        if value is default and default is not _MISSING:
            return value
        if not check(value):
            self.fail(key, f"is {_kind(value)}, not {expected}")
        return value

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        """The field's value of any JSON type."""
        return self._get(key, default, "present")

    def string(self, key: str, default: Any = _MISSING, *, plain: bool = False, relpath: bool = False,
            choices: tuple[str, ...] | frozenset[str] | None = None, nonempty: bool = False,
            max_len: int = 4096) -> Any:
        """A string; `plain=True`: a plain name (safetext.plain_name), `relpath=True`: plain names joined by /."""
        value = self._typed(key, default, lambda v: isinstance(v, str), "a string")
        if value is default and default is not _MISSING:
            return value
        if len(value) > max_len:
            self.fail(key, f"is longer than {max_len} characters")
        if nonempty and not value:
            self.fail(key, "is empty")
        problem = plain_name_problem(value) if plain else plain_relpath_problem(value) if relpath else None
        if problem is not None:
            self.fail(key, f"{printable(value)!r} is not a plain name: it {problem}")
        if choices is not None and value not in choices:
            self.fail(key, f"is {printable(value)!r}, not one of {', '.join(sorted(choices))}")
        return value

    def sha256(self, key: str, default: Any = _MISSING) -> Any:
        """64 lower-case hex digits."""
        value = self.string(key, default)
        if value is default and default is not _MISSING:
            return value
        if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
            self.fail(key, f"{printable(value)[:80]!r} is not a sha256 (64 lower-case hex digits)")
        return value

    def integer(self, key: str, default: Any = _MISSING, *, min: int | None = None, max: int | None = None) -> Any:
        """An integer (a bool is not one), within [min, max] when given."""
        value = self._typed(key, default, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
        if value is default and default is not _MISSING:
            return value
        if (min is not None and value < min) or (max is not None and value > max):
            self.fail(key, f"is {value}, outside {_range(min, max)}")
        return value

    def number(self, key: str, default: Any = _MISSING, *, min: float | None = None,
              max: float | None = None) -> Any:
        """A finite number (an int is accepted, a bool, NaN or infinity is not), within [min, max]."""
        value = self._get(key, default, "a finite number")
        if value is default and default is not _MISSING:
            return value
        out = finite(value)
        if out is None:
            self.fail(key, f"is {_kind(value)}, not a finite number")
        if (min is not None and out < min) or (max is not None and out > max):
            self.fail(key, f"is {out}, outside {_range(min, max)}")
        return out

    def boolean(self, key: str, default: Any = _MISSING) -> Any:
        return self._typed(key, default, lambda v: isinstance(v, bool), "true or false")

    def array(self, key: str, default: Any = _MISSING, *, max_items: int | None = None) -> Any:
        """A list of anything (check the items yourself, or use strs/objs)."""
        value = self._typed(key, default, lambda v: isinstance(v, list), "a list")
        if max_items is not None and isinstance(value, list) and len(value) > max_items:
            self.fail(key, f"has {len(value)} items, more than {max_items}")
        return value

    def strings(self, key: str, default: Any = _MISSING, *, plain: bool = False, relpath: bool = False) -> Any:
        """A list of strings (each a plain name / relative path when asked)."""
        items = self.array(key, default)
        if items is default and default is not _MISSING:
            return items
        wrapped = Fields({f"{key}[{i}]": v for i, v in enumerate(items)}, self.where, self.error, self.fix,
                         self.path)
        return [wrapped.string(f"{key}[{i}]", plain=plain, relpath=relpath) for i in range(len(items))]

    def obj(self, key: str, default: Any = _MISSING) -> Any:
        """A nested object, itself a Fields (`default` is returned as given when absent)."""
        value = self._typed(key, default, lambda v: isinstance(v, dict), "an object")
        if value is default and default is not _MISSING:
            return value
        return self._child(key, value)

    def objs(self, key: str, default: Any = _MISSING) -> Any:
        """A list of objects, each a Fields."""
        items = self.array(key, default)
        if items is default and default is not _MISSING:
            return items
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                self.fail(f"{key}[{i}]", f"is {_kind(item)}, not an object")
            out.append(self._child(f"{key}[{i}]", item))
        return out

    def _child(self, key: str, value: dict[str, Any]) -> Fields:
        return Fields(value, self.where, self.error, self.fix, f"{self.path}.{key}" if self.path else key)

    def numbers(self, key: str, default: Any = _MISSING, *, allow_nonfinite: bool = False) -> Any:
        """A list of numbers; non-finite ones (a diverged loss) only with allow_nonfinite."""
        items = self.array(key, default)
        if items is default and default is not _MISSING:
            return items
        out: list[float] = []
        for i, v in enumerate(items):
            f = finite(v)
            if f is None:
                if allow_nonfinite and isinstance(v, float):
                    out.append(v)
                    continue
                self.fail(f"{key}[{i}]", f"is {_kind(v)}, not a finite number")
            out.append(f)
        return out


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = printable(value)
        return f"the string {shown[:40]!r}" + ("..." if len(shown) > 40 else "")
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _range(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"[{lo}, {hi}]"
    return f">= {lo}" if lo is not None else f"<= {hi}"
