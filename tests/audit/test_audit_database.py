"""Offline OSV databases: every accepted layout gives the same answer; a malformed one is refused, typed."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from audit import osv_records as osv

from envbuilder.audit import database
from envbuilder.audit.database import OfflineDatabase
from envbuilder.errors import AuditDatabaseError, InputTooDeepError, InputTooLargeError

Rec = Callable[[str], dict[str, Any]]
IDS = (osv.URLLIB3_PYPA, osv.URLLIB3_GH, osv.URLLIB3_TWO_INTERVALS, osv.TORCH_PYPA, osv.JINJA2_WITHDRAWN)


def _ids(db: OfflineDatabase, name: str) -> list[str]:
    return [a.id for a in db.lookup([(name, "0")], lambda _m: None).by_package[name]]


def test_zip_directory_jsonl_and_json_layouts_agree(tmp_path: Path, record: Rec) -> None:
    recs = [record(i) for i in IDS]
    folder = tmp_path / "dir" / "PyPI"
    folder.mkdir(parents=True)
    for r in recs:
        (folder / f"{r['id']}.json").write_text(json.dumps(r), encoding="utf-8")
    (tmp_path / "db.jsonl").write_text("".join(json.dumps(r) + "\n\n" for r in recs), encoding="utf-8")
    (tmp_path / "db.json").write_text(json.dumps(recs), encoding="utf-8")
    with zipfile.ZipFile(tmp_path / "db.zip", "w") as zf:
        for r in recs:
            zf.writestr(f"{r['id']}.json", json.dumps(r))
    dbs = [OfflineDatabase.open(p) for p in (tmp_path / "dir", tmp_path / "db.jsonl", tmp_path / "db.json",
                                             tmp_path / "db.zip")]
    assert [d.format for d in dbs] == ["directory", "jsonl", "json", "zip"]
    for d in dbs:
        assert d.records == 5
        assert d.describe()["withdrawn"] == 1  # JINJA2_WITHDRAWN is withdrawn: never a finding
        assert _ids(d, "urllib3") == sorted([osv.URLLIB3_PYPA, osv.URLLIB3_GH, osv.URLLIB3_TWO_INTERVALS])
        assert _ids(d, "jinja2") == []
        assert d.describe()["newest_modified"] == max(r["modified"] for r in recs)
    assert len({d.sha256 for d in dbs}) == 4  # each names its own bytes


def test_the_generated_database(osv_db: Path, tmp_path: Path) -> None:
    db = OfflineDatabase.open(osv_db)
    desc = db.describe()
    recs = osv.records().values()
    assert desc["format"] == "directory" and desc["records"] == len(osv.IDS)
    assert desc["withdrawn"] == sum(1 for r in recs if r.get("withdrawn")) == 1
    assert desc["newest_modified"] == max(r["modified"] for r in recs)
    # a directory is named by its records, not by where it sits
    import shutil

    shutil.copytree(osv_db, tmp_path / "elsewhere")
    assert OfflineDatabase.open(tmp_path / "elsewhere").sha256 == db.sha256


@pytest.mark.parametrize(("name", "content", "cause"), [
    ("bad.json", "{not json", "not valid JSON"),
    ("nan.json", '{"id": "X", "modified": NaN}', "NaN, which is not JSON"),
    ("dup.json", '{"id": "X", "id": "Y"}', "twice in one object"),
    ("noid.json", '{"summary": "x"}', "not an OSV record"),
    ("empty.jsonl", "\n\n", "holds no OSV records"),
    ("list.jsonl", '[{"id": "X"}]\n', "not an OSV record"),
    ("noid.jsonl", '{"id": 7}\n', "not an OSV record"),
    ("db.txt", '{"id": "X"}', "not a zip, a .jsonl or a .json"),
])
def test_malformed_databases_are_refused(tmp_path: Path, name: str, content: str, cause: str) -> None:
    p = tmp_path / name
    p.write_text(content, encoding="utf-8")
    with pytest.raises(AuditDatabaseError) as exc:
        OfflineDatabase.open(p)
    assert cause in exc.value.cause and exc.value.exit_code == 99
    assert "osv-vulnerabilities.storage.googleapis.com" in str(exc.value.fix)


def test_deep_or_endless_input_is_refused_by_the_json_reader(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100 + "]" * 100, encoding="utf-8")
    with pytest.raises(InputTooDeepError):
        OfflineDatabase.open(deep)
    with pytest.raises(InputTooLargeError):  # read in chunks and refused, never read whole
        database._json_records(Path("/dev/zero")).__next__()


def test_a_broken_zip_and_oversized_members_are_refused(tmp_path: Path, record: Rec,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(AuditDatabaseError, match="not a readable zip"):
        OfflineDatabase.open(broken)
    ok = tmp_path / "ok.zip"
    member = json.dumps(record(osv.URLLIB3_PYPA))
    with zipfile.ZipFile(ok, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{osv.URLLIB3_PYPA}.json", member)
    monkeypatch.setattr(database, "MAX_RECORD_BYTES", len(member) - 1)
    with pytest.raises(InputTooLargeError, match="larger than"):
        OfflineDatabase.open(ok)
    monkeypatch.setattr(database, "MAX_RECORD_BYTES", 16 << 20)
    monkeypatch.setattr(database, "MAX_ZIP_BYTES", 100)
    with pytest.raises(AuditDatabaseError, match="unpacks to more than"):
        OfflineDatabase.open(ok)


def test_a_missing_database(tmp_path: Path) -> None:
    with pytest.raises(AuditDatabaseError, match="does not exist"):
        OfflineDatabase.open(tmp_path / "nope.zip")


def test_a_malformed_record_is_refused_when_a_lock_needs_it(tmp_path: Path, record: Rec) -> None:
    # records are checked field by field when a lock asks for their package (a full export reads in the time of
    # its JSON); a record the audit uses is never half-read
    bad = {**record(osv.URLLIB3_PYPA), "affected": [{"package": {"ecosystem": "PyPI", "name": "urllib3"},
                                                     "versions": [1]}]}
    p = tmp_path / "db.jsonl"
    p.write_text(json.dumps(bad) + "\n" + json.dumps(record(osv.TORCH_PYPA)) + "\n", encoding="utf-8")
    db = OfflineDatabase.open(p)
    assert [a.id for a in db.lookup([("torch", "2.7.0")], lambda _m: None).by_package["torch"]] == [osv.TORCH_PYPA]
    with pytest.raises(AuditDatabaseError, match="'versions' must be a list of strings"):
        db.lookup([("urllib3", "1.26.20")], lambda _m: None)
