"""Every error class has its own exit code and kind, inside its area's documented range."""

from __future__ import annotations

import ast
import errno
import inspect
import itertools
import re
from pathlib import Path

import pytest

from envbuilder import errors


def test_exit_codes_and_kinds_are_distinct() -> None:
    classes = errors.all_error_classes()
    defined = {v for v in vars(errors).values()
               if isinstance(v, type) and issubclass(v, errors.EnvbuilderError) and v is not errors.EnvbuilderError}
    assert defined <= set(classes)  # the walk finds every class errors.py defines
    codes = [c.exit_code for c in classes]
    dupes = sorted({c for c in codes if codes.count(c) > 1})
    assert not dupes, f"exit codes used twice: {dupes} " + str(
        [(c.__name__, c.exit_code) for c in classes if c.exit_code in dupes])
    kinds = [c.kind for c in classes]
    assert len(set(kinds)) == len(kinds), "two error classes share a --json kind"


def test_codes_stay_out_of_reserved_values() -> None:
    for cls in errors.all_error_classes():
        # 0 success, 1 generic, 2 click usage, 130 interrupted; 70 only for InternalError
        assert cls.exit_code not in (0, 1, 2, 130), cls.__name__
        assert 10 <= cls.exit_code <= 129, cls.__name__
        assert cls.exit_code != 70 or cls is errors.InternalError
        assert cls.__doc__, f"{cls.__name__} has no docstring saying when it is raised"


# --- the band table in errors.py's docstring is the classes' own ---------------------------------


_BAND = re.compile(r"^ {4}(\d+)(?:-(\d+))? {2,}(\S.*)$")
_SECTION = re.compile(r"^# --- (\d+)(?:-(\d+))?: (.*?) -*$")


def _docstring_bands() -> dict[tuple[int, int], str]:
    doc = errors.__doc__ or ""
    out = {}
    for line in doc.splitlines():
        m = _BAND.match(line)
        if m:
            lo = int(m.group(1))
            out[(lo, int(m.group(2) or lo))] = m.group(3).strip()
    return out


def _sections() -> list[tuple[tuple[int, int], str, list[str]]]:
    """(band, title, class names defined under it) for each `# --- A-B: title` section of errors.py."""
    source = Path(inspect.getfile(errors)).read_text(encoding="utf-8")
    tree = ast.parse(source)
    starts = []
    for i, line in enumerate(source.splitlines(), 1):
        m = _SECTION.match(line)
        if m:
            lo = int(m.group(1))
            starts.append((i, (lo, int(m.group(2) or lo)), m.group(3).strip()))
    out = []
    for n, (line, band, title) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else 10**9
        names = [node.name for node in tree.body if isinstance(node, ast.ClassDef) and line < node.lineno < end]
        out.append((band, title, names))
    return out


def test_band_table_matches_the_sections_and_classes() -> None:
    bands = _docstring_bands()
    sections = _sections()
    assert bands, "errors.py's docstring lost its band table"
    for band, title, names in sections:
        assert bands.get(band) == title, f"section {band} {title!r} is not the docstring's {bands.get(band)!r}"
        for name in names:
            code = getattr(errors, name).exit_code
            assert band[0] <= code <= band[1], f"{name} ({code}) sits in section {band[0]}-{band[1]} {title!r}"
    # every class is in a section, and every band of the table that has classes is a section
    placed = {n for _, _, names in sections for n in names}
    assert {c.__name__ for c in errors.all_error_classes()} <= placed
    sectioned = {b for b, _, _ in sections}
    for band, title in bands.items():
        classes = [c.__name__ for c in errors.all_error_classes() if band[0] <= c.exit_code <= band[1]]
        assert band in sectioned or not classes, f"band {band} {title!r} holds {classes} but has no section"
    # bands do not overlap
    spans = sorted(bands)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), spans


def test_retired_codes_stay_retired() -> None:
    doc = errors.__doc__ or ""
    retired = [int(m) for m in re.findall(r"^(\d+) was ", doc, re.M)]
    assert 42 in retired
    assert not [c for c in errors.all_error_classes() if c.exit_code in retired]


def test_one_full_disk_error() -> None:
    assert not hasattr(errors, "NoSpaceError")
    assert errors.DiskFullError.exit_code == 74


@pytest.mark.parametrize(("code", "action", "cls"), [
    (errno.ENOSPC, "write", errors.DiskFullError),
    (errno.EDQUOT, "write", errors.DiskFullError),
    (errno.EFBIG, "write", errors.DiskFullError),
    (errno.EROFS, "write", errors.ReadOnlyFilesystemError),
    (errno.EACCES, "write", errors.PermissionDeniedError),
    (errno.EACCES, "read", errors.PermissionDeniedError),
    (errno.EPERM, "create", errors.PermissionDeniedError),
    (errno.ENAMETOOLONG, "write", errors.OutputPathError),
    (errno.EEXIST, "create", errors.OutputPathError),
    (errno.ENOTDIR, "write", errors.OutputPathError),
    (errno.EISDIR, "read", errors.OutputPathError),
    (errno.ENOENT, "read", errors.OutputPathError),
    (errno.ENOENT, "create", errors.OutputWriteError),
    (errno.EIO, "write", errors.OutputWriteError),
    (errno.EIO, "read", errors.InputReadError),
])
def test_os_error_mapping(code: int, action: str, cls: type[errors.EnvbuilderError]) -> None:
    exc = OSError(code, "strerror text", "/some/path")
    err = errors.os_error(exc, action=action, flag="-o")
    assert type(err) is cls
    assert "/some/path" in err.cause and "\n" not in err.cause
    assert err.fix and "\n" not in err.fix
    bare = errors.os_error(OSError(code, ""))  # no path, no strerror: still a cause with words in it
    assert type(bare) is cls or cls in (errors.InputReadError, errors.OutputPathError)
    assert bare.cause.strip() and not bare.cause.endswith(": ")


def test_readme_failure_table_covers_every_exit_code() -> None:
    """Every exit code a class has is in README's "Failure modes" table (its last column)."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Failure modes"):]
    table = table[: table.index("\n## ", 5)]
    listed: set[int] = set()
    for row in (ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("|---")):
        listed |= {int(x) for x in re.findall(r"\b(\d{1,3})\b", row.rstrip().rstrip("|").rsplit("|", 1)[-1])}
    missing = sorted((c.exit_code, c.__name__) for c in errors.all_error_classes() if c.exit_code not in listed)
    assert not missing, f"add these to README's Failure modes table: {missing}"


@pytest.mark.parametrize(("named", "shown"), [
    ("/o/.site.staging.2wzvheia/style.css", "/o/site"), ("/o/.venv.bundle.0032rfon", "/o/venv"),
    ("/o/.s.json.wtb9ydnm.tmp", "/o/s.json"), ("/o/.x.sqsh.probe.y0q1", "/o/x.sqsh"), ("/o/a.json", "/o/a.json"),
])
def test_errors_name_the_users_path_not_a_temp_name(named: str, shown: str) -> None:
    err = errors.os_error(OSError(errno.EROFS, "Read-only file system", named), action="write")
    assert f"cannot write {shown}:" in err.cause
