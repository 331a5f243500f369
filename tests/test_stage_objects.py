"""The per-kind objects that replace branches: export formats, certify targets, the build result."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from envbuilder.choices import CERTIFY_TARGETS, EXPORT_FORMATS
from envbuilder.errors import CertifyEnvironmentError, InvalidOptionError


def test_every_export_format_has_an_object() -> None:
    from envbuilder.export import sif, squashfs
    from envbuilder.export.formats import FORMATS, get_format

    assert tuple(FORMATS) == EXPORT_FORMATS
    sqsh, sif_fmt = get_format("sqsh"), get_format("sif")
    assert sqsh.default_squash_options == squashfs.ENROOT_SQUASH_OPTIONS
    assert sif_fmt.default_squash_options == squashfs.SIF_SQUASH_OPTIONS
    assert sqsh.embedded("def", b"{}").offset == 0 and sqsh.embedded("def", b"{}").objects == []
    emb = sif_fmt.embedded("Bootstrap: docker-daemon\n", b'{"a": "b"}\n')
    assert emb.offset > 0 and emb.offset % sif.PARTITION_ALIGN == 0
    assert [o.datatype for o in emb.objects] == [sif.DATA_DEFFILE, sif.DATA_LABELS]
    assert sqsh.native_command("enroot", Path("o.sqsh"), "img:1") == ["enroot", "import", "-o", "o.sqsh",
                                                                      "dockerd://img:1"]
    assert sif_fmt.native_command("apptainer", Path("o.sif"), "img:1")[:2] == ["apptainer", "build"]
    assert {sqsh.native_tool, sif_fmt.native_tool} == {"enroot", "apptainer"}
    assert all(s.startswith(".") for f in FORMATS.values() for s in f.launch_templates.values())
    with pytest.raises(InvalidOptionError, match="unknown format"):
        get_format("tar")


def test_every_certify_target_kind_has_a_class(tmp_path: Path) -> None:
    from envbuilder.certify.runner import IN_MOUNT, OUT_MOUNT, TARGET_CLASSES, make_target

    assert tuple(TARGET_CLASSES) == CERTIFY_TARGETS
    here = make_target("in-place")
    assert here.on_host and here.artifact().to_dict() == {"kind": "in-place"}
    argv, env, cleanup = here.command(["--level=0"], tmp_path, tmp_path, gpus=False)
    assert argv[:3] == [sys.executable, "-m", "envbuilder.certify"] and cleanup == []
    assert env["PYTHONPATH"].split(":")[0] == str(Path(__file__).resolve().parent.parent)
    assert here.inner_paths(tmp_path, tmp_path) == (str(tmp_path / "expect.json"), str(tmp_path))
    venv = make_target("venv", str(tmp_path / "nope"))
    with pytest.raises(CertifyEnvironmentError, match="bin/python"):
        venv.command([], tmp_path, tmp_path, gpus=False)
    sqsh = make_target("sqsh", str(tmp_path / "a.sqsh"), interpreter="/usr/bin/python3")
    assert not sqsh.on_host and sqsh.inner_paths(tmp_path, tmp_path) == (f"{IN_MOUNT}/expect.json", OUT_MOUNT)
    with pytest.raises(CertifyEnvironmentError, match="does not exist"):
        sqsh.artifact()
    (tmp_path / "a.sqsh").write_bytes(b"x")
    assert sqsh.artifact().sha256 == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    assert sqsh.lock_label() is None and sqsh.lock_inside(tmp_path) is None
    with pytest.raises(CertifyEnvironmentError, match="unknown target kind"):
        make_target("vm", "x")


def test_build_result_dict_keeps_the_report_keys() -> None:
    from envbuilder.image.pipeline import BuildResult

    r = BuildResult(tag="t", image_id="sha256:1", row="smoke", mode="hermetic", target="runtime",
                    lock_sha256="0" * 64, base={}, python={"version": "3.11", "from": "system"}, arch_list="",
                    jobs=2, size_bytes=1, labels={}, context_files=[], steps=[], build_seconds=1.0, warnings=[],
                    secrets={"ca_bundle": False, "ids": []}, import_check="passed")
    d = r.to_dict()
    assert "secret_scan" not in d and "import_check_report" not in d  # absent, as before, when not run
    r.secret_scan = {"needles": 0, "findings": []}
    assert r.to_dict()["secret_scan"] == {"needles": 0, "findings": []}
