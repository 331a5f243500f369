"""The glossary in CONTRIBUTING.md: every concept that crosses a stage has one name, and the synonyms its
last column names appear nowhere in envbuilder/ or the README (a synonym is how two homes for one fact start)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _glossary() -> list[tuple[str, list[tuple[str, str | None]]]]:
    """(term, [(refused synonym, file allowed to use it or None)]) of every glossary row."""
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    table = text[text.index("| term | meaning"):]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        term = re.sub(r"\*\*|\(.*?\)", "", cells[0]).strip()
        refused = []
        for m in re.finditer(r"`([^`]+)`(?:\s*\(outside ([^)]+)\))?", cells[-1]):
            refused.append((m.group(1), m.group(2)))
        rows.append((term, refused))
    return rows


def test_the_glossary_names_the_concepts_that_cross_a_stage() -> None:
    terms = {t for t, _ in _glossary()}
    for concept in ("lock directory", "lock record", "certificate", "expectations", "wheelhouse", "arch list",
                    "install set", "check result", "mode", "lock name", "jobs", "parallel", "progress"):
        assert concept in terms, f"CONTRIBUTING.md's glossary lacks {concept!r}"


def test_no_synonym_the_glossary_refuses_is_used() -> None:
    files = [*sorted((REPO / "envbuilder").rglob("*.py")), REPO / "README.md"]
    texts = {f: f.read_text(encoding="utf-8") for f in files}
    found = []
    for term, refused in _glossary():
        for word, allowed in refused:
            pattern = re.compile(rf"(?<![\w.-]){re.escape(word)}(?![\w-])")
            for f, text in texts.items():
                if allowed and f.relative_to(REPO).as_posix() == allowed:
                    continue
                if pattern.search(text):
                    found.append(f"{f.relative_to(REPO)}: {word!r} (say {term!r})")
    assert not found, "synonyms the glossary refuses:\n" + "\n".join(found)


def test_the_checker_sees_a_synonym() -> None:
    """The check above is not vacuous: every row that refuses something refuses a word it would find."""
    rows = [(t, r) for t, r in _glossary() if r]
    assert len(rows) >= 10
    word = rows[0][1][0][0]
    assert re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", f"x = {word}\n")
