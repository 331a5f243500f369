"""Level 1 and 2 runners: tiny pretrains, NCCL probe and parallel variants, judged by one rule."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.certify import gpulock
from envbuilder.certify.expect import Expectations
from envbuilder.certify.launch import Worker, WorkerRun, run_worker, start_worker
from envbuilder.certify.lossrule import RULE_TEXT, judge_losses
from envbuilder.certify.result import FAIL, NOT_INSTALLED, PASS, SKIPPED, CheckResult, TimedChecks, advise, tail
from envbuilder.certify.variants import Model, Variant, check_parallel_failures, layout_problems, variants_for

NCCL_MIN_BUSBW_GBPS = 20.0  # below this the job is on sockets or a broken transport, not NVLink/IB
MCORE_1GPU = Model(layers=4, hidden=512, heads=8, seq=1024, vocab=4096, mbs=8)


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def judge_run(name: str, level: int, run: WorkerRun, extra: dict[str, Any] | None = None) -> CheckResult:
    """One pretrain run -> one check: the worker must succeed and its loss must obey the rule."""
    if run.rc != 0 or not run.result:
        why = "timed out" if run.rc == 124 else f"exit code {run.rc}"
        failed: dict[str, Any] = {"wall_s": round(run.wall_s, 1)}
        failed.update(extra or {})
        return CheckResult(name, level, FAIL, failed, RULE_TEXT,
                     advice=advise(run.log) or f"the training run failed ({why}); see detail",
                     detail=tail(run.log))
    res = run.result
    losses = [float(x) for x in res.get("losses", [])]
    ok, reason = judge_losses(losses)
    tps = res.get("tokens_per_s")
    measured: dict[str, Any] = {"loss_first": round(losses[0], 4) if losses else None,
                "loss_last": round(losses[-1], 4) if losses else None,
                "steps": len(losses), "tokens_per_s": round(tps) if tps else None,
                "wall_s": round(run.wall_s, 1), "layout": res.get("layout"),
                **{k: res[k] for k in ("spec", "norm", "max_memory_gib", "model", "nemo_run", "gpu_wait_s")
                   if k in res}}
    measured.update(extra or {})
    return CheckResult(name, level, PASS if ok else FAIL, measured, RULE_TEXT, detail=reason, losses=losses,
                 advice=None if ok else "the tiny model did not learn: check for NaNs (bf16/kernels) and "
                                        "for gradient reduction problems in this layout")


def cpu_pretrain(workdir: Path, steps: int) -> CheckResult:
    run = run_worker("envbuilder.certify.train_torch", ["--device=cpu", f"--steps={steps}"], 2, workdir,
                     "torch-gpt-cpu-dp2", timeout_s=600)
    return judge_run("pretrain:torch-gpt-cpu-dp2", 1, run, {"backend": "gloo"})


@dataclass
class PendingCheck:
    """A started training worker and how its run is judged; `result()` waits for it."""

    worker: Worker
    judge: Callable[[WorkerRun], CheckResult]

    def result(self) -> CheckResult:
        run = self.worker.wait()
        check = self.judge(run)
        check.seconds = run.wall_s  # its own wall time: workers overlap, so the time between results is not it
        return check


Planned = CheckResult | PendingCheck  # decided at once (not installed, skipped), or running


def resolve(planned: Planned) -> CheckResult:
    return planned if isinstance(planned, CheckResult) else planned.result()


# a worker's own limit; started together (plan_level1), each may wait for the others' GPU work first
TIMEOUTS_S = {"pretrain": 300, "mcore": 400, "nemo": 900, "mbridge": 600}
PRETRAIN_GROUPS = tuple(TIMEOUTS_S)  # the level-1 training checks' --only groups, in certificate order


def _start(check: str, judge: Callable[[WorkerRun], CheckResult], module: str, args: list[str], workdir: Path,
           log_name: str, env: dict[str, str] | None, timeout_s: float | None, torchrun: bool = True) -> PendingCheck:
    worker = start_worker(module, args, 1, workdir, log_name, timeout_s or TIMEOUTS_S[check], env, torchrun)
    return PendingCheck(worker, judge)


def plan_gpu_torch_pretrain(workdir: Path, steps: int, env: dict[str, str] | None = None,
                            timeout_s: float | None = None) -> Planned:
    args = ["--device=cuda", f"--steps={steps}", "--layers=4", "--hidden=512", "--heads=8", "--seq=1024",
            "--vocab=4096", "--mbs=8", "--lr=1e-3"]
    return _start("pretrain", lambda run: judge_run("pretrain:torch-gpt-1gpu", 1, run),
                  "envbuilder.certify.train_torch", args, workdir, "torch-gpt-1gpu", env, timeout_s)


def plan_mcore_pretrain(exp: Expectations, workdir: Path, steps: int, env: dict[str, str] | None = None,
                        timeout_s: float | None = None) -> Planned:
    name = "pretrain:mcore-gpt-1gpu"
    if not _has("megatron.core"):
        locked = exp.is_locked("megatron-core")
        return CheckResult(name, 1, FAIL if locked else NOT_INSTALLED, None, RULE_TEXT,
                           detail="megatron-core is not installed",
                           advice="locked but not installed; fix: rebuild the environment" if locked else None)
    args = [*Variant("1gpu").args(MCORE_1GPU), f"--steps={steps}"]
    return _start("mcore", lambda run: judge_run(name, 1, run), "envbuilder.certify.train_mcore", args, workdir,
                  "mcore-gpt-1gpu", env, timeout_s)


def plan_nemo_smoke(exp: Expectations, workdir: Path, steps: int, env: dict[str, str] | None = None,
                    timeout_s: float | None = None) -> Planned:
    """NeMo 2.0's Qwen2.5 recipe, shrunk, run by NeMo-Run's LocalExecutor (envbuilder/certify/nemo_smoke.py)."""
    name = "pretrain:nemo-recipe"
    missing = [m for m in ("nemo", "nemo_run") if not _has(m)]
    if missing:
        locked = exp.nemo_locked
        advice = "nemo-toolkit is locked but not installed; fix: rebuild the environment" if locked else None
        return CheckResult(name, 1, FAIL if locked else NOT_INSTALLED, None, RULE_TEXT,
                           detail=f"{' and '.join(missing)} not importable", advice=advice)
    # a plain process: NeMo-Run's executor starts the training process itself (torchrun, one task)
    return _start("nemo", lambda run: judge_run(name, 1, run), "envbuilder.certify.nemo_smoke",
                  [f"--steps={steps}"], workdir, "nemo-recipe", env, timeout_s, torchrun=False)


def plan_mbridge_smoke(exp: Expectations, workdir: Path, steps: int, env: dict[str, str] | None = None,
                       timeout_s: float | None = None) -> Planned:
    """Megatron-Bridge's Qwen2.5 pretrain recipe, shrunk (envbuilder/certify/mbridge_smoke.py)."""
    name = "pretrain:mbridge-recipe"
    if not exp.mbridge_locked:
        return CheckResult(name, 1, SKIPPED, None, RULE_TEXT, detail="not exercised: megatron-bridge is not locked")
    if not _has("megatron.bridge"):
        return CheckResult(name, 1, FAIL, None, RULE_TEXT, detail="megatron.bridge is not importable",
                           advice="megatron-bridge is locked but not installed; fix: rebuild the environment")
    return _start("mbridge", lambda run: judge_run(name, 1, run), "envbuilder.certify.mbridge_smoke",
                  [f"--steps={steps}"], workdir, "mbridge-recipe", env, timeout_s)


def gpu_torch_pretrain(workdir: Path, steps: int) -> CheckResult:
    return resolve(plan_gpu_torch_pretrain(workdir, steps))


def mcore_pretrain(exp: Expectations, workdir: Path, steps: int) -> CheckResult:
    return resolve(plan_mcore_pretrain(exp, workdir, steps))


def nemo_smoke(exp: Expectations, workdir: Path, steps: int) -> CheckResult:
    return resolve(plan_nemo_smoke(exp, workdir, steps))


def mbridge_smoke(exp: Expectations, workdir: Path, steps: int) -> CheckResult:
    return resolve(plan_mbridge_smoke(exp, workdir, steps))


def plan_level1(exp: Expectations, workdir: Path, steps: int, groups: list[str], lock: Path) -> list[Planned]:
    """Start the level-1 training workers of these groups at once, in this order, all queued on the GPU lock:
    their start-up (interpreters, torch/megatron/NeMo imports) overlaps each other and whatever the caller
    runs meanwhile (holding the lock for its own GPU checks); their GPU work runs one at a time
    (certify/gpulock.py). Each may wait for all the others' GPU work, so each gets all their limits."""
    env = {gpulock.ENV: str(lock)}
    limit = float(sum(TIMEOUTS_S[g] for g in groups))
    plans = {"pretrain": lambda: plan_gpu_torch_pretrain(workdir, steps, env, limit),
             "mcore": lambda: plan_mcore_pretrain(exp, workdir, steps, env, limit),
             "nemo": lambda: plan_nemo_smoke(exp, workdir, steps, env, limit),
             "mbridge": lambda: plan_mbridge_smoke(exp, workdir, steps, env, limit)}
    return [plans[g]() for g in groups]


def nccl_check(workdir: Path, nproc: int) -> CheckResult:
    run = run_worker("envbuilder.certify.nccl_probe", [], nproc, workdir, f"nccl-{nproc}gpu", timeout_s=300)
    thr = f"correct sum; best bus bandwidth >= {NCCL_MIN_BUSBW_GBPS:g} GB/s"
    if run.rc != 0 or not run.result:
        return CheckResult(f"nccl-allreduce-{nproc}gpu", 2, FAIL, None, thr, detail=tail(run.log),
                     advice=advise(run.log) or "NCCL all-reduce failed; check NCCL_DEBUG=INFO output")
    r = run.result
    best = max(r["busbw_gbps"].values())
    ok = r["correct"] and best >= NCCL_MIN_BUSBW_GBPS
    return CheckResult(f"nccl-allreduce-{nproc}gpu", 2, PASS if ok else FAIL,
                 {"busbw_gbps": r["busbw_gbps"], "best_busbw_gbps": best, "correct": r["correct"],
                  "nccl": r.get("nccl"), "world_size": r["world_size"]}, thr,
                 advice=None if ok else "all-reduce is slow or wrong: check NVLink/IB (nvidia-smi topo -m), "
                                        "NCCL_P2P_DISABLE/NCCL_IB_DISABLE and the container's --ipc/--shm-size")


def run_parallel_variants(exp: Expectations, workdir: Path, gpus: int, steps: int) -> list[CheckResult]:
    nproc, variants = variants_for(gpus)
    model = Model()
    checks = TimedChecks()
    checks.append(nccl_check(workdir, nproc))
    if not _has("megatron.core"):
        locked = exp.is_locked("megatron-core")
        return [*checks, *(CheckResult(f"parallel:{v.name}", 2, FAIL if locked else NOT_INSTALLED, None, RULE_TEXT,
                               detail="megatron-core is not installed") for v in variants)]
    te = _has("transformer_engine")
    for v in variants:
        name = f"parallel:{v.name}"
        problems = layout_problems(v, model, nproc) + check_parallel_failures(v, model, nproc)
        if problems:  # a bug in the variant table, not in the environment
            checks.append(CheckResult(name, 2, FAIL, None, RULE_TEXT, detail="; ".join(problems),
                                advice="internal: variant breaks a check-parallel rule"))
            continue
        if v.needs_te and not te:
            checks.append(CheckResult(name, 2, SKIPPED, {"layout": v.to_dict()}, RULE_TEXT,
                                detail="not run: context parallelism needs Transformer Engine, not installed"))
            continue
        run = run_worker("envbuilder.certify.train_mcore", [*v.args(model), f"--steps={steps}"], nproc, workdir,
                         f"mcore-{v.name}-{nproc}gpu", timeout_s=400)
        checks.append(judge_run(name, 2, run, {"gpus": nproc}))
    return checks
