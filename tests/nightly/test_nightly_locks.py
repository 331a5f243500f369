"""Committed locks: every matrix row has locks/<row>/ or a recorded reason in locks/STATUS.md, and
every committed lock's record binds its own uv.lock (sha256 recomputed)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from envbuilder.nightly.locks import KEPT, read_lock_all, render_status

REPO = Path(__file__).resolve().parents[2]
LOCKS = REPO / "locks"


def test_every_row_is_locked_or_says_why() -> None:
    listed = subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "list", "--json"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    rows = [r["row"] for r in json.loads(listed)]
    status = (LOCKS / "STATUS.md").read_text()
    unlocked = status.split("## Rows without a lock", 1)[1] if "## Rows without a lock" in status else ""
    for row in rows:
        if (LOCKS / row / "uv.lock").exists():
            assert f"| {row} | `" in status, f"{row} is locked but missing from locks/STATUS.md; run make locks"
        else:
            assert f"| {row} | " in unlocked, f"{row} has neither locks/{row}/ nor a reason in STATUS.md; make locks"


def test_committed_locks_bind_their_files_and_stay_small() -> None:
    dirs = sorted(p for p in LOCKS.iterdir() if p.is_dir())
    assert dirs
    total = 0
    for d in dirs:
        names = sorted(p.name for p in d.iterdir())
        assert names == sorted(KEPT), f"{d}: {names}"
        record = json.loads((d / "envbuilder.lock.json").read_text())
        assert record["lock_sha256"] == hashlib.sha256((d / "uv.lock").read_bytes()).hexdigest()
        total += sum(p.stat().st_size for p in d.iterdir())
    assert total < 16 * 2**20  # the device tool carries the repo (64 MiB in all)


def test_status_from_lock_all_json(tmp_path: Path) -> None:
    doc = {"error": "lock-all", "details": {"rows": [
        {"row": "v2.7.3", "lock_sha256": "ab" * 32, "error": None},
        {"row": "v2.0.0", "lock_sha256": "", "error": {"cause": "no | kernels", "fix": "use --source git",
                                                         "exit_code": 62}}]}}
    p = tmp_path / "all.json"
    p.write_text(json.dumps(doc))
    rows = read_lock_all(p)
    assert [(r.row, r.locked) for r in rows] == [("v2.7.3", True), ("v2.0.0", False)]
    md = render_status(rows)
    assert "1 of 2 rows locked" in md and "| v2.7.3 | `abababababab` |" in md
    assert "| v2.0.0 | 62 | no / kernels | use --source git |" in md


def test_no_committed_lock_is_kernel_less_and_git_sources_are_the_matrix_tags() -> None:
    """The decision for kernel-less PyPI sdists, on every committed row: each such pin builds from its
    repository's tag (the matrix's commit and tree), none is left kernel-less."""
    from envbuilder.lock.record import LockRecord
    from envbuilder.matrix import load_matrix

    m = load_matrix()
    built_from_git = 0
    for d in sorted(p for p in LOCKS.iterdir() if p.is_dir()):
        record = LockRecord.from_lockdir(d)
        assert record.kernel_less == [], f"{d.name}: {record.kernel_less} would install without kernels"
        for name, src in record.git_sources.items():
            tag = m.build_packages[name].git_tag(record.pins[name].version)
            assert tag is not None and (src.url, src.tag, src.commit, src.tree) == (tag.url, tag.tag, tag.commit,
                                                                                  tag.tree), f"{d.name}: {name}"
            built_from_git += 1
    assert built_from_git >= 2  # v2.3.0's mamba-ssm and causal-conv1d at least
