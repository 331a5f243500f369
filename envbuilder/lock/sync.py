"""`make sync`: install a lock directory into its own .venv with uv, both stages, as the image build does.

`python -m envbuilder.lock.sync LOCKDIR [--dry-run]`. Stage 1 is `uv sync --frozen` without the stage-2
packages stage 1 depends on (the record's `stage1_deferred`: they need torch to build, so they wait for
stage 2, like the Dockerfile's `--no-install-package`). Stage 2 adds the compile extra with the lock's
`stage2_env` and arch list, and skips the pins the record says it cannot build from their PyPI sdists
(`kernel_less`, and the `git_sources` that `envbuilder wheels` builds from their tags), saying so.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from envbuilder import procs
from envbuilder.lock.lockdir import open_lockdir
from envbuilder.lock.record import LockRecord


@dataclass(frozen=True)
class SyncPlan:
    """The two `uv sync` runs for one lock (arguments after `uv sync`), and the environment of the second."""

    stage1: list[str]
    stage2: list[str]
    stage2_env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def sync_plan(record: LockRecord, lockdir: Path) -> SyncPlan:
    deferred = sorted(record.stage1_deferred)
    stage1 = ["--frozen", *(a for n in deferred for a in ("--no-install-package", n))]
    skip = [*record.kernel_less, *sorted(record.git_sources)]
    warnings = [f"not installing {n}: its sdist has no CUDA sources (re-lock with --source git)"
                for n in record.kernel_less]
    warnings += [f"not installing {n} from its kernel-less sdist; build it from {s.url} {s.tag}: envbuilder wheels "
                 f"{lockdir} -o WHEELHOUSE --package {n} --torch-from host --interpreter {lockdir}/.venv/bin/python, "
                 "then uv pip install WHEELHOUSE/*.whl" for n, s in sorted(record.git_sources.items())]
    if not record.stage2_packages:
        return SyncPlan(stage1, [], {}, warnings)
    stage2 = ["--frozen", "--extra", "compile", *(a for n in skip for a in ("--no-install-package", n))]
    env = {str(k): str(v) for k, v in record.stage2_env.items()}
    if record.target.cuda not in (None, "none", "unknown"):
        archs = record.arch_list()
        env.update({"TORCH_CUDA_ARCH_LIST": archs.torch, "NVTE_CUDA_ARCHS": archs.semicolon_numbers})
    return SyncPlan(stage1, stage2, env, warnings)


def main(argv: list[str] | None = None) -> int:
    from envbuilder.errors import EnvbuilderError
    from envbuilder.uvbin import uv_binary

    ap = argparse.ArgumentParser(prog="python -m envbuilder.lock.sync", description=__doc__.splitlines()[0])
    ap.add_argument("lockdir", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="print the uv commands instead of running them")
    a = ap.parse_args(argv)
    try:
        lock = open_lockdir(a.lockdir)
    except EnvbuilderError as exc:
        print(f"error: {exc.cause}\n  fix: {exc.fix}", file=sys.stderr)
        return exc.exit_code
    plan = sync_plan(lock.record, lock.path)
    for w in plan.warnings:
        print(f"warning: {w}", file=sys.stderr)
    uv = uv_binary()
    runs = [(plan.stage1, {}), *([(plan.stage2, plan.stage2_env)] if plan.stage2 else [])]
    for args, env in runs:
        shown = " ".join([*(f"{k}={v}" for k, v in sorted(env.items())), "uv", "sync", *args])
        print(f"+ (cd {lock.path} && {shown})", file=sys.stderr)
        if a.dry_run:
            continue
        rc = procs.run([uv, "sync", *args], cwd=lock.path, env={**os.environ, **env}).returncode
        if rc != 0:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
