"""The interpreter a kernel wheel is compiled against, and what its torch is.

Two sources: a venv synced from the lock's stage 1 (`--torch-from venv`: exactly the locked torch),
or an existing interpreter that already has torch (`--torch-from host --interpreter PY`: an NGC
container, a cluster module, a machine's system Python). Either way the facts that decide binary
compatibility (torch version with its local tag, torch's CUDA, the C++ ABI, the Python) are read
from the interpreter itself, never assumed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from envbuilder import procs
from envbuilder.atomic import write_atomic
from envbuilder.errors import BuildTorchError, HostTorchMismatchError, UvError
from envbuilder.host.torchprobe import HostTorch, RecordedTorch, probe_torch
from envbuilder.lock.record import RECORD_NAME, LockRecord
from envbuilder.lock.uvrun import uv_binary, uv_env
from envbuilder.progress import Progress

# the build interpreter's facts are the host probe's (one reader of "what torch is this")
TorchFacts = HostTorch


def probe_interpreter(python: Path | str) -> TorchFacts:
    return probe_torch(python)


def check_host_torch(want: RecordedTorch | None, facts: TorchFacts) -> None:
    """A --mode host-torch lock was made for one torch (`want`: the lock record's host.torch, None for
    other modes): building or installing on another breaks the ABI."""
    if want is None:
        return
    have = facts.recorded()
    diff = [f"{k} {getattr(have, k)} (lock: {getattr(want, k)})" for k in ("version", "cuda", "cxx11abi", "python")
            if getattr(want, k) != getattr(have, k)]
    if diff:
        raise HostTorchMismatchError(
            f"{facts.interpreter} is not the interpreter this lock was made on: " + ", ".join(diff),
            "use the interpreter the lock recorded, or re-lock: envbuilder lock --mode host-torch --interpreter PY")


def require_build_modules(facts: TorchFacts, packages: list[str]) -> None:
    missing = sorted(m for m, ok in facts.build_modules if not ok)
    if missing:
        raise BuildTorchError(
            f"{facts.interpreter} lacks {', '.join(missing)}, needed to build {', '.join(packages)} "
            "without build isolation",
            f"install them into that environment: {facts.interpreter} -m pip install {' '.join(missing)}")


def sync_stage1_venv(lockdir: Path, record: LockRecord, venv: Path, progress: Progress,
                     ca_bundle: Path | None = None, skip: list[str] | None = None) -> TorchFacts:
    """A venv holding the lock's stage 1 and stage 2, except the packages `skip` names (those to build).

    Stage-2 packages that are wheels on the index stay in (transformer-engine-torch's build links
    against the transformer-engine-cuXX core wheel).

    Reused when its marker names the same lock and skip list; the marker also keeps the probe of
    its torch (importing torch takes seconds, and nothing changes a venv only envbuilder writes),
    so a cache-hit run does not pay for it. Returns the venv interpreter's facts.
    """
    venv = venv.absolute()  # uv reads UV_PROJECT_ENVIRONMENT relative to the project
    marker = venv / "envbuilder-venv.json"
    python = venv / "bin" / "python"
    skip = sorted(record.stage2_packages if skip is None else skip)
    want = {"lock_sha256": record.lock_sha256, "python": record.target.python, "skip": skip}
    if marker.is_file() and python.exists():
        try:
            seen = json.loads(marker.read_text())
            if {k: seen.get(k) for k in want} == want and isinstance(seen.get("probe"), dict):
                progress(f"build venv {venv} is up to date (lock {record.lock_sha256[:12]})")
                p = seen["probe"]
                return HostTorch(str(python), p["python"], p["py_tag"], p["torch"], p["cuda"], bool(p["cxx11abi"]),
                                 tuple(p["present"]), tuple((str(k), bool(v)) for k, v in p["build_modules"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            pass
    if venv.exists():
        shutil.rmtree(venv)
    project = venv.with_name(venv.name + ".project")
    if project.exists():
        shutil.rmtree(project)
    project.mkdir(parents=True)
    for name in ("pyproject.toml", "uv.lock", RECORD_NAME):
        shutil.copy2(lockdir / name, project / name)
    if (lockdir / "wheels").is_dir():
        shutil.copytree(lockdir / "wheels", project / "wheels")
    cmd = [uv_binary(), "sync", "--frozen", "--no-install-project", "--python", str(record.target.python)]
    cmd += ["--extra", "compile"] if record.stage2_packages else []
    for name in skip:
        cmd += ["--no-install-package", name]
    env = uv_env(ca_bundle)
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    progress(f"syncing the build venv from stage 1 of the lock: {venv}")
    proc = procs.run(cmd, cwd=project, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise UvError(f"uv sync of the build venv failed: {proc.stderr.strip().splitlines()[-1:]}",
                      "check network access (stage 1 downloads torch), or use --torch-from host --interpreter PY",
                      log_tail=proc.stderr.strip().splitlines()[-20:])
    facts = probe_torch(python)
    probe = {"python": facts.python, "py_tag": facts.py_tag, "torch": facts.torch, "cuda": facts.cuda,
             "cxx11abi": facts.cxx11abi, "present": list(facts.present), "build_modules": list(facts.build_modules)}
    write_atomic(marker, json.dumps({**want, "probe": probe}, sort_keys=True) + "\n")
    return facts
