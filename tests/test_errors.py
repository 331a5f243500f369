"""Every error class has its own exit code and kind, inside its area's documented range."""

from __future__ import annotations

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
