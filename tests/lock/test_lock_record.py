"""The typed lock record: golden bytes, round trip, schema and field checks, hash verification."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden_files import check_golden

from envbuilder.errors import LockDirError, LockSchemaError
from envbuilder.lock.lockdir import open_lockdir
from envbuilder.lock.record import RECORD_NAME, LockFindings, LockRecord, build_record
from envbuilder.matrix import load_matrix
from envbuilder.render import render_pyproject
from envbuilder.resolve import ResolveRequest, resolve

REPO = Path(__file__).resolve().parents[2]
# stands in for the uv.lock `uv lock` would write: the record only hashes it
FIXED_UV_LOCK = "version = 1\nrequires-python = \">=3.10\"\n"


def _record(tmp: Path, nemo: str = "v2.3.0", **kw: object) -> LockRecord:
    m = load_matrix(REPO / "matrices")
    if m.find_release(nemo) is None:
        pytest.skip(f"matrix has no {nemo} row")
    req = ResolveRequest(row=nemo, **kw)  # type: ignore[arg-type]
    res = resolve(m, req)
    (tmp / "pyproject.toml").write_text(render_pyproject(res, m))
    (tmp / "uv.lock").write_text(FIXED_UV_LOCK)
    rec = build_record(res, req, tmp, LockFindings(
        "0.13.9", [{"package": "x", "constraint": "x<2", "reason": "test"}], {}, [], ["mamba-ssm"],
        target_python="3.12", source_builds={"compiled": [], "sdist_only": ["flash-attn"]}))
    (tmp / RECORD_NAME).write_text(rec.to_json())
    return rec


def test_record_bytes_match_golden(tmp_path: Path) -> None:
    """Real matrix and renderer, fixed uv.lock bytes: the record generator's output, byte for byte."""
    check_golden("lock/v2.3.0-hermetic.envbuilder.lock.json", _record(tmp_path).to_json())


def test_round_trip_keeps_bytes(tmp_path: Path) -> None:
    rec = _record(tmp_path, mode="ngc-base")
    text = (tmp_path / RECORD_NAME).read_text()
    again = LockRecord.from_json(text)
    assert again == rec and again.to_json() == text
    assert open_lockdir(tmp_path).record == rec and LockRecord.from_lockdir(tmp_path).target.python_minor == "3.12"


def test_git_sources_round_trip_and_are_strict(tmp_path: Path) -> None:
    """A record with git-tag sources keeps its bytes; a record without them has no such key (older records
    keep theirs); a git source with a field this envbuilder does not know is refused."""
    plain = json.loads(_record(tmp_path).to_json())
    assert "git_sources" not in plain
    src = {"url": "https://github.com/state-spaces/mamba.git", "tag": "v2.2.0", "commit": "95a2041e" + "0" * 32,
           "tree": "5bbfcaf1" + "0" * 32, "source": "test", "reason": "test", "force_build_env": "MAMBA_FORCE_BUILD"}
    text = json.dumps({**plain, "git_sources": {"mamba-ssm": src}}, indent=2, sort_keys=True)
    rec = LockRecord.from_json(text)
    assert rec.git_sources["mamba-ssm"].commit == src["commit"]
    assert rec.git_sources["mamba-ssm"].archive_name("mamba-ssm") == "mamba-ssm-v2.2.0-git95a2041e0000.tar.gz"
    assert LockRecord.from_json(rec.to_json()) == rec
    with pytest.raises(LockDirError, match="malformed"):
        LockRecord.from_dict({**plain, "git_sources": {"mamba-ssm": {**src, "branch": "main"}}})


@pytest.mark.parametrize("schema", [None, 0, 2, "1"])
def test_unknown_or_missing_schema_is_a_typed_error(tmp_path: Path, schema: object) -> None:
    data = json.loads(_record(tmp_path).to_json())
    if schema is None:
        del data["schema"]
    else:
        data["schema"] = schema
    with pytest.raises(LockSchemaError, match="schema") as info:
        LockRecord.from_json(json.dumps(data))
    assert info.value.exit_code == 120 and info.value.fix


def test_unknown_and_missing_fields(tmp_path: Path) -> None:
    data = json.loads(_record(tmp_path).to_json())
    with pytest.raises(LockSchemaError, match=r"unknown field.*surprise"):
        LockRecord.from_dict({**data, "surprise": 1})
    del data["pins"]
    with pytest.raises(LockDirError, match="lacks pins"):
        LockRecord.from_dict(data)
    with pytest.raises(LockDirError, match="not valid JSON"):
        LockRecord.from_json("{")
    with pytest.raises(LockDirError, match="not a JSON object"):
        LockRecord.from_json("[]")


def test_hashes_are_recomputed(tmp_path: Path) -> None:
    _record(tmp_path)
    (tmp_path / "uv.lock").write_text("edited by hand\n")
    with pytest.raises(LockDirError, match="changed after locking"):
        open_lockdir(tmp_path)
    LockRecord.from_lockdir(tmp_path, verify=False)  # reading without verification still works
    LockRecord.from_lockdir(tmp_path, verify_only=("pyproject.toml",))
    with pytest.raises(LockDirError, match=r"is not a directory"):
        open_lockdir(tmp_path / "nowhere")


COMMITTED = sorted(p for p in (Path(__file__).resolve().parents[2]).glob("**/envbuilder.lock.json")
                   if ".venv" not in p.parts and "build" not in p.parts)


def test_every_committed_record_round_trips_with_typed_inputs_and_host() -> None:
    """locks/ and bench/results hold records of every row, mode and host kind (a host-torch lock among them):
    LockInputs and LockHost read them and write the same bytes."""
    assert len(COMMITTED) >= 20
    kinds = set()
    for path in COMMITTED:
        text = path.read_text(encoding="utf-8")
        record = LockRecord.from_json(text, str(path))
        assert record.to_json() == text, path
        kinds.add((record.inputs.row_option, record.host.origin, record.host.torch is not None))
    assert {k[0] for k in kinds} >= {"nemo", "release"} and any(k[2] for k in kinds)


@pytest.mark.parametrize(("part", "edit", "needle"), [
    ("inputs", {"nemo": "v2.3.0", "release": "26.04"}, "names its row under 2"),
    ("inputs", {"python": 3.12}, "field 'python'"),
    ("inputs", {"set": "torch==2.7.0"}, "field 'set'"),
    ("inputs", {"extra": 1}, "field 'extra' is not an input"),
    ("host", {"kind": "guessed"}, "field 'kind'"),
    ("host", {"gpu_count": -1}, "field 'gpu_count'"),
    ("host", {"torch": {"version": 2}}, "field 'torch.version'"),
])
def test_malformed_inputs_or_host_are_typed_errors(part: str, edit: dict[str, object], needle: str) -> None:
    data = json.loads(COMMITTED[0].read_text(encoding="utf-8"))
    data[part].update(edit)
    with pytest.raises(LockDirError) as err:
        LockRecord.from_json(json.dumps(data), "envbuilder.lock.json")
    assert needle in err.value.cause and err.value.exit_code == 19


def test_the_record_states_the_arch_list_the_lock_asks_for(tmp_path: Path) -> None:
    """lock --arch-list is recorded (inputs.arch_list) and is what build, wheels and certify read; without it the
    record's list is the one default for its CUDA and host, and the record keeps its bytes (no field written)."""
    from envbuilder.archlist import ArchList
    from envbuilder.matrix.archs import default_arch_list
    from envbuilder.resolve import HostFacts

    (tmp_path / "a").mkdir()
    plain = _record(tmp_path / "a")
    assert plain.inputs.arch_list is None and "arch_list" not in plain.to_dict()["inputs"]
    assert plain.arch_list() == default_arch_list(plain.target.cuda, None)
    (tmp_path / "b").mkdir()
    asked = _record(tmp_path / "b", arch_list=ArchList.parse("sm_90,sm_100"))
    assert asked.to_dict()["inputs"]["arch_list"] == "9.0;10.0" and asked.arch_list().torch == "9.0;10.0"
    assert LockRecord.from_json(asked.to_json()) == asked
    (tmp_path / "c").mkdir()
    host = _record(tmp_path / "c", host=HostFacts(origin="planned", sm="8.0"))
    assert host.arch_list().torch == "8.0"  # a lock made for a host builds for its GPU


def test_certify_expects_the_lock_s_arch_list() -> None:
    """Every certificate of a lock with CUDA states the arch list its lock asked for (it used to say 'the lock
    states none')."""
    from envbuilder.certify.certificate import Artifact
    from envbuilder.certify.expectations import expectations_from_lock, read_lock

    lock = read_lock(REPO / "locks" / "v2.3.0")  # a committed lock: uv exports its install set offline
    rec = lock.record
    assert rec is not None and rec.target.cuda
    exp = expectations_from_lock(lock, matrices=REPO / "matrices", artifact=Artifact("venv"))
    assert exp.target.arch_list == rec.arch_list().torch == "8.0;8.6;8.9;9.0"
    assert exp.packages["torch"] == rec.pins["torch"].version and "nemo-toolkit" in exp.packages
