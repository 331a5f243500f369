"""Load a dashboard page in headless Chromium (Debian's `chromium`): console messages, DOM, screenshot.

The pages carry no script, so any console message at all (an error, a blocked resource, a parse
problem a script would hit) counts against the page. Local links and images are checked on disk:
Chromium does not log a missing file:// image to the console.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from envbuilder import procs
from envbuilder.atomic import run_tempdir
from envbuilder.errors import ToolMissingError

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
_CONSOLE = re.compile(r":CONSOLE(?::\d+)?\]\s*(.*)$")


@dataclass
class PageCheck:
    page: Path
    dom: str
    console: list[str] = field(default_factory=list)
    broken_links: list[str] = field(default_factory=list)
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.console and not self.broken_links

    def to_dict(self) -> dict[str, Any]:
        return {"page": str(self.page), "ok": self.ok, "console": self.console, "broken_links": self.broken_links,
                "screenshot": str(self.screenshot) if self.screenshot else None}


def find_chromium() -> str:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    raise ToolMissingError("no chromium binary on PATH", "install Debian's chromium: scripts/setup-host.sh")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if k in ("href", "src") and v:
                self.refs.append(v)


def broken_local_links(page: Path, html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    bad = []
    for ref in parser.refs:
        u = urlparse(ref)
        if u.scheme or ref.startswith("#"):
            if u.scheme not in ("", "file"):
                bad.append(f"{ref} (not offline: the dashboard must work without a network)")
            continue
        if not (page.parent / unquote(u.path)).exists():
            bad.append(ref)
    return bad


def _run(args: list[str], timeout: int) -> subprocess.CompletedProcess[str]:
    # a private profile: no state shared with other runs; --no-sandbox because CI runs as root
    with run_tempdir("chromium") as profile:
        cmd = [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-extensions", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
        return procs.run(cmd, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "HOME": str(profile)})


def check_page(page: Path, screenshot: Path | None = None, size: tuple[int, int] = (1600, 1000),
               timeout: int = 120) -> PageCheck:
    """Load `page` in headless Chromium; the DOM it built, every console line, and optionally a PNG."""
    page = Path(page).resolve()
    url = page.as_uri()
    dumped = _run(["--dump-dom", url], timeout)
    console = [m.group(1) for line in dumped.stderr.splitlines() if (m := _CONSOLE.search(line))]
    result = PageCheck(page, dumped.stdout, console, broken_local_links(page, page.read_text(encoding="utf-8")))
    if screenshot is not None:
        screenshot = Path(screenshot).resolve()
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        shot = _run([f"--screenshot={screenshot}", f"--window-size={size[0]},{size[1]}",
                     "--hide-scrollbars", url], timeout)
        result.console += [m.group(1) for line in shot.stderr.splitlines() if (m := _CONSOLE.search(line))]
        if screenshot.exists():
            result.screenshot = screenshot
    return result
