"""Print the lock record's stage-2 build environment as shell `export` lines.

Runs inside the image build (`eval "$(python stage2_env.py envbuilder.lock.json)"`), so the
Dockerfile stays the same for every lock: the variables come from the lock, not the template.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from typing import Any

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def export_lines(record: dict[str, Any]) -> list[str]:
    env = record.get("stage2_env") or {}
    lines = []
    for name in sorted(env):
        if not _NAME.match(name):
            raise SystemExit(f"stage2_env: {name!r} is not a valid variable name")
        lines.append(f"export {name}={shlex.quote(str(env[name]))}")
    return lines


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        record = json.load(fh)
    for line in export_lines(record):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
