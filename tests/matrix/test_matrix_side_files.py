"""images.toml and recipes.toml go through matrix/ with the schema check, like every matrix file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envbuilder.certify.expectations import datasheet, torch_cxx11_abi
from envbuilder.errors import MatrixFileError
from envbuilder.matrix import load_matrix
from envbuilder.matrix.images import load_images
from envbuilder.matrix.recipes import load_recipes

REPO = Path(__file__).resolve().parents[2]


def test_real_images_and_recipes_load() -> None:
    table = load_images(REPO / "matrices" / "images.toml")
    assert table.for_cuda(table.default_cuda) is not None
    assert all(not e.builder.digest_known or e.builder.pinned.endswith(e.builder.digest) for e in table.cuda)
    assert "llama3_8b" in load_recipes(REPO / "matrices")


def test_images_schema_and_digest_are_checked(tmp_path: Path) -> None:
    text = (REPO / "matrices" / "images.toml").read_text()
    bad = tmp_path / "images.toml"
    bad.write_text(text.replace('digest = "unknown"', 'digest = "md5:abc"', 1))
    with pytest.raises(MatrixFileError, match=r"images\.toml:\d+: \[\[cuda\]\] #1 field 'builder'"):
        load_images(bad)
    bad.write_text(text.replace("schema = 1", "schema = 2"))
    with pytest.raises(MatrixFileError, match="schema 2 is not supported"):
        load_images(bad)


def test_recipes_schema_is_checked(tmp_path: Path) -> None:
    shutil.copy(REPO / "matrices" / "recipes.toml", tmp_path / "recipes.toml")
    path = tmp_path / "recipes.toml"
    path.write_text(path.read_text().replace("schema = 1", "schema = 7"))
    with pytest.raises(MatrixFileError, match="schema 7 is not supported"):
        load_recipes(tmp_path)
    path.write_text("[[recipe]\nname = 'x'\n")
    with pytest.raises(MatrixFileError, match=r"recipes\.toml:1: not valid TOML"):
        load_recipes(tmp_path)


def test_certify_expectations_read_the_loaded_matrix() -> None:
    m = load_matrix(REPO / "matrices")
    sheet = datasheet(REPO / "matrices")
    with_figure = [g for g in m.gpus if (f := g.fact("bf16_dense_tflops")) is not None and f.known]
    assert len(sheet) == len(with_figure) > 0
    assert torch_cxx11_abi(REPO / "matrices", "2.11.0+cu130") is True  # torch.toml 2.11.0, local tag ignored
    assert torch_cxx11_abi(REPO / "matrices", "9.9.9") is None
