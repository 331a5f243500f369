"""The fix an offline install gives when a package fails to build: specific for the sdists the bundle carries
unbuilt (found installing the v2.3.0 bundle for a glibc-2.35 target: pesq 0.0.4 needs cython offline), generic
otherwise."""

from __future__ import annotations

from envbuilder.bundle.install import _install_fix
from envbuilder.bundle.manifest import BundleManifest

UV_STDERR = """Resolved 391 packages in 12ms
  x Failed to download and build `pesq==0.0.4`
  |-> Failed to resolve requirements from `setup.py` build
  |   cause: Because cython was not found in the provided package locations and you require cython
error: Failed to download and build `pesq==0.0.4`
"""


def _manifest(source_only: dict[str, str]) -> BundleManifest:
    return BundleManifest(sha256="0" * 64, lock_sha256="1" * 64, row="v2.3.0", mode="hermetic", python="3.11",
                          glibc="2.35", stage2_packages=[], host_torch=None, packages=[], prebuilt=[], files={},
                          data={}, source_only=source_only)


def test_a_carried_sdist_that_cannot_build_offline_is_named_with_why_and_the_glibc_fix() -> None:
    why = ("compiled (pesq-0.0.4-cp311-cp311-linux_x86_64.whl): built here it needs glibc 2.36, newer than the "
           "target's 2.35")
    fix = _install_fix(UV_STDERR, _manifest({"pesq==0.0.4": why}))
    assert "pesq 0.0.4 travels in this bundle as its sdist" in fix and why in fix
    assert "build requirements and a compiler" in fix and "at most the target's (2.35)" in fix


def test_any_other_failure_keeps_the_generic_fix() -> None:
    generic = _install_fix(UV_STDERR, _manifest({"texterrors==0.5.1": "compiled"}))  # not the one that failed
    assert "missing from the bundle" in generic
    assert _install_fix("error: something else\n", _manifest({"pesq==0.0.4": "x"})) == generic
    assert _install_fix(UV_STDERR, None) == generic
