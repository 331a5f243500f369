"""`python -m envbuilder.certify`: run the checks inside this interpreter's environment.

Only the standard library and torch are needed. Exit status: 0 certificate passed,
50 a check failed, 2 bad usage (the host wrappers map these onto envbuilder's errors).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from envbuilder.certify import CERT_NAME, gpulock
from envbuilder.certify.certificate import GpuFacts
from envbuilder.certify.expect import Expectations, load_expectations
from envbuilder.certify.pretrain import PRETRAIN_GROUPS, Planned, resolve
from envbuilder.certify.result import FAIL, PASS, SKIPPED, CheckResult, Stopwatch
from envbuilder.choices import CERTIFY_GROUPS
from envbuilder.errors import EnvbuilderError

EXIT_FAILED = 50
GROUPS = CERTIFY_GROUPS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m envbuilder.certify", description=__doc__)
    ap.add_argument("--level", type=int, choices=[0, 1, 2], default=1)
    ap.add_argument("--host-managed-out", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--expect", type=Path, help="expectations JSON written by `envbuilder certify` from a lock")
    ap.add_argument("-o", "--out", type=Path, help="write certificate.json, report.md and loss SVGs here")
    ap.add_argument("--json", action="store_true", help="print the certificate JSON on stdout")
    ap.add_argument("--cpu", action="store_true",
                    help="no GPU: run level 0 and a torch-only GPT pretrain on CPU (gloo, DP=2)")
    ap.add_argument("--only", default="", help=f"comma-separated check groups: {', '.join(GROUPS)}")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--gpus", type=int, default=0, help="level 2: GPUs to use (default: all visible)")
    ap.add_argument("--logs", type=Path, help="keep worker logs here (default: a temporary directory)")
    ap.add_argument("--timestamp", help="record this creation time (the certificate has none by default)")
    return ap.parse_args(argv)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_checks(a: argparse.Namespace, exp: Expectations, workdir: Path
               ) -> tuple[list[CheckResult], GpuFacts, str | None]:
    from envbuilder.certify.gpu import gpu_facts
    from envbuilder.certify.pretrain import plan_level1

    only = {g.strip() for g in a.only.split(",") if g.strip()} or None
    unknown = (only or set()) - set(GROUPS)
    if unknown:
        raise SystemExit(f"--only: unknown group(s) {sorted(unknown)}; choose from {', '.join(GROUPS)}")

    def want(group: str) -> bool:
        return only is None or group in only

    try:
        import torch

        torch_version: str | None = torch.__version__
    except Exception:
        torch_version = None
    facts = gpu_facts() if torch_version else GpuFacts()
    # Level 1 on a GPU: the training workers start now and import their stacks while this process runs
    # level 0 and its own GPU checks holding the GPU lock; then they run their GPU work one at a time
    # (certify/gpulock.py). Same checks, same steps and loss rule as one after another.
    planned: list[Planned] = []
    held = None
    if a.level >= 1 and not a.cpu and facts.count > 0:
        lock = workdir / "gpu.lock"
        held = gpulock.acquire(str(lock))
        planned = plan_level1(exp, workdir, a.steps, [g for g in PRETRAIN_GROUPS if want(g)], lock)
    try:
        return _run_checks(a, exp, workdir, want, facts, torch_version, planned, held)
    finally:
        for p in planned:  # a check that raised leaves no worker running
            if not isinstance(p, CheckResult):
                p.worker.stop()


def _run_checks(a: argparse.Namespace, exp: Expectations, workdir: Path, want: Callable[[str], bool],
                facts: GpuFacts, torch_version: str | None, planned: list[Planned], held: gpulock.Held | None
                ) -> tuple[list[CheckResult], GpuFacts, str | None]:
    from envbuilder.certify.gpu import check_arch, check_driver, check_gemm
    from envbuilder.certify.level0 import run_level0

    only = {g.strip() for g in a.only.split(",") if g.strip()} or None
    watch = Stopwatch()  # each check's duration; those a group timed itself keep their own
    checks = [watch.stamp(c) for c in run_level0(exp, only & {"drift", "imports", "torch-build"} if only else None,
                                                 gpu_visible=facts.count > 0)]
    for c in checks:
        log(f"  {c.status:13s} {c.name}")

    def add(c: CheckResult) -> None:
        checks.append(watch.stamp(c))
        log(f"  {c.status:13s} {c.name}" + (f"  ({c.detail})" if c.detail and c.status != PASS else ""))

    if a.level >= 1 and a.cpu:
        from envbuilder.certify.pretrain import cpu_pretrain

        for g in ("driver", "arch", "kernels", "gemm"):
            if want(g):
                add(CheckResult(g, 1, SKIPPED, None, None, detail="--cpu: no GPU checks"))
        if want("pretrain") and torch_version:
            add(cpu_pretrain(workdir, a.steps))
    elif a.level >= 1:
        if want("driver"):
            add(check_driver(exp, facts))
        if want("arch"):
            add(check_arch(exp, facts))
        if facts.count == 0:
            add(CheckResult("gpu", 1, FAIL, facts.error, ">= 1 CUDA device visible to torch",
                      advice="no GPU visible; fix: docker --gpus all / apptainer --nv, or use --cpu"))
        else:
            if want("kernels"):
                from envbuilder.certify.kernels import run_kernel_probes

                for c in run_kernel_probes(exp):
                    add(c)
            if want("gemm"):
                add(check_gemm(exp, facts))
            if held is not None:
                held.release()  # the queued training workers take the GPU, one at a time
            for p in planned:
                add(resolve(p))
    if a.level >= 2:
        from envbuilder.certify.pretrain import run_parallel_variants

        gpus = min(a.gpus or facts.count, facts.count)
        if gpus < 2:
            add(CheckResult("gpu-count", 2, FAIL, gpus, ">= 2 GPUs for level 2",
                      advice="level 2 needs at least 2 visible GPUs"))
        elif want("nccl") or want("parallel"):
            for c in run_parallel_variants(exp, workdir, gpus, a.steps):
                add(c)
    return checks, facts, torch_version


def main(argv: list[str] | None = None) -> int:
    from envbuilder import procs
    from envbuilder.atomic import run_tempdir
    from envbuilder.certify.report import build_certificate, write_outputs

    a = parse_args(argv)
    # SIGTERM/SIGHUP unwind like Ctrl-C: the launcher's whole tree is killed (launch.run_worker) and the work
    # directory removed on the way out; a SIGKILLed run's directory is removed by the next run (run_tempdir)
    procs.install_signal_handlers()
    try:
        exp = load_expectations(a.expect)
    except EnvbuilderError as exc:
        log(f"error: {exc.cause}\n  fix: {exc.fix}")
        return 2
    log(f"envbuilder certify: level {a.level}" + (" (--cpu)" if a.cpu else ""))
    if a.logs:
        a.logs.mkdir(parents=True, exist_ok=True)
        checks, facts, tv = run_checks(a, exp, a.logs)
    else:
        with run_tempdir("certify-work") as tmp:
            checks, facts, tv = run_checks(a, exp, tmp)
    cert = build_certificate(exp, facts, checks, a.level, tv, a.timestamp)
    if a.out:
        write_outputs(cert, a.out)
        if not a.host_managed_out:  # the host moves --out (or deletes it): it says where the files went
            log(f"wrote {a.out / CERT_NAME}")
    if a.json:
        sys.stdout.write(cert.to_json())
        sys.stdout.flush()
    log(f"certificate: {cert.status.upper()} ({cert.summary})")
    return 0 if cert.status != FAIL else EXIT_FAILED


def entry() -> int:
    from envbuilder import procs

    try:
        return main()
    except KeyboardInterrupt as exc:  # SIGINT, or procs.Terminated for SIGTERM/SIGHUP: cleanup has run
        log(f"interrupted ({procs.interrupt_name(exc)})")
        return procs.interrupt_exit_code(exc)
    except OSError as exc:  # its work directory full or read-only: a typed code the host maps, not a traceback
        from envbuilder.errors import os_error

        err = os_error(exc, action="use")
        log(f"error: {err.cause}\n  fix: {err.fix}")
        return err.exit_code


if __name__ == "__main__":
    sys.exit(entry())
