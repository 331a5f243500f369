"""wheelhouse.json as a typed record: byte-identical round trip of a real one, and typed refusals of malformed ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuilder.errors import InputTooDeepError, InputTooLargeError, InvalidOptionError, MalformedFileError
from envbuilder.jsonread import Fields
from envbuilder.kernels.cache import BuildKey, CachedWheel, cache_key, lookup, store
from envbuilder.kernels.wheelhouse import Wheelhouse, read_wheelhouse

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "kernels" / "wheelhouse.json"


def test_the_record_of_a_real_wheels_run_round_trips_byte_for_byte() -> None:
    """tests/golden/kernels/wheelhouse.json is what `envbuilder wheels` wrote for the 26.04 lock on an H100."""
    text = GOLDEN.read_text(encoding="utf-8")
    wh = Wheelhouse.from_json(text, str(GOLDEN))
    assert wh.to_json() == text
    assert wh.names == ["causal-conv1d", "mamba-ssm", "transformer-engine-torch"]
    assert wh.torch.version == "2.11.0+cu130" and wh.arch_list == "9.0"
    assert wh.packages[0].patch is not None and wh.packages[0].archs[0].sass == ("90",)


def _mutated(edit: str) -> str:
    data = json.loads(GOLDEN.read_text(encoding="utf-8"))
    pkg = data["packages"][0]
    if edit == "traversal":
        pkg["wheel"] = "../../victim.whl"
    elif edit == "absolute":
        pkg["wheel"] = "/etc/passwd"
    elif edit == "sha-not-hex":
        pkg["sha256"] = "x" * 64
    elif edit == "cuda-sources-string":
        pkg["cuda_sources"] = "3"
    elif edit == "packages-object":
        data["packages"] = {"a": 1}
    elif edit == "torch-list":
        data["torch"] = ["2.11"]
    elif edit == "schema-2":
        data["schema"] = 2
    elif edit == "archs-not-list":
        pkg["archs"][0]["sass"] = "90"
    elif edit == "missing-name":
        del pkg["name"]
    return json.dumps(data)


@pytest.mark.parametrize("edit", ["traversal", "absolute", "sha-not-hex", "cuda-sources-string", "packages-object",
                                  "torch-list", "schema-2", "archs-not-list", "missing-name"])
def test_a_malformed_wheelhouse_is_a_typed_error(edit: str) -> None:
    with pytest.raises(MalformedFileError) as err:
        Wheelhouse.from_json(_mutated(edit), "wheelhouse.json")
    assert err.value.exit_code == 73 and "wheelhouse.json" in err.value.cause and "\n" not in err.value.cause


def test_deep_and_endless_wheelhouse_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "wheelhouse.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputTooDeepError):
        read_wheelhouse(tmp_path)
    (tmp_path / "wheelhouse.json").write_text("{\"a\": " * 70 + "1" + "}" * 70)
    with pytest.raises(InputTooDeepError):
        read_wheelhouse(tmp_path)
    with pytest.raises(InvalidOptionError, match="not a wheelhouse"):
        read_wheelhouse(tmp_path / "none")


def test_endless_input_is_read_to_the_limit_only(tmp_path: Path) -> None:
    (tmp_path / "wheelhouse.json").symlink_to("/dev/zero")
    with pytest.raises(InputTooLargeError):
        read_wheelhouse(tmp_path)


def _key(**kw: object) -> BuildKey:
    base: dict[str, object] = dict(package="demo", version="1.0", sdist_sha256="d" * 64, torch="2.11.0+cu130",
                                   cuda="13.0", cxx11abi=True, arch_list="9.0", python="cp312", patch=None,
                                   stage2_env={"B": "2", "A": "1"})
    return BuildKey(**{**base, **kw})  # type: ignore[arg-type]


def test_the_cache_key_keeps_the_spelling_every_existing_cache_was_keyed_with() -> None:
    """The key is the hash of the same JSON the untyped dict gave: caches filled before the typed key still hit."""
    legacy = {"package": "demo", "version": "1.0", "sdist_sha256": "d" * 64, "torch": "2.11.0+cu130",
              "cuda": "13.0", "cxx11abi": True, "arch_list": "9.0", "python": "cp312", "patch": None,
              "stage2_env": {"A": "1", "B": "2"}, "platform": "linux-x86_64"}
    assert _key().key == cache_key(legacy)
    assert _key(keep_version=True).key == cache_key({**legacy, "local_version": False})
    for key in (_key(), _key(keep_version=True)):
        assert BuildKey.from_fields(Fields.of(key.to_dict(), "k", MalformedFileError, "")) == key


def test_a_cache_entry_round_trips_and_a_damaged_one_is_a_miss(tmp_path: Path) -> None:
    whl = tmp_path / "demo-1.0-py3-none-any.whl"
    whl.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    key = _key()
    entry = store(tmp_path / "cache", whl, CachedWheel(key.key, key, whl.name, "", {"TORCH_CUDA_ARCH_LIST": "9.0"},
                                                       "ok", (), None, 1.0, 2.0))
    hit = lookup(tmp_path / "cache", key.key)
    assert hit is not None and hit.record == entry.record
    rec = hit.record.wheel_record(cuda_sources=3)
    assert rec.cache_key == key.key and rec.sdist_sha256 == "d" * 64 and rec.cuda_sources == 3
    (entry.wheel.parent / "entry.json").write_text('{"wheel": "../x"}')
    assert lookup(tmp_path / "cache", key.key) is None
