"""Units of the artifact-vs-image check and of the side-file stamps (no engine, no runtime)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.errors import ArtifactImageMismatchError
from envbuilder.export import sidecars, verify
from envbuilder.export.render import LaunchParams, render_launch
from envbuilder.export.verify import Node, compare_trees, require_match, resolve, tree_from_listing

TREE = {
    "usr": Node("d"), "usr/bin": Node("d"), "usr/bin/python3": Node("f"),
    "bin": Node("l", "usr/bin"), "opt": Node("d"), "opt/venv": Node("d"), "opt/venv/bin": Node("d"),
    "opt/venv/bin/python": Node("l", "/usr/bin/python3"),
    "etc": Node("d"), "etc/mtab": Node("l", "../proc/self/mounts"),
    "loop-a": Node("l", "loop-b"), "loop-b": Node("l", "loop-a"),
}


def test_resolve_follows_absolute_relative_and_parent_links() -> None:
    assert resolve(TREE, "opt/venv/bin/python") == ("usr/bin/python3", True)
    assert resolve(TREE, "bin/python3") == ("usr/bin/python3", True)
    assert resolve(TREE, "etc/mtab") == ("proc/self/mounts", False)  # dangles in the image too
    assert resolve(TREE, "loop-a")[1] is False


def test_stripped_target_is_reported_with_both_targets() -> None:
    artifact = dict(TREE)
    artifact["opt/venv/bin/python"] = Node("l", "usr/bin/python3")  # what mksquashfs 4.5.1 made of it
    report = compare_trees(TREE, artifact)
    assert report.links_checked == 5 and len(report.problems) == 1
    assert "'usr/bin/python3' in the artifact" in report.problems[0]
    with pytest.raises(ArtifactImageMismatchError) as exc:
        require_match(Path("x.sqsh"), report)
    assert exc.value.exit_code == 100 and "/opt/venv/bin/python" in exc.value.cause


def test_missing_path_and_changed_kind() -> None:
    artifact = {k: v for k, v in TREE.items() if k != "usr/bin/python3"}
    artifact["opt/venv"] = Node("f")
    problems = compare_trees(TREE, artifact).problems
    assert any("/usr/bin/python3: missing" in p for p in problems)
    assert any("/opt/venv: kind 'f'" in p for p in problems)


def test_listing_parser_reads_unsquashfs_lines() -> None:
    lines = [
        b"drwxr-xr-x 0/0                51 2025-05-17 00:00 ",
        b"lrwxrwxrwx 0/0                 7 2025-05-17 00:00 /bin -> usr/bin",
        "-rw-r--r-- 0/0                 4 2025-05-17 00:00 /etc/ssl/certs/Főtanúsítvány.pem".encode(),
        "lrwxrwxrwx 0/0 9 2025-05-17 00:00 /etc/ssl/certs/988a38cb.0 -> /etc/ssl/certs/Főtanúsítvány.pem".encode(),
    ]
    tree = tree_from_listing(lines)
    assert tree["bin"] == Node("l", "usr/bin")
    assert tree["etc/ssl/certs/988a38cb.0"].target == "/etc/ssl/certs/Főtanúsítvány.pem"
    assert tree["etc/ssl/certs/Főtanúsítvány.pem"].kind == "f" and "" not in tree
    assert verify.resolve(tree, "etc/ssl/certs/988a38cb.0") == ("etc/ssl/certs/Főtanúsítvány.pem", True)


def test_sidecar_stamp_replaces_ours_and_keeps_edits(tmp_path: Path) -> None:
    p = tmp_path / "a.sif.apptainer.sh"
    assert sidecars.write_sidecar(p, "one\n", 0o755) == (p, False)
    assert sidecars.is_pristine(p.read_text())
    assert sidecars.write_sidecar(p, "two\n", 0o755) == (p, False)  # unedited: replaced
    assert p.read_text().startswith("two\n")
    p.write_text(p.read_text() + "# mine\n")
    assert sidecars.write_sidecar(p, "three\n", 0o755) == (p.with_name(p.name + ".new"), True)
    assert "# mine" in p.read_text() and p.with_name(p.name + ".new").read_text().startswith("three\n")
    foreign = tmp_path / "b.sif.def"
    foreign.write_text("a user's own file\n")
    assert sidecars.write_sidecar(foreign, "x\n", 0o644)[1] is True
    assert foreign.read_text() == "a user's own file\n"


def test_cpu_form_of_the_snippets() -> None:
    out = render_launch("sif", Path("/s/smoke.sif"), LaunchParams(gpus_per_node=0, nodes=1))
    multi = out[".torchrun-multinode.sbatch"]
    assert "--gpus-per-node" not in multi and "--nv" not in multi and "--nproc-per-node=2" in multi
    assert "gloo" in multi and "--nodes=1" in multi
    gpu = render_launch("sif", Path("/s/smoke.sif"), LaunchParams(gpus_per_node=4, procs_per_node=None))
    assert "#SBATCH --gpus-per-node=4" in gpu[".apptainer.sh"] and "--nv" in gpu[".apptainer.sh"]
    assert "--nproc-per-node=4" in gpu[".apptainer.sh"]
    pyxis = render_launch("sqsh", Path("/s/smoke.sqsh"), LaunchParams(gpus_per_node=0, procs_per_node=3))
    assert "--nproc-per-node=3" in pyxis[".slurm-pyxis.sh"] and "--gpus-per-node" not in pyxis[".slurm-pyxis.sh"]


def test_a_path_only_the_artifact_has_is_a_problem() -> None:
    """A pseudo file (mksquashfs -p) or any other addition makes the artifact hold more than the image."""
    artifact = {**TREE, "etc/injected": Node("f")}
    problems = compare_trees(TREE, artifact).problems
    assert problems == ["/etc/injected: in the artifact, not in the image"]
