"""Level 0 (no GPU): drift against the lock, imports in fresh interpreters, torch build facts."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from envbuilder.canonical import major_minor
from envbuilder.certify.expect import Expectations, normalize
from envbuilder.certify.result import FAIL, NOT_INSTALLED, PASS, SKIPPED, CheckResult, TimedChecks, advise, tail

_IMPORT_TIMEOUT_S = 300


def _public(v: str) -> str:
    return v.split("+", 1)[0]


def versions_match(locked: str, installed: str) -> bool:
    """PEP 440 `==locked`: a locked version without a local label matches any local label."""
    if locked == installed:
        return True
    if "+" not in locked and _public(installed) == locked:
        return True
    try:
        from packaging.version import Version

        lv, iv = Version(locked), Version(installed)
        return lv == iv or (lv.local is None and Version(iv.public) == lv)
    except Exception:
        return False


def installed_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name:
            out.setdefault(normalize(name), dist.version)
    return out


def check_drift(exp: Expectations) -> CheckResult:
    thr = "every package in uv.lock installed at its locked version"
    if not exp.packages:
        return CheckResult("drift", 0, SKIPPED, threshold=thr, detail="no lock given (--lock / --expect)")
    have = installed_versions()
    missing = sorted(n for n in exp.packages if n not in have)
    wrong = {n: {"locked": v, "installed": have[n]} for n, v in sorted(exp.packages.items())
             if n in have and not versions_match(v, have[n])}
    measured = {"checked": len(exp.packages), "missing": missing, "mismatched": wrong}
    if missing or wrong:
        return CheckResult("drift", 0, FAIL, measured, thr,
                     advice="the environment no longer matches the lock; fix: rebuild the image or "
                            "re-sync the venv with `uv sync --frozen` from the lock directory")
    return CheckResult("drift", 0, PASS, measured, thr)


def _import_check() -> Any:
    """The image build's import check (a stdlib-only tool): which modules a distribution provides, how to import
    each, which failures only need a GPU. One module for the build and for certify."""
    from envbuilder.image.tools import import_check

    return import_check


def modules_to_import(exp: Expectations) -> list[str]:
    ic = _import_check()
    mods: set[str] = set()
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name and normalize(name) in exp.packages:
            mods.update(ic.top_level_modules(dist))
    return sorted(m for m in mods if m not in set(exp.skip_imports))


def _try_import(statement: str) -> tuple[str, int, str]:
    try:
        proc = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True,
                              timeout=_IMPORT_TIMEOUT_S, env=os.environ.copy())
        return statement, proc.returncode, proc.stderr
    except subprocess.TimeoutExpired:
        return statement, 124, f"timed out after {_IMPORT_TIMEOUT_S}s"


def import_each(statements: list[str], jobs: int) -> tuple[list[tuple[str, int, str]], str]:
    """(statement, rc, stderr) per statement, and how they were isolated. Where the platform forks, one
    interpreter loads torch once and forks a child per statement (certify/forkimport.py): the same isolation
    per module without paying the interpreter's start and torch's import hundreds of times. Elsewhere, or
    if that helper itself fails, a fresh interpreter per statement."""
    if hasattr(os, "fork") and statements:
        try:
            proc = subprocess.run([sys.executable, "-m", "envbuilder.certify.forkimport", str(jobs),
                                   str(_IMPORT_TIMEOUT_S)], input=json.dumps(statements), capture_output=True,
                                  text=True, timeout=_IMPORT_TIMEOUT_S * (1 + len(statements) // jobs),
                                  env=os.environ.copy())
            if proc.returncode == 0:
                doc = json.loads(proc.stdout)
                how = f"forked per module after importing {doc['preloaded']}" if doc["preloaded"] else \
                    "forked per module from a bare interpreter"
                return [(r["statement"], int(r["rc"]), str(r["err"])) for r in doc["results"]], how
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
            pass
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_try_import, statements)), "a fresh interpreter per module"


def _last_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def check_imports(exp: Expectations, jobs: int | None = None, gpu_visible: bool = True) -> list[CheckResult]:
    """Import each locked top-level module in a fresh interpreter.

    Without a GPU, modules that need the driver at import (flash_attn, causal_conv1d...) may
    fail for that reason alone; those are listed as needs_gpu, not failed. An ABI error
    (undefined symbol) is a failure even for them.
    """
    thr = "each top-level module imports in a process of its own"
    if not exp.packages:
        return [CheckResult("imports", 0, SKIPPED, threshold=thr, detail="no lock given (--lock / --expect)")]
    ic = _import_check()
    extensions = ic.extension_modules()
    by_mod = {m: ic.statement(m, extensions) for m in modules_to_import(exp)}
    statements = list(by_mod.values())
    extra: list[tuple[str, str]] = []
    if exp.nemo_locked:
        extra = [("import:nemo.collections.llm", "from nemo.collections import llm"),
                 ("import:nemo_run", "import nemo_run")]
    jobs = jobs or max(1, min(8, os.cpu_count() or 1))
    results, isolation = import_each(statements + [s for _, s in extra], jobs)
    by_stmt = {s: (rc, err) for s, rc, err in results}
    failed = {m: _last_line(by_stmt[s][1]) for m, s in by_mod.items() if by_stmt[s][0] != 0}
    needs_gpu: dict[str, str] = {}
    if not gpu_visible:
        for mod in list(failed):
            if ic.needs_gpu(mod, by_stmt[by_mod[mod]][1]):
                needs_gpu[mod] = failed.pop(mod)
    checks = [CheckResult(
        "imports", 0, FAIL if failed else PASS,
        {"modules": len(statements), "failed": failed, "needs_gpu": needs_gpu, "isolation": isolation,
         **({"unimportable": sorted(exp.skip_imports)} if exp.skip_imports else {})}, thr,
        advice=(advise("\n".join(by_stmt[by_mod[m]][1] for m in failed))
                or "a locked package does not import; read the error, then rebuild the environment")
        if failed else None,
    )]
    for name, stmt in extra:
        rc, err = by_stmt[stmt]
        checks.append(CheckResult(name, 0, PASS if rc == 0 else FAIL, {"statement": stmt, "rc": rc},
                            "imports without error",
                            advice=None if rc == 0 else (advise(err) or "NeMo does not import: check the "
                                                         "lock's date cutoff (exclude_newer) and pins"),
                            detail=None if rc == 0 else tail(err)))
    return checks


def check_torch_build(exp: Expectations) -> CheckResult:
    """torch's CUDA version and C++ ABI against the lock (kernels built for another ABI fail late)."""
    try:
        import torch
    except Exception as exc:
        status = FAIL if exp.is_locked("torch") else NOT_INSTALLED
        return CheckResult("torch-build", 0, status, str(exc)[:200], "torch imports",
                     advice=advise(str(exc)) if status == FAIL else None)
    abi = bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False))
    measured = {"torch": torch.__version__, "cuda": torch.version.cuda, "cxx11_abi": abi}
    t = exp.target
    want: dict[str, object] = {}
    problems: list[str] = []
    if t.torch:
        want["torch"] = t.torch
        if not versions_match(t.torch, torch.__version__):
            problems.append(f"torch {torch.__version__} != locked {t.torch}")
    if t.torch_variant == "cpu":
        want["cuda"] = None
        if torch.version.cuda is not None:
            problems.append(f"torch built for CUDA {torch.version.cuda}, lock wants the CPU build")
    elif t.cuda:
        want["cuda"] = t.cuda
        if major_minor(torch.version.cuda or "none") != major_minor(t.cuda):
            problems.append(f"torch built for CUDA {torch.version.cuda}, lock wants {t.cuda}")
    if t.cxx11_abi is not None:
        want["cxx11_abi"] = t.cxx11_abi
        if abi != t.cxx11_abi:
            problems.append(f"torch cxx11 ABI {abi}, lock wants {t.cxx11_abi}")
    if not want:
        return CheckResult("torch-build", 0, SKIPPED, measured, None, detail="the lock states no torch/CUDA target")
    if problems:
        return CheckResult("torch-build", 0, FAIL, measured, want,
                     advice="torch is not the locked build; kernels compiled against the locked torch will "
                            "fail with undefined symbols; fix: reinstall torch from the lock's index",
                     detail="; ".join(problems))
    return CheckResult("torch-build", 0, PASS, measured, want)


def run_level0(exp: Expectations, only: set[str] | None = None, gpu_visible: bool = True) -> list[CheckResult]:
    checks = TimedChecks()
    if only is None or "drift" in only:
        checks.append(check_drift(exp))
    if only is None or "imports" in only:
        checks.extend(check_imports(exp, gpu_visible=gpu_visible))
    if only is None or "torch-build" in only:
        checks.append(check_torch_build(exp))
    return checks
