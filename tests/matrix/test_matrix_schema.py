"""The matrix loads, every fact cites a source, and malformed files fail with file:line:field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envbuilder.errors import MatrixFileError
from envbuilder.matrix import load_matrix
from envbuilder.matrix.load import RELEASE_FACTS

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "matrix"
SOURCE_RE = re.compile(r"^(https?://\S+|[\w.-]+/[\w.-]+:\S+@\S+|fixture|test profile|none found|envbuilder)")


def test_real_matrix_loads_and_covers_2x_releases(repo_root: Path) -> None:
    m = load_matrix(repo_root / "matrices")
    names = m.names()
    assert "smoke" not in names and "smoke" in m.names(include_test=True)
    if not (repo_root / "matrices" / "nemo.toml").exists():
        pytest.skip("matrices/nemo.toml not written yet")
    assert "v2.0.0" in names and "v2.3.0" in names
    nemo_rows = [r for r in m.releases if r.nemo and not r.test_only]
    assert all(r.name == r.nemo and r.name.startswith("v2.") for r in nemo_rows)
    # rows built around Megatron-Bridge are keyed by release; each names its container and version
    bridge = [r for r in m.releases if not r.test_only and r.nemo is None]
    assert [r.name for r in bridge] == ["26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08"]
    for r in bridge:
        assert r.release == r.name and r.megatron_bridge.known and not r.pypi_version.known
        # derived from the release tag's artifacts: every fact says so, or that a published table confirms it
        assert r.status == "derived" and {f.status for f in r.facts.values()} <= {"derived", "verified", "curated"}
        assert r.upstream_lock is not None
        assert r.upstream_lock.source.startswith("NVIDIA-NeMo/Megatron-Bridge:uv.lock@v")
    # --release names the row keyed by it: 26.02 is the Megatron-Bridge 0.3.0 row, NeMo 2.7.0 stays --nemo v2.7.0
    assert m.find_row(release="26.02").name == "26.02" and m.find_row(mbridge="0.3.0").name == "26.02"
    assert m.find_row(release="25.11").name == "v2.6.0"


def test_every_real_fact_has_a_source(repo_root: Path) -> None:
    m = load_matrix(repo_root / "matrices")
    for row in m.releases:
        assert set(RELEASE_FACTS) <= set(row.facts), row.name
        for name, fact in row.facts.items():
            assert fact.source.strip(), f"{row.name}.{name} has no source"
            assert SOURCE_RE.match(fact.source), f"{row.name}.{name}: source {fact.source!r} is not a URL/repo ref"
        for note in row.notes:
            assert note.source.strip()
        for entry in (*row.override_dependencies, *row.exclude_newer_package, *row.drop_packages):
            assert SOURCE_RE.match(entry.source), f"{row.name}: {entry} source is not a URL/repo ref"
    for c in m.cuda_releases:
        assert c.min_driver_linux.source.strip()
    for t in m.torch.values():
        assert t.cuda_variants.source.strip() and t.cxx11_abi.source.strip()


def test_build_package_facts_cite_and_git_tags_name_the_components_repository(repo_root: Path) -> None:
    from envbuilder.resolve.components import BY_NAME

    m = load_matrix(repo_root / "matrices")
    for bp in m.build_packages.values():
        for key, fact in bp.facts.items():
            assert SOURCE_RE.match(fact.source), f"{bp.name}.{key}: source {fact.source!r} is not a URL/repo ref"
        repo = bp.get("git_repo")
        if repo is not None:  # --source git and the git-tag builds of kernel-less pins name one repository
            assert repo.value == BY_NAME[bp.name].git_url, bp.name
    tag = m.build_packages["mamba-ssm"].git_tag("2.2.0")
    assert tag is not None and tag.tag == "v2.2.0" and len(tag.commit) == len(tag.tree) == 40
    assert m.build_packages["mamba-ssm"].git_tag("2.2.5") is None  # its sdist ships the kernels


def test_git_tags_are_checked(tmp_path: Path, repo_root: Path) -> None:
    import shutil

    d = tmp_path / "m"
    shutil.copytree(repo_root / "matrices", d)
    f = d / "build_packages.toml"
    f.write_text(f.read_text().replace('commit = "95a2041e7b046df49b23cd3091309c8b464e50f2"', 'commit = "95a2041e"'))
    with pytest.raises(MatrixFileError, match="not a full 40-hex git object id"):
        load_matrix(d)


def test_v2_4_0_prefers_v2_4_1_when_present(repo_root: Path) -> None:
    m = load_matrix(repo_root / "matrices")
    row = m.find_release("v2.4.0")
    if row is None or m.find_release("v2.4.1") is None:
        pytest.skip("matrix has no 2.4.0/2.4.1 rows yet")
    assert row.prefer == "v2.4.1"


def _copy_fixture(tmp_path: Path) -> Path:
    for f in FIXTURE.glob("*.toml"):
        (tmp_path / f.name).write_text(f.read_text())
    return tmp_path


def test_missing_fact_names_file_line_and_field(tmp_path: Path) -> None:
    d = _copy_fixture(tmp_path)
    text = (d / "nemo.toml").read_text()
    line = 'flash_attn         = { value = "2.7.4.post1", source = "fixture" }\n'
    (d / "nemo.toml").write_text(text.replace(line, ""))
    with pytest.raises(MatrixFileError) as e:
        load_matrix(d)
    assert "nemo.toml:" in e.value.cause and "missing fact 'flash_attn'" in e.value.cause
    headers = [i for i, ln in enumerate(text.splitlines(), 1) if ln == "[[release]]"]
    assert e.value.details["line"] == headers[1]  # the second row lost its field


def test_fact_without_source_is_rejected_at_its_line(tmp_path: Path) -> None:
    d = _copy_fixture(tmp_path)
    text = (d / "nemo.toml").read_text().replace('torch              = { value = "2.7.0", source = "fixture" }',
                                                 'torch              = { value = "2.7.0", source = "" }')
    (d / "nemo.toml").write_text(text)
    with pytest.raises(MatrixFileError) as e:
        load_matrix(d)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("torch ") and 'source = ""' in ln)
    assert f"nemo.toml:{line}:" in e.value.cause and "field 'torch'" in e.value.cause


def test_bad_version_and_bad_toml(tmp_path: Path) -> None:
    d = _copy_fixture(tmp_path)
    good = (d / "nemo.toml").read_text()
    (d / "nemo.toml").write_text(good.replace('value = "2.2.2"', 'value = "two.two"'))
    with pytest.raises(MatrixFileError, match=r"mamba_ssm.*not a PEP 440 version"):
        load_matrix(d)
    (d / "nemo.toml").write_text(good + "\n[[release]\nbroken = \n")
    with pytest.raises(MatrixFileError, match=r"nemo.toml:\d+: not valid TOML"):
        load_matrix(d)


def test_duplicate_tag_and_unknown_schema(tmp_path: Path) -> None:
    d = _copy_fixture(tmp_path)
    text = (d / "nemo.toml").read_text()
    first = text.split("[[release]]")[1]
    (d / "nemo.toml").write_text(text + "\n[[release]]" + first)
    with pytest.raises(MatrixFileError, match=r"duplicate row 'v2\.3\.0'"):
        load_matrix(d)
    (d / "nemo.toml").write_text(text.replace("schema = 1", "schema = 7"))
    with pytest.raises(MatrixFileError, match="schema 7 is not supported"):
        load_matrix(d)


def test_lookup_helpers() -> None:
    m = load_matrix(FIXTURE)
    assert str(m.cuda_min_driver("12.8")) == "570.26"  # GA, not the update
    assert str(m.cuda_min_driver("12.8.1")) == "570.124.06"
    assert m.cuda_min_driver("11.0") is None
    h100 = m.gpu("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.sm == "9.0"
    assert m.gpu("h100") is h100 and m.gpu("nonexistent") is None
    assert m.find_release("2.3.0") is m.find_release("v2.3.0")
