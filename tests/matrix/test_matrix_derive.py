"""`matrix derive` on release trees generated from the facts of Megatron-Bridge v0.6.0 (26.08, no published
table) and v0.4.0 (26.04, whose table appears at v0.4.2) (tests/release_facts.py), committed into local bare
repositories (tests/release_repo.py), with PyPI read from recorded snapshots (tests/fixtures/derive/README.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from release_facts import (
    CVE_URLLIB3,
    FHT_WHY,
    MEGATRON_LM,
    NOT_S390X,
    RELEASES,
    S390X,
    package_info,
    uv_lock,
    write_release,
    write_releases,
)
from release_repo import SNAPSHOTS, megatron_lm_repo, release_repo

from envbuilder.errors import MatrixFileError, ReleaseArtifactError, ReleaseSourceError
from envbuilder.matrix import load_matrix
from envbuilder.matrix.derive import DerivedRow
from envbuilder.matrix.release_files import package_info_version, read_release, upstream_overrides
from envbuilder.matrix.release_source import ArchiveTree, derive_release, load_pypi_snapshot
from envbuilder.matrix.rows_file import row_toml, write_derived
from envbuilder.matrix.upstream_lock import load_extract, read_uv_lock, select_pins

REPO = Path(__file__).resolve().parents[2]
SNAP_060 = SNAPSHOTS / "pypi-snapshot-v0.6.0.json"
SNAP_040 = SNAPSHOTS / "pypi-snapshot-v0.4.0.json"
REF = r"^[\w.-]+/[\w.-]+:\S+@\S+|^https://"


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("repos")
    lm, commits = megatron_lm_repo(tmp)
    mb = release_repo(tmp, write_releases(tmp, "v0.4.0", "v0.4.2", "v0.6.0"), commits)
    return mb, lm


@pytest.fixture(scope="module")
def row_060(repos: tuple[Path, Path]) -> DerivedRow:
    mb, lm = repos
    return derive_release("0.6.0", str(mb), str(lm), snapshot=SNAP_060)


@pytest.fixture(scope="module")
def row_040(repos: tuple[Path, Path]) -> DerivedRow:
    mb, lm = repos
    return derive_release("0.4.0", str(mb), str(lm), snapshot=SNAP_040)


def values(row: DerivedRow) -> dict[str, object]:
    return {k: f.value for k, f in row.facts.items()}


def test_v0_6_0_is_the_26_08_row_read_from_its_own_artifacts(row_060: DerivedRow) -> None:
    import re

    v = values(row_060)
    assert row_060.release == "26.08" and v["container"] == "nvcr.io/nvidia/nemo:26.08"
    assert v["megatron_bridge"] == "0.6.0" and v["pypi_version"] == "none" and v["lightning"] == "none"
    # the submodule commit's megatron/core/package_info.py; TE's git pin as its PyPI release; the rest from uv.lock
    assert v["megatron_core"] == "0.19.0" and v["transformer_engine"] == "2.17.1" and v["torch"] == "2.13.0"
    assert (v["mamba_ssm"], v["causal_conv1d"], v["nemo_run"], v["nvidia_resiliency_ext"]) == \
        ("2.3.2.post1", "1.6.2.post1", "0.10.0", "0.6.0")
    # torch's wheel METADATA: cuda-toolkit[...]==13.0.3, nvidia-cudnn-cu13==9.20.0.48
    assert (v["cuda"], v["cuda_toolkit"], v["torch_cuda_variant"], v["cudnn"]) == ("13.0", "13.0.3", "cu130",
                                                                                   "9.20.0.48")
    # Dockerfile.ci's base image + the CUDA apt repo it installs from (ubuntu2404) -> glibc 2.39
    assert v["glibc"] == "2.39" and "BASE_IMAGE=nvcr.io/nvidia/pytorch:26.06-py3" in row_060.facts["glibc"].source
    assert v["python"] == ">=3.12,<3.13"
    # the release's first upload (2026-08-20T01:01:57Z) rounded up to the minute
    assert v["release_date"] == "2026-08-20T01:01:57Z" and v["exclude_newer"] == "2026-08-20T01:02:00Z"
    # no published table names 26.08: every fact is derived, the container's own stack unknown
    assert {f.status for f in row_060.facts.values()} == {"derived"}
    assert v["container_cuda"] == v["container_torch"] == "unknown"
    for name, fact in row_060.facts.items():
        assert re.match(REF, fact.source), f"{name}: {fact.source}"
    assert row_060.facts["megatron_core"].source.startswith("NVIDIA-NeMo/Megatron-Bridge:3rdparty/Megatron-LM@v0.6.0")
    # the tag's own package_info.py says 0.6.1 (PyPI's 0.6.1 came first and was yanked): said, not hidden
    assert any("package_info.py says 0.6.1" in n.text for n in row_060.notes)


def test_v0_6_0_carries_upstreams_overrides_with_their_reasons(row_060: DerivedRow) -> None:
    forced = {o.requirement: o for o in row_060.override_dependencies}
    assert forced["urllib3>=2.6.3"].reason == "security" and "CVE-2026-21441" in forced["urllib3>=2.6.3"].text
    assert forced["mlflow>=3.15.1"].reason == "security"
    assert forced["cryptography>=43.0.0,<47"].reason == "upstream"
    assert "pyproject.toml@v0.6.0" in forced["urllib3>=2.6.3"].source
    # upstream's TE git override sets every other pin aside: the row overrides with the PyPI release
    assert forced["transformer-engine==2.17.1"].reason == "upstream"
    # cutlass-dsl comes from upstream's base image there; a hermetic lock installs what upstream locked
    assert "nvidia-cutlass-dsl==4.6.1" in forced
    assert not any(r.startswith("torch") for r in forced)  # torch/vision/triton: a note, not a drop
    drops = {d.package: d for d in row_060.drop_packages}
    assert {"av", "imageio", "imageio-ffmpeg"} <= set(drops) and drops["av"].reason == "security"
    # upstream builds it from git (an override to a git URL, in the closure): left out, with the line's comment
    assert FHT_WHY in drops["fast-hadamard-transform"].text and drops["fast-hadamard-transform"].reason == "upstream"
    assert all(o.status == "derived" for o in (*row_060.override_dependencies, *row_060.drop_packages))


def test_v0_4_0_takes_the_published_table_that_v0_4_2_adds(row_040: DerivedRow) -> None:
    v, f = values(row_040), row_040.facts
    assert row_040.release == "26.04" and "versions1.json@v0.4.2" in f["container"].source
    # the table (first published at v0.4.2) confirms what the release says ...
    assert f["megatron_bridge"].status == f["transformer_engine"].status == "verified"
    assert f["container_cuda"].value == "13.1.1" and f["container_cudnn"].value == "9.20.0.48"
    assert f["container_torch"].value == "2.11.0a0+eb65b36914.nv26.02"
    # ... and wins where it names a component the release's lock has otherwise: the container ships it
    assert v["megatron_core"] == "0.17.0" and "0.17.0rc0" in f["megatron_core"].source
    assert v["nemo_run"] == "0.9.0" and "0.8.1" in f["nemo_run"].source and f["nemo_run"].status == "verified"
    # no table row for these: derived
    assert f["torch"].status == f["mamba_ssm"].status == "derived"
    # TE 2.14.0 reached PyPI a week after Megatron-Bridge 0.4.0: its three parts get their own cutoff
    late = {c.package: c.value for c in row_040.exclude_newer_package}
    assert late == {p: "2026-04-24T00:52:00Z" for p in ("transformer-engine", "transformer-engine-cu13",
                                                         "transformer-engine-torch")}
    # upstream's NVRX is a git build (0.6.0.dev33+15a8515) PyPI never served: unknown, said why
    assert v["nvidia_resiliency_ext"] == "unknown" and "PyPI serves no" in f["nvidia_resiliency_ext"].source
    # emerging-optimizers: git-only and no PyPI release before the cutoff
    assert [d.package for d in row_040.drop_packages if d.package == "emerging-optimizers"]


def test_upstream_lock_extract_is_one_version_per_package_and_round_trips(row_040: DerivedRow) -> None:
    extract = row_040.upstream_lock
    names = [p.name for p in extract.pins]
    # one pin per package of the lock (the s390x fork's other side left out; the editables filled in)
    assert names == sorted(set(names)) and len(names) == len({p.name for p in RELEASES["v0.4.0"].lock})
    assert extract.source == "NVIDIA-NeMo/Megatron-Bridge:uv.lock@v0.4.0"
    by = extract.by_name
    assert by["megatron-core"].version == "0.17.0rc0" and by["megatron-core"].kind == "editable"
    assert by["transformer-engine"].kind == "git" and not by["transformer-engine"].on_pypi
    assert by["nvidia-modelopt"].origin == "index:https://pypi.nvidia.com/" and not by["nvidia-modelopt"].on_pypi
    assert by["multi-storage-client"].on_pypi  # from NVIDIA's index, but PyPI serves that version too
    again = load_extract(extract.to_toml(), "x.toml")
    assert again.pins == extract.pins and again.sha256 == extract.sha256


def test_s390x_forks_resolve_to_the_x86_64_version() -> None:
    lock = RELEASES["v0.4.0"].lock
    data = read_uv_lock(uv_lock(RELEASES["v0.4.0"]), "uv.lock")
    # the lock forks on platform_machine == 's390x'; the extract keeps the x86_64 side only
    assert data["resolution-markers"] == [NOT_S390X, S390X]
    forked = [p for p in lock if p.markers]
    assert len(forked) == 2 and forked[0].name == forked[1].name
    x86 = next(p.version for p in forked if p.markers == (NOT_S390X,))
    pins = {p.name: p for p in select_pins(data, "3.12", "uv.lock")}
    assert pins[forked[0].name].version == x86
    # the two editable members carry no version: nothing to pin without their package_info.py
    assert set(pins) == {p.name for p in lock if p.version is not None}
    assert "megatron-bridge" not in pins and "megatron-core" not in pins


def test_upstream_override_comments_are_read_line_by_line(repos: tuple[Path, Path]) -> None:
    from envbuilder.matrix.release_source import GitTree

    files = read_release(GitTree(repos[0], "NVIDIA-NeMo/Megatron-Bridge", "v0.6.0"))
    got = {o.text: o for o in upstream_overrides(files)}
    assert got["urllib3>=2.6.3"].comment == CVE_URLLIB3 and got["urllib3>=2.6.3"].security
    assert got["av; sys_platform == 'never'"].never and got["av; sys_platform == 'never'"].security
    assert got["cachetools>=5.0.0"].comment == "" and not got["cachetools>=5.0.0"].security
    assert got[next(t for t in got if t.startswith("transformer-engine @"))].url is not None


def test_package_info_is_read_without_running_it() -> None:
    assert package_info_version(package_info(MEGATRON_LM["v0.4.0"][1]), "package_info.py") == "0.17.0rc0"
    # the module is parsed, never imported: an import that would fail and computed names are ignored
    text = ("import no_such_module\nMAJOR = 0\nMINOR = 19\nPATCH = 0\nPRE_RELEASE = ''\n"
            "VERSION = (MAJOR, MINOR, PATCH, PRE_RELEASE)\n__version__ = '.'.join(map(str, VERSION[:3]))\n")
    assert package_info_version(text, "package_info.py") == "0.19.0"
    with pytest.raises(ReleaseArtifactError) as exc:
        package_info_version("MAJOR = 0\nMINOR = 'x'\n", "p.py")
    assert exc.value.details["field"] == "MINOR"


def test_a_source_archive_has_no_submodule_commit(tmp_path: Path) -> None:
    archive = tmp_path / "Megatron-Bridge-0.6.0.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(write_release(tmp_path / "v0.6.0", RELEASES["v0.6.0"]), arcname="Megatron-Bridge-0.6.0")
    row = derive_release("0.6.0", str(archive), snapshot=SNAP_060)
    assert row.release == "26.08" and row.facts["torch"].value == "2.13.0"
    mcore = row.facts["megatron_core"]
    assert mcore.value == "unknown" and "no submodule commit" in mcore.source
    tree = ArchiveTree({"a/x.txt": b"1"}, "r", "v1")
    assert tree.read("a/x.txt") == "1" and tree.submodule_commit("a") is None


# --- bad input: typed, names the file and field, writes nothing ----------------------------------------


def _v060(tmp: Path) -> Path:
    return write_release(tmp / "src" / "v0.6.0", RELEASES["v0.6.0"])


def _repo_without(tmp: Path, remove: str, replace: dict[str, str] | None = None) -> Path:
    tree = _v060(tmp)
    if remove:
        (tree / remove).unlink()
    for path, text in (replace or {}).items():
        (tree / path).write_text(text)
    return release_repo(tmp, {"v0.6.0": tree})


def test_a_partial_release_names_the_missing_file(tmp_path: Path) -> None:
    repo = _repo_without(tmp_path, "uv.lock")
    with pytest.raises(ReleaseArtifactError) as exc:
        derive_release("0.6.0", str(repo), snapshot=SNAP_060)
    assert "uv.lock@v0.6.0 is missing" in exc.value.cause and exc.value.details["file"] == "uv.lock"


def test_a_malformed_release_names_file_and_field(tmp_path: Path) -> None:
    lock = uv_lock(RELEASES["v0.6.0"])
    assert 'name = "torch"\n' in lock
    repo = _repo_without(tmp_path / "a", "", {"uv.lock": lock.replace('name = "torch"\n', 'name = "torch\n', 1)})
    with pytest.raises(ReleaseArtifactError) as exc:
        derive_release("0.6.0", str(repo), snapshot=SNAP_060)
    assert "uv.lock" in exc.value.cause and "not valid TOML" in exc.value.cause
    docker = (_v060(tmp_path / "t") / "docker" / "Dockerfile.ci").read_text()
    assert "ARG BASE_IMAGE=" in docker
    repo = _repo_without(tmp_path / "b", "",
                         {"docker/Dockerfile.ci": docker.replace("ARG BASE_IMAGE=", "ARG BASE=")})
    with pytest.raises(ReleaseArtifactError) as exc:
        derive_release("0.6.0", str(repo), snapshot=SNAP_060)
    assert exc.value.details["file"] == "docker/Dockerfile.ci" and exc.value.details["field"] == "ARG BASE_IMAGE"
    versions = json.loads((_v060(tmp_path / "t") / "docs" / "versions1.json").read_text())
    repo = _repo_without(tmp_path / "c", "",
                         {"docs/versions1.json": json.dumps([e for e in versions if e.get("version") != "0.6.0"])})
    with pytest.raises(ReleaseArtifactError) as exc:
        derive_release("0.6.0", str(repo), snapshot=SNAP_060)
    assert exc.value.details["file"] == "docs/versions1.json" and "names no container" in exc.value.cause


def test_unreachable_or_unknown_release_is_a_source_error(tmp_path: Path, repos: tuple[Path, Path]) -> None:
    with pytest.raises(ReleaseSourceError) as exc:
        derive_release("0.6.0", f"file://{tmp_path}/nowhere.git", snapshot=SNAP_060)
    assert "cannot clone" in exc.value.cause
    with pytest.raises(ReleaseSourceError) as exc:
        derive_release("0.9.9", str(repos[0]), snapshot=SNAP_060)
    assert "no tag v0.9.9" in exc.value.cause
    with pytest.raises(ReleaseSourceError):
        derive_release("0.6.0", str(tmp_path), snapshot=SNAP_060)  # a directory that is no clone or mirror
    with pytest.raises(ReleaseArtifactError) as art:
        derive_release("0.4.2", str(repos[0]), snapshot=SNAP_060)  # the fixture's v0.4.2 holds only docs/
    assert art.value.details["file"] == "pyproject.toml"


# --- writing the row -------------------------------------------------------------------------------------


def _matrices(tmp: Path, without: str | None = None) -> Path:
    d = tmp / "matrices"
    shutil.copytree(REPO / "matrices", d)
    if without:  # the matrix as it was before the release: no row, no extract
        text = (d / "mbridge.toml").read_text()
        blocks = text.split("[[release]]\n")
        kept = [b for b in blocks[1:] if not b.startswith(f'release            = "{without}"')]
        (d / "mbridge.toml").write_text(blocks[0] + "".join("[[release]]\n" + b for b in kept))
    return d


def test_write_adds_the_row_and_its_extract_and_loads(tmp_path: Path, row_060: DerivedRow) -> None:
    d = _matrices(tmp_path, without="26.08")
    (d / row_060.extract_file).unlink()
    assert load_matrix(d).find_row(release="26.08") is None
    rows, extract = write_derived(d, row_060)
    m = load_matrix(d)
    row = m.find_row(release="26.08")
    assert row is not None and row.status == "derived" and m.find_row(mbridge="0.6.0") is row
    assert row.upstream_lock is not None and row.upstream_lock.file == "upstream/megatron-bridge-0.6.0.toml"
    assert extract.read_text() == row_060.upstream_lock.to_toml()
    # same inputs, same bytes: writing again changes nothing
    before = rows.read_bytes()
    write_derived(d, row_060)
    assert rows.read_bytes() == before


def test_a_rederivation_keeps_what_a_person_wrote(tmp_path: Path, row_060: DerivedRow) -> None:
    d = _matrices(tmp_path)
    text = (d / "mbridge.toml").read_text()
    assert 'requirement = "nvidia-cublas>=13.2,<13.3", reason = "row"' in text  # the curated cuBLAS fix of 26.08
    # a person corrects a derived fact by hand (status curated)
    edited = text.replace('nemo_run           = { value = "0.10.0", status = "derived"',
                          'nemo_run           = { value = "0.11.0", status = "curated"')
    assert edited != text
    (d / "mbridge.toml").write_text(edited)
    write_derived(d, row_060)
    row = load_matrix(d).find_row(release="26.08")
    assert row is not None and row.nemo_run.value == "0.11.0" and row.nemo_run.status == "curated"
    assert any(o.requirement == "nvidia-cublas>=13.2,<13.3" for o in row.override_dependencies)


def test_a_row_that_does_not_validate_writes_nothing(tmp_path: Path, row_060: DerivedRow) -> None:
    from dataclasses import replace

    from envbuilder.matrix.model import Fact

    d = _matrices(tmp_path, without="26.08")
    before = {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    bad = replace(row_060, facts={**row_060.facts, "python": Fact("python three", "x:y@z", "derived")})
    with pytest.raises(MatrixFileError) as exc:
        write_derived(d, bad)
    assert "does not validate" in exc.value.cause and exc.value.details["field"] == "python"
    after = {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    assert after == before


def test_committed_rows_are_what_derive_writes(row_060: DerivedRow, row_040: DerivedRow) -> None:
    """matrices/mbridge.toml's 26.08 and 26.04 rows are the derivation of their releases (plus the rows'
    curated cuBLAS fix): derived from trees holding the same facts, every fact has the committed value,
    status and source, and every package of the generated lock is extracted as the committed extract has it."""
    from envbuilder.matrix.upstream_lock import sha256_text

    m = load_matrix(REPO / "matrices")
    for row, tag in ((row_060, "v0.6.0"), (row_040, "v0.4.0")):
        committed = m.find_row(release=row.release)
        assert committed is not None
        for key, fact in row.facts.items():
            if key == "upstream_lock":  # its source names the lock's sha256 and size: checked below
                assert committed.upstream_lock is not None and committed.upstream_lock.file == fact.value
                continue
            mine = committed.fact(key)
            assert (mine.value, mine.status) == (fact.value, fact.status), key
            # the test's Megatron-LM commit ids differ; the committed rows also name TE's tag (derived with --te)
            if key not in ("megatron_core", "transformer_engine"):
                assert mine.source == fact.source, key
        generated = uv_lock(RELEASES[tag])
        extract = row.upstream_lock
        assert extract.sha256 == sha256_text(generated.encode())
        assert f"sha256 {extract.sha256[:12]}, {len(extract.pins)} packages" in row.facts["upstream_lock"].source
        real = load_extract((REPO / "matrices" / row.extract_file).read_text(), row.extract_file)
        assert (extract.source, extract.environment) == (real.source, real.environment)
        assert len(extract.pins) == len({p.name for p in RELEASES[tag].lock}) < len(real.pins)
        for pin in extract.pins:
            assert real.by_name[pin.name] == pin, pin.name
    assert "[[release]]" in row_toml(row_060)


def test_cli_derive_json_and_exit_codes(tmp_path: Path, repos: tuple[Path, Path]) -> None:
    mb, lm = repos

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "envbuilder", "matrix", "derive", *args], capture_output=True,
                              text=True, timeout=300)

    proc = run("--mbridge", "0.6.0", "--from", str(mb), "--megatron-lm", str(lm), "--snapshot", str(SNAP_060),
               "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["release"] == "26.08" and out["facts"]["megatron_core"] == {
        "value": "0.19.0", "status": "derived", "source": out["facts"]["megatron_core"]["source"]}
    assert out["toml"].startswith("[[release]]") and out["written"] == []
    assert "timings" not in out  # same inputs, same bytes (--timings adds them)
    proc = run("--mbridge", "0.6.0", "--from", str(tmp_path / "nope"), "--snapshot", str(SNAP_060), "--json")
    assert proc.returncode == 87 and "Traceback" not in proc.stderr
    d = _matrices(tmp_path, without="26.08")
    before = (d / "mbridge.toml").read_bytes()
    proc = run("--mbridge", "0.4.2", "--from", str(mb), "--snapshot", str(SNAP_060), "--write", "--matrices", str(d))
    assert proc.returncode == 86 and "pyproject.toml@v0.4.2 is missing" in proc.stderr
    assert (d / "mbridge.toml").read_bytes() == before
    proc = run("--nemo", "v2.3.0")
    assert proc.returncode == 86 and "carry no uv.lock" in proc.stderr


def test_snapshot_is_what_fetch_records() -> None:
    facts = load_pypi_snapshot(SNAP_060)
    assert facts.first_upload("megatron-bridge", "0.6.0") == "2026-08-20T01:01:57.128188Z"
    assert "torch==2.13.0" in facts.metadata and "cuda-toolkit[" in facts.metadata["torch==2.13.0"]
