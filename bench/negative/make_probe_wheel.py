"""Build the negative-case probe wheel on a GPU machine: a tiny torch CUDA extension.

    python3 make_probe_wheel.py OUTDIR --torch-include DIR --cxx11-abi 0|1 --gencode 90 [--name NAME]

`--torch-include` is the `torch/include` of the torch to build against (another torch than the
one installed makes the ABI case); `--gencode` the one SASS arch to embed (80 on an H100 makes
the missing-arch case). nvcc compiles the kernel, g++ the binding; the wheel is written by hand
(zip + dist-info), since setuptools would build against the installed torch.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import subprocess
import sysconfig
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).parent


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--torch-include", type=Path, required=True)
    ap.add_argument("--cxx11-abi", choices=["0", "1"], required=True)
    ap.add_argument("--gencode", default="90")
    ap.add_argument("--name", default="envbuilder-abi-probe")
    ap.add_argument("--version", default="0.1")
    a = ap.parse_args()
    mod = a.name.replace("-", "_")
    inc = a.torch_include
    py_inc = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        abi = f"-D_GLIBCXX_USE_CXX11_ABI={a.cxx11_abi}"
        subprocess.run(["nvcc", "-c", "-O2", "-Xcompiler", "-fPIC", abi,
                        f"-gencode=arch=compute_{a.gencode},code=sm_{a.gencode}",
                        str(HERE / "abi_probe_kernel.cu"), "-o", str(t / "k.o")], check=True)
        subprocess.run(["g++", "-c", "-O2", "-fPIC", "-std=c++17", abi, "-DTORCH_EXTENSION_NAME=_C",
                        "-DTORCH_API_INCLUDE_EXTENSION_H", f"-I{inc}", f"-I{inc}/torch/csrc/api/include",
                        f"-I{py_inc}", str(HERE / "abi_probe.cpp"), "-o", str(t / "b.o")], check=True)
        so = t / f"_C{suffix}"
        # libtorch and friends resolve at import time from the process that already loaded torch
        subprocess.run(["g++", "-shared", str(t / "b.o"), str(t / "k.o"), "-L/usr/local/cuda/lib64", "-lcudart",
                        "-o", str(so)], check=True)
        dist = f"{mod}-{a.version}.dist-info"
        files = {
            f"{mod}/__init__.py": b"import torch  # noqa: F401  (loads libtorch first)\nfrom ._C import double_it\n",
            f"{mod}/_C{suffix}": so.read_bytes(),
            f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {a.name}\nVersion: {a.version}\n"
                                f"Summary: envbuilder negative-case probe (torch include {inc.name}, "
                                f"cxx11 ABI {a.cxx11_abi}, sm_{a.gencode})\n".encode(),
            f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: envbuilder-bench\nRoot-Is-Purelib: false\n"
                             b"Tag: cp312-cp312-linux_x86_64\n",
            f"{dist}/top_level.txt": f"{mod}\n".encode(),
        }
        record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
        a.outdir.mkdir(parents=True, exist_ok=True)
        whl = a.outdir / f"{mod}-{a.version}-cp312-cp312-linux_x86_64.whl"
        with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
            for n, d in files.items():
                z.writestr(n, d)
            z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
        print(whl)


if __name__ == "__main__":
    main()
