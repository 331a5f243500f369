"""enroot /etc/rc, Apptainer env/runscript and launch snippets, executed by the host's real sh/bash."""

from __future__ import annotations

import subprocess
from pathlib import Path

from golden_files import check_golden

from envbuilder.export import conventions, render
from envbuilder.export.image_source import ImageInfo

AWKWARD = ["a'b", "$HOME", "two words", 'q"uote', "*"]


def _info(entrypoint: list[str], cmd: list[str], env: list[str] | None = None, workdir: str = "") -> ImageInfo:
    config = {"Entrypoint": entrypoint, "Cmd": cmd, "Env": env or [], "WorkingDir": workdir,
              "Labels": {"io.envbuilder.row": "smoke"}, "Volumes": {"/data": {}, "/scratch": {}}}
    return ImageInfo(ref="t:1", image_id="sha256:00", config={"config": config, "architecture": "amd64"}, size=0)


def _sh(script: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    p = tmp_path / "script"
    p.write_text(script)
    proc = subprocess.run(["/bin/sh", str(p), *args], capture_output=True, text=True, check=True,
                          env=env or {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}, cwd=tmp_path)
    return proc.stdout


def test_enroot_rc_quotes_entrypoint_and_cmd(tmp_path: Path) -> None:
    info = _info(["printf", "%s|"], AWKWARD, workdir=str(tmp_path))
    rc = conventions.enroot_rc(info)
    assert rc.startswith("# io.envbuilder.row smoke\n")
    assert _sh(rc, tmp_path) == "a'b|$HOME|two words|q\"uote|*|"
    assert _sh(rc, tmp_path, "x y", "z") == "x y|z|"  # arguments replace CMD, keep ENTRYPOINT


def test_enroot_rc_without_entrypoint_or_cmd_runs_sh(tmp_path: Path) -> None:
    rc = conventions.enroot_rc(_info([], []))
    assert "exec /bin/sh\n" in rc
    assert _sh(rc, tmp_path, "printf", "%s", "ok") == "ok"


def test_environment_sh_round_trips_values(tmp_path: Path) -> None:
    env = [f"V{i}={v}" for i, v in enumerate(AWKWARD)] + ["EMPTY=", "EQ=a=b"]
    script = conventions.environment_sh(_info([], [], env))
    script += 'printf "%s|" "$V0" "$V1" "$V2" "$V3" "$V4" "$EMPTY" "$EQ"\n'
    assert _sh(script, tmp_path) == "a'b|$HOME|two words|q\"uote|*||a=b|"


def test_runscript_docker_semantics(tmp_path: Path) -> None:
    script = conventions.runscript(_info(["printf", "%s;"], ["default", "two words"]))
    assert _sh(script, tmp_path) == "default;two words;"
    assert _sh(script, tmp_path, "mine") == "mine;"


def test_fstab_lists_volumes_as_tmpfs() -> None:
    from envbuilder.export.flatten import MergedTree

    tree = MergedTree()
    conventions.add_enroot_files(tree, _info([], [], ["A=1"]))
    entry = tree.get("etc/fstab")
    assert entry is not None and entry.data == (
        b"tmpfs /data tmpfs x-create=dir,rw,nosuid,nodev\ntmpfs /scratch tmpfs x-create=dir,rw,nosuid,nodev\n")
    env_entry = tree.get("etc/environment")
    assert env_entry is not None and env_entry.data == b"A=1\n"


def test_launch_snippets_are_valid_bash(tmp_path: Path) -> None:
    artifact = tmp_path / "my dir" / "nemo.sqsh"
    params = render.LaunchParams(gpus_per_node=4, nodes=3, train_script="pretrain.py --cfg a.yaml")
    for fmt in ("sqsh", "sif"):
        for suffix, text in render.render_launch(fmt, artifact.with_suffix(f".{fmt}"), params).items():
            if suffix.endswith(".py"):
                continue  # the NeMo-Run snippet: tests/export/test_launch_snippets.py compiles it
            p = tmp_path / f"s{suffix}"
            p.write_text(text)
            subprocess.run(["bash", "-n", str(p)], check=True)
            assert "--nproc-per-node=4" in text and "pretrain.py --cfg a.yaml" in text
            if "multinode" in suffix:
                assert "#SBATCH --nodes=3" in text and "--rdzv-backend=c10d" in text
                assert '--rdzv-endpoint="$HEAD_ADDR:$RDZV_PORT"' in text
            assert f"IMAGE=${{ENVBUILDER_IMAGE:-'{artifact.with_suffix('.' + fmt)}'}}" in text  # a space, quoted


PUSHED = "registry.example.com:5000/team/nemo@sha256:" + "5e" * 32
GOLDEN_FORMS = {  # every generated launch file, in each form that changes its text
    "nemo-v2.3.0": render.LaunchParams(gpus_per_node=8, nodes=2, train_script="train.py"),
    "cpu/nemo-v2.3.0": render.LaunchParams(gpus_per_node=0, nodes=2, procs_per_node=2, train_script="allreduce.py"),
    "pushed/nemo-v2.3.0": render.LaunchParams(gpus_per_node=4, nodes=4, rdzv_port=29600, registry_image=PUSHED,
                                              train_script="pretrain.py --config 'conf/a b.yaml'"),
}


def test_deffile_and_launch_snippets_match_golden() -> None:
    """Fixed inputs, so the files are independent of the test's temp path."""
    labels = {"io.envbuilder.lock-sha256": "ab" * 32, "io.envbuilder.row": "v2.3.0",
              "io.envbuilder.source-date-epoch": "1747267200", "org.opencontainers.image.version": "v2.3.0"}
    check_golden("export/apptainer.def", render.render_deffile("envbuilder/nemo:v2.3.0", labels, "v2.3.0", "ab" * 32))
    for name, params in GOLDEN_FORMS.items():
        for fmt in ("sqsh", "sif"):
            artifact = Path(f"/shared/images/{Path(name).name}.{fmt}")
            for suffix, text in sorted(render.render_launch(fmt, artifact, params).items()):
                check_golden(f"export/{fmt}/{name}{suffix}", text)
