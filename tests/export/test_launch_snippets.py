"""The generated launch snippets as shell: hostile names never become commands (issue 22, item 7).

Each snippet is run by the real bash with `srun`, `scontrol`, `apptainer` and `hostname` replaced
by recorders on PATH (they write their argv, one NUL-separated record each, and do nothing else),
so the test sees exactly which words reached the runtime and whether anything else ran.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from envbuilder.errors import UnsafeNameError
from envbuilder.export import render

RECORDER = """#!/bin/bash
printf '%s\\0' "$(basename "$0")" "$@" >> "$RECORD"
printf '\\n' >> "$RECORD"
case "$(basename "$0")" in
  scontrol) echo node-a ;;
  hostname) echo 198.18.0.2 ;;
esac
"""

# names that are legal file names but shell syntax: each would run `touch PWNED` if unquoted
HOSTILE = ["a$(touch PWNED)b", "a`touch PWNED`b", "a;touch PWNED;b", "a'$(touch PWNED)'b", "a b&&touch PWNED",
           "a|touch PWNED", "$HOME", "a\"$(touch PWNED)\"b", "{a,b}*?[x]", "-rf"]


def _recorders(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("srun", "scontrol", "apptainer", "hostname"):
        p = bin_dir / tool
        p.write_text(RECORDER)
        p.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(tmp_path / "record"), "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST": "node-a,node-b", "SLURM_NNODES": "2", "HOME": str(tmp_path)}


def _run(script: str, tmp_path: Path, extra_env: dict[str, str] | None = None) -> list[list[str]]:
    p = tmp_path / "snippet.sh"
    p.write_text(script)
    env = {**_recorders(tmp_path), **(extra_env or {})}
    proc = subprocess.run(["bash", str(p)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    raw = (tmp_path / "record").read_bytes().decode()
    return [rec.strip("\n").split("\0") for rec in raw.split("\0\n") if rec.strip("\n")]


def _image_arg(calls: list[list[str]]) -> str:
    """The image as the runtime received it: pyxis' --container-image=, or apptainer exec's argument."""
    for argv in calls:
        for word in argv:
            if word.startswith("--container-image="):
                return word.split("=", 1)[1]
        if "exec" in argv and argv[0] in ("apptainer", "srun"):
            opts = argv[argv.index("exec") + 1:]
            while opts[0].startswith("-"):
                opts = opts[2:] if opts[0] in ("--bind", "--pwd") else opts[1:]
            return opts[0]
    raise AssertionError(f"no runtime call in {calls}")


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("fmt", ["sqsh", "sif"])
def test_shell_metacharacters_in_names_stay_words(tmp_path: Path, fmt: str, name: str) -> None:
    artifact = tmp_path / "out dir" / f"{name}.{fmt}"
    params = render.LaunchParams(gpus_per_node=0, nodes=2, train_script=shlex.join([f"{name}.py", "--tag", name]))
    for suffix, text in render.render_launch(fmt, artifact, params).items():
        if suffix.endswith(".py"):
            continue  # Python, not shell: test_nemo_run_snippet_* below
        work = tmp_path / suffix.strip(".")
        work.mkdir()
        calls = _run(text, work)
        assert not list(tmp_path.rglob("PWNED")), f"{suffix}: a name ran as a command"
        assert _image_arg(calls) == str(artifact), suffix
        launch = next(argv for argv in calls if "torchrun" in argv)
        assert launch[-3:] == [f"{name}.py", "--tag", name], (suffix, launch)  # script and its arguments, as given


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\x1b[2Jb", "a\tb", "a\x00b", "a\x7fb", "a\u2028b", "a\x85b"])
def test_control_characters_in_names_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UnsafeNameError) as err:
        render.render_launch("sqsh", tmp_path / f"{bad}.sqsh", render.LaunchParams())
    assert "control character" in err.value.cause and err.value.fix
    with pytest.raises(UnsafeNameError):
        render.render_launch("sif", tmp_path / "ok.sif", render.LaunchParams(train_script=f"t{bad}.py"))
    with pytest.raises(UnsafeNameError):
        render.check_launch_names(tmp_path / f"{bad}.sif", render.LaunchParams())


def test_newline_name_would_have_run_a_command(tmp_path: Path) -> None:
    """The probe's case, end to end: `-o $'x\\ntouch PWNED\\n.sqsh'` is refused before anything is written."""
    from envbuilder.export.pipeline import ExportOptions, export_image

    out = tmp_path / "x\ntouch PWNED\n.sqsh"
    with pytest.raises(UnsafeNameError):
        export_image(ExportOptions(image="envbuilder-does-not-exist:launch", fmt="sqsh", output=out))
    assert os.listdir(tmp_path) == []


def test_job_name_is_a_plain_word() -> None:
    text = render.render_launch("sqsh", Path("/x/a b;c$(d).sqsh"), render.LaunchParams())[".slurm-pyxis.sh"]
    job = next(line for line in text.splitlines() if line.startswith("#SBATCH --job-name="))
    assert job == "#SBATCH --job-name=a_b_c__d_"


@pytest.mark.parametrize("field", ["image", "row", "label"])
def test_definition_file_refuses_a_line_break_in_any_value(field: str) -> None:
    """A newline in the .def file would open a new section: `%post` runs commands at `apptainer build`."""
    evil = "x\n%post\n    touch /PWNED"
    image, row, labels = "envbuilder/nemo:v2.3.0", "v2.3.0", {"io.envbuilder.row": "v2.3.0"}
    if field == "image":
        image = evil
    elif field == "row":
        row = evil
    else:
        labels = {"io.envbuilder.row": evil}
    with pytest.raises(UnsafeNameError):
        render.render_deffile(image, labels, row, "ab" * 32)


def test_nemo_run_snippet_is_valid_python_that_names_no_hostile_code(tmp_path: Path) -> None:
    """Without nemo-run: the file compiles, and a hostile name is only in comments or string literals."""
    import ast

    artifact = tmp_path / 'a"""; import os; os.system("touch PWNED"); """b.sqsh'
    text = render.render_launch("sqsh", artifact, render.LaunchParams(train_script="\"t'x.py\""))[".nemo-run.py"]
    tree = ast.parse(text)
    calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
             for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "system" not in calls
    image = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "IMAGE")
    assert isinstance(image.value, ast.Call) and ast.literal_eval(image.value.args[1]) == str(artifact)


NEMO_RUN_PIN = ["nemo-run==0.11.1", "leptonai<0.47"]  # 0.11.1 imports leptonai.api.v1, gone in leptonai 0.47
NEMO_RUN_PROBE = r"""
import json, os, runpy, sys
import nemo_run as run

ex = runpy.run_path(sys.argv[1])
slurm = ex["slurm_executor"](account="acct", partition="debug", job_dir=os.path.join(os.getcwd(), "jobs"))
local = ex["local_executor"]()
out = {"slurm": type(slurm).__name__, "image": slurm.container_image, "mounts": slurm.container_mounts,
       "nodes": slurm.nodes, "nproc": slurm.torchrun_nproc_per_node, "port": slurm.launcher.rdzv_port,
       "local": type(local).__name__, "local_tasks": local.ntasks_per_node, "local_launcher": local.launcher}
with run.Experiment("envbuilder-probe", executor=slurm, log_level="WARN") as exp:
    exp.add(ex["train_script"](), executor=slurm, name="train")
    exp.dryrun()
print("PROBE " + json.dumps(out))
"""


@pytest.mark.integration
def test_nemo_run_snippet_builds_real_executors(tmp_path: Path) -> None:
    """nemo-run from PyPI in a throwaway venv (uv, CPU-only, no torch): the snippet loads, builds a real
    SlurmExecutor (the artifact as its container image) and LocalExecutor, and NeMo-Run renders its sbatch."""
    from envbuilder.uvbin import uv_binary

    venv = tmp_path / "venv"
    subprocess.run([uv_binary(), "venv", "-q", str(venv)], check=True, timeout=120)
    inst = subprocess.run([uv_binary(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                           *NEMO_RUN_PIN], capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-3000:]
    artifact = tmp_path / "images" / "nemo.sqsh"
    snippet = tmp_path / "nemo.sqsh.nemo-run.py"
    params = render.LaunchParams(gpus_per_node=0, nodes=2, procs_per_node=2, train_script="allreduce.py --steps 3")
    snippet.write_text(render.render_launch("sqsh", artifact, params)[".nemo-run.py"])
    (tmp_path / "probe.py").write_text(NEMO_RUN_PROBE)
    proc = subprocess.run([str(venv / "bin" / "python"), "probe.py", str(snippet)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env={**os.environ, "COLUMNS": "2000", "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    import json

    got = json.loads(proc.stdout.split("PROBE ", 1)[1].splitlines()[0])
    assert got["slurm"] == "SlurmExecutor" and got["image"] == str(artifact)
    assert got["mounts"] == [f"{tmp_path}:/workspace"] and got["nodes"] == 2 and got["nproc"] == 2
    assert 10000 <= got["port"] < 30000
    assert (got["local"], got["local_tasks"], got["local_launcher"]) == ("LocalExecutor", 2, "torchrun")
    sbatch = " ".join(proc.stdout.split())  # rich wraps the dry-run's script
    assert f"--container-image {artifact}" in sbatch and f"{tmp_path}:/workspace" in sbatch
    assert f"--rdzv-endpoint $head_node_ip:{got['port']}" in sbatch and "--nnodes 2 --nproc-per-node 2" in sbatch
    # torchrun runs the script with python (no --no-python), from the mounted submit directory, with its arguments
    assert "--tee 3 /workspace/allreduce.py --steps 3" in sbatch and "--no-python" not in sbatch
