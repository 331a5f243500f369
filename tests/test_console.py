"""The console never reads markup from text, and no module works around it with rich's escape()."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from rich.table import Table

from envbuilder.console import SafeConsole, plain, styled

PKG = Path(__file__).resolve().parent.parent / "envbuilder"


def _render(*objects: object) -> str:
    buf = io.StringIO()
    SafeConsole(file=buf, width=200, markup=False, emoji=False, color_system=None).print(*objects)
    return buf.getvalue()


def test_text_is_shown_as_it_is() -> None:
    assert _render("x[/]y [red]z[/red] :smile:") == "x[/]y [red]z[/red] :smile:\n"
    assert _render("a\x1b[2Jb\rc\x07") == "a\\e[2Jb\\rc\\x07\n"
    assert _render("two\nlines") == "two\nlines\n"


def test_tables_and_styled_values() -> None:
    t = Table("name", title="[bold]t[/]")
    t.add_row("[/]\x1b]0;x\x07")
    out = _render(t)
    assert "[/]\\e]0;x\\x07" in out and "[bold]t[/]" in out
    assert _render(styled("[green]wrote[/] {}", "x[/]\x1b")) == "wrote x[/]\\e\n"
    assert plain("a\tb").plain == "a\tb"


def test_no_module_escapes_markup_itself() -> None:
    """rich.markup.escape adds backslashes a SafeConsole would print: only console.py may use it."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "console.py" and path.parent == PKG:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "rich.markup":
                bad.append(str(path.relative_to(PKG)))
    assert not bad, f"print text through envbuilder.console (plain/styled), not rich.markup: {bad}"
