"""Level 0 on real interpreters: imports in fresh subprocesses, a broken module, the CLI's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.certify.expect import Expectations
from envbuilder.certify.level0 import check_imports, modules_to_import
from envbuilder.certify.result import FAIL, PASS


def _fake_dist(site: Path, name: str, module_src: str, version: str = "1.0") -> None:
    """A real installed distribution on disk: module + dist-info (METADATA, RECORD, top_level.txt)."""
    (site / f"{name}.py").write_text(module_src)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{name}\n")
    (info / "RECORD").write_text(f"{name}.py,,\n{info.name}/METADATA,,\n")


@pytest.fixture()
def site_with_broken_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    _fake_dist(site, "certok", "VALUE = 1\n")
    _fake_dist(site, "certabi", "raise ImportError('/x/certabi_cuda.so: undefined symbol: _ZN3c104cuda9SetDevicei')\n")
    monkeypatch.syspath_prepend(str(site))  # importlib.metadata here
    monkeypatch.setenv("PYTHONPATH", str(site))  # the import subprocesses
    return site


def test_imports_pass_and_fail_in_fresh_interpreters(site_with_broken_module: Path) -> None:
    exp = Expectations(packages={"certok": "1.0", "certabi": "1.0"})
    assert modules_to_import(exp) == ["certabi", "certok"]
    [c] = check_imports(exp)
    assert c.status == FAIL
    assert c.measured["modules"] == 2 and list(c.measured["failed"]) == ["certabi"]
    assert "undefined symbol" in c.measured["failed"]["certabi"]
    assert c.advice and "ABI" in c.advice  # from envbuilder.troubleshoot


def test_skip_imports_and_passing_set(site_with_broken_module: Path) -> None:
    [c] = check_imports(Expectations(packages={"certok": "1.0", "certabi": "1.0"}, skip_imports=("certabi",)))
    assert c.status == PASS and c.measured["modules"] == 1


def test_namespace_packages_import_their_subpackages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "nsroot" / "core").mkdir(parents=True)
    (site / "nsroot" / "core" / "__init__.py").write_text("")
    info = site / "nsroot_core-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nsroot-core\nVersion: 2.0\n")
    (info / "RECORD").write_text("nsroot/core/__init__.py,,\n")
    monkeypatch.syspath_prepend(str(site))
    assert modules_to_import(Expectations(packages={"nsroot-core": "2.0"})) == ["nsroot.core"]


def _envbuilder(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True, timeout=300)


def test_certify_needs_exactly_one_target() -> None:
    none = _envbuilder("certify", "--level", "0")
    assert none.returncode == 18 and "exactly one target" in none.stderr
    two = _envbuilder("certify", "--in-place", "--venv", "/tmp", "--level", "0")
    assert two.returncode == 18


def test_certify_in_place_level0_against_an_expectations_file(tmp_path: Path) -> None:
    """This interpreter (no torch) against expectations naming its own click: drift and imports pass."""
    from importlib.metadata import version

    exp = tmp_path / "expect.json"
    exp.write_text(json.dumps({"schema": 1, "lock_sha256": None, "packages": {"click": version("click")}}))
    out = tmp_path / "cert"
    proc = _envbuilder("certify", "--in-place", "--expect", str(exp), "--level", "0", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    cert = json.loads(proc.stdout)
    by = {c["name"]: c for c in cert["checks"]}
    assert by["drift"]["status"] == "pass" and by["imports"]["measured"]["modules"] == 1
    assert by["torch-build"]["status"] == "not-installed"  # torch not locked, not installed
    assert cert["artifact"] == {"kind": "in-place"} and cert["status"] == "pass"
    assert json.loads((out / "certificate.json").read_text()) == cert
    assert (out / "report.md").read_text().startswith("# Certificate: PASS")


def test_certify_failure_exit_code_and_kept_previous_output(tmp_path: Path) -> None:
    exp = tmp_path / "expect.json"
    exp.write_text(json.dumps({"schema": 1, "packages": {"click": "0.0.1"}}))
    out = tmp_path / "cert"
    out.mkdir()
    (out / "certificate.json").write_text("previous")
    proc = _envbuilder("certify", "--in-place", "--expect", str(exp), "--level", "0", "-o", str(out))
    assert proc.returncode == 50
    assert "drift" in proc.stderr and "fix:" in proc.stderr
    assert json.loads((out / "certificate.json").read_text())["status"] == "fail"  # replaced as a whole


def test_verify_cert_exit_codes(tmp_path: Path) -> None:
    """verify-cert against a bare uv.lock directory (sha256 of uv.lock) and a squashfs file's sha256."""
    lock = tmp_path / "lock"
    lock.mkdir()
    (lock / "uv.lock").write_text("version = 1\n")
    import hashlib

    lock_sha = hashlib.sha256(b"version = 1\n").hexdigest()
    sqsh = tmp_path / "img.sqsh"
    sqsh.write_bytes(b"not really squashfs, only hashed")
    cert = {"schema": 1, "status": "pass", "level": 0, "lock_sha256": lock_sha, "row": None,
            "artifact": {"kind": "sqsh", "ref": "img.sqsh", "sha256": hashlib.sha256(sqsh.read_bytes()).hexdigest()},
            "checks": [{"name": "drift", "level": 0, "status": "pass"}]}
    path = tmp_path / "certificate.json"
    path.write_text(json.dumps(cert))
    ok = _envbuilder("verify-cert", str(path), "--lock", str(lock), "--sqsh", str(sqsh), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verified"] is True
    sqsh.write_bytes(b"re-exported")
    assert _envbuilder("verify-cert", str(path), "--lock", str(lock), "--sqsh", str(sqsh)).returncode == 51
    (lock / "uv.lock").write_text("version = 1\n# relocked\n")
    assert _envbuilder("verify-cert", str(path), "--lock", str(lock)).returncode == 51
    (lock / "uv.lock").write_text("version = 1\n")
    cert["checks"][0]["status"] = "fail"
    cert["status"] = "fail"
    path.write_text(json.dumps(cert))
    failed = _envbuilder("verify-cert", str(path), "--lock", str(lock))
    assert failed.returncode == 50 and "drift" in failed.stderr
    path.write_text("{not json")  # a malformed file is not a mismatch: its own code (MalformedFileError)
    assert _envbuilder("verify-cert", str(path), "--lock", str(lock)).returncode == 73


def test_only_selects_check_groups(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "envbuilder.certify", "--level", "0", "--only", "torch-build",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert [c["name"] for c in json.loads(proc.stdout)["checks"]] == ["torch-build"]
    bad = subprocess.run([sys.executable, "-m", "envbuilder.certify", "--only", "nope"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode != 0 and "unknown group" in bad.stderr


def test_sif_and_sqsh_targets_report_missing_files_and_tools(tmp_path: Path) -> None:
    """Neither apptainer nor enroot is packaged for Debian 12: the wrappers must say so (exit 45)."""
    import shutil

    missing = _envbuilder("certify", "--sif", str(tmp_path / "none.sif"), "--level", "0")
    assert missing.returncode == 52 and "does not exist" in missing.stderr
    sif = tmp_path / "x.sif"
    sif.write_bytes(b"sif")
    exp = tmp_path / "expect.json"
    exp.write_text(json.dumps({"schema": 1, "packages": {}}))
    for flag, tools in (("--sif", ("apptainer", "singularity")), ("--sqsh", ("enroot",))):
        if any(shutil.which(t) for t in tools):
            continue  # the tool exists here: nothing to assert about its absence
        proc = _envbuilder("certify", flag, str(sif), "--expect", str(exp), "--level", "0")
        assert proc.returncode == 45 and "not on PATH" in proc.stderr, proc.stderr


def test_extension_modules_import_after_torch_and_unprovided_top_level_names_are_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a bare top-level extension (selective_scan_cuda...) gets `import torch` first; a top_level.txt
    # name that no file provides (transformer_engine_torch, loaded from transformer_engine/) is not imported;
    # the image build's import check and certify find and import modules with the same functions
    from envbuilder.image.tools import import_check

    site = tmp_path / "site"
    (site / "extpkg").mkdir(parents=True)
    (site / "extpkg" / "__init__.py").write_text("")
    (site / "ext_cuda.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    di = site / "extdist-1.0.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: extdist\nVersion: 1.0\n")
    (di / "top_level.txt").write_text("ext_cuda\nextpkg\nnot_here\n")
    (di / "RECORD").write_text("extpkg/__init__.py,,\next_cuda.cpython-312-x86_64-linux-gnu.so,,\n"
                               "extdist-1.0.dist-info/RECORD,,\n")
    monkeypatch.syspath_prepend(str(site))
    exp = Expectations(packages={"extdist": "1.0"})
    assert modules_to_import(exp) == ["ext_cuda", "extpkg"]
    assert "ext_cuda" in import_check.extension_modules()
    assert import_check.statement("ext_cuda", {"ext_cuda"}) == "import torch; import ext_cuda"
    assert import_check.statement("extpkg", {"ext_cuda"}) == "import extpkg"
    assert {"ext_cuda": "extdist", "extpkg": "extdist"}.items() <= import_check.all_modules().items()




def test_each_import_is_isolated_and_stdout_noise_or_a_hang_cannot_break_the_check(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    """One forked child per module (certify/forkimport.py): what one module does to the interpreter is not seen
    by the next, a module that prints at import does not corrupt the results, a hung one is killed (124)."""
    from envbuilder.certify.level0 import import_each

    site = tmp_path / "site"
    site.mkdir()
    _fake_dist(site, "certleak", "import sys\nsys.certleak = True\nprint('noise on stdout')\n")
    _fake_dist(site, "certsees", "import sys\nassert not hasattr(sys, 'certleak'), 'saw another import'\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    results, how = import_each(["import certleak", "import certsees", "import certmissing"], jobs=1)
    assert how.startswith("forked per module")
    assert [(s, rc) for s, rc, _ in results] == [("import certleak", 0), ("import certsees", 0),
                                                 ("import certmissing", 1)]
    assert "ModuleNotFoundError: No module named 'certmissing'" in results[2][2]
    from envbuilder.certify import level0

    monkeypatch.setattr(level0, "_IMPORT_TIMEOUT_S", 1)
    hung, _ = import_each(["import time; time.sleep(60)", "x = 1"], jobs=2)
    assert [rc for _, rc, _ in hung] == [124, 0] and "timed out after 1s" in hung[0][2]


def test_modules_that_cannot_import_on_any_python3_are_listed_apart_with_a_cited_reason(
        site_with_broken_module: Path) -> None:
    """nemo-toolkit[all] brings attrdict 2.0.1 (collections.Mapping, gone in Python 3.10) and texterrors brings
    plac, whose plac_tk imports the Python 2 Tkinter: matrices/unimportable.toml names them with the line that
    breaks, the expectations skip them for the versions and Pythons checked, the check says so."""
    from envbuilder.certify.expectations import unimportable_modules
    from envbuilder.matrix import load_matrix

    matrices = Path(__file__).resolve().parents[2] / "matrices"
    for u in load_matrix(matrices).unimportable:
        assert u.source.startswith("https://") and u.reason
    assert unimportable_modules(matrices, {"attrdict": "2.0.1", "plac": "1.4.5"}, "3.11") == ("attrdict", "plac_tk")
    assert unimportable_modules(matrices, {"attrdict": "2.0.1"}, "3.9") == ()  # imports there
    assert unimportable_modules(matrices, {"attrdict": "2.0.0", "torch": "2.7.0"}, "3.12") == ()  # not checked
    [c] = check_imports(Expectations(packages={"certok": "1.0", "certabi": "1.0"}, skip_imports=("certabi",)))
    assert c.status == PASS and c.measured["unimportable"] == ["certabi"]
