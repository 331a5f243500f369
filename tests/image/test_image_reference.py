"""ImageReference: parsed once, spelled for the engine, pyxis/enroot and Apptainer."""

from __future__ import annotations

import pytest

from envbuilder.errors import InvalidOptionError
from envbuilder.image.reference import ImageReference, is_registry_reference

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("text", "registry", "repo", "tag"), [
    ("localhost:5000/team/nemo:v2.3.0", "localhost:5000", "team/nemo", "v2.3.0"),
    ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io", "nvidia/pytorch", "24.05-py3"),
    ("envbuilder/nemo:v2.3.0", "", "envbuilder/nemo", "v2.3.0"),
    ("localhost/nemo", "localhost", "nemo", ""),
    ("[::1]:5000/x", "[::1]:5000", "x", ""),
])
def test_parse(text: str, registry: str, repo: str, tag: str) -> None:
    ref = ImageReference.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repo, tag, "")
    assert ref.engine == text


def test_spellings_by_digest() -> None:
    ref = ImageReference.parse("localhost:5000/team/nemo:v1").with_digest(DIGEST)
    assert ref.by_digest == f"localhost:5000/team/nemo@{DIGEST}"
    assert ref.pyxis == f"localhost:5000#team/nemo@{DIGEST}"  # enroot: REGISTRY#IMAGE@DIGEST
    assert ref.apptainer == f"docker://localhost:5000/team/nemo@{DIGEST}"
    assert ImageReference.parse(f"nemo@{DIGEST}").pyxis == f"nemo@{DIGEST}"


@pytest.mark.parametrize("bad", ["Team/Nemo:v1", "x:5000/a:b:c", "a@sha256:12", "a/b:" + "t" * 129, "a b", "-a/b",
                                 "x:5000/a\n:b", "x:5000/", "host:99999999/a"])
def test_bad_references_are_refused(bad: str) -> None:
    with pytest.raises(InvalidOptionError):
        ImageReference.parse(bad)


def test_no_digest_no_by_digest() -> None:
    with pytest.raises(InvalidOptionError):
        _ = ImageReference.parse("localhost:5000/a:b").by_digest


def test_is_registry_reference() -> None:
    assert is_registry_reference("localhost:5000/a:b") and is_registry_reference("nvcr.io/nvidia/x")
    assert not is_registry_reference("envbuilder/nemo:v1") and not is_registry_reference("sha256:abc")
