"""Helpers for the shared wheel-cache tests: small real wheels and their cache entries.

A wheel here is a real zip with a .dist-info, optionally holding a shared object (a plain one, or one
nvcc compiled with a CUDA fat binary), and its entry is a real `CachedWheel` whose `BuildKey` hashes
to its key, exactly as `envbuilder wheels` files one.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from envbuilder.canonical import sha256_file
from envbuilder.kernels.cache import BuildKey, CachedWheel

SDIST_SHA = "5" * 64


def make_wheel(d: Path, package: str = "demo-kernels", version: str = "1.0", local: str = "cputorch2.13",
               so: Path | None = None, filler: int = 0) -> Path:
    """A wheel of `package`, with `so` as demo/_C.so when given and `filler` bytes of incompressible data."""
    import os

    dist = package.replace("-", "_")
    d.mkdir(parents=True, exist_ok=True)
    whl = d / f"{dist}-{version}+{local}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr(f"{dist}/__init__.py", "VALUE = 1\n")
        if so is not None:
            zf.write(so, f"{dist}/_C.so")
        if filler:
            zf.writestr(zipfile.ZipInfo(f"{dist}/filler.bin"), os.urandom(filler))
        zf.writestr(f"{dist}-{version}+{local}.dist-info/METADATA",
                    f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}+{local}\n")
        zf.writestr(f"{dist}-{version}+{local}.dist-info/WHEEL",
                    "Wheel-Version: 1.0\nGenerator: envbuilder-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}-{version}+{local}.dist-info/RECORD", "")
    return whl


def build_key(package: str = "demo-kernels", version: str = "1.0", arch_list: str = "none",
              torch: str = "2.13.0+cpu") -> BuildKey:
    return BuildKey(package=package, version=version, sdist_sha256=SDIST_SHA, torch=torch, cuda=None,
                    cxx11abi=True, arch_list=arch_list, python="cp311", patch=None, stage2_env={})


def cached_wheel(wheel: Path, key: BuildKey | None = None) -> CachedWheel:
    key = key or build_key()
    return CachedWheel(key.key, key, wheel.name, sha256_file(wheel), {}, "skipped: test wheel", (), None, 1.5, 10.0)
