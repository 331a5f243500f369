"""Give a built wheel a local version that names what it was compiled against.

`causal_conv1d-1.7.0-cp312-cp312-linux_x86_64.whl` says nothing about the torch, CUDA, C++ ABI or
archs inside it, and a wheel built against another torch fails at import with `undefined symbol`.
`causal_conv1d-1.7.0+cu130torch2.11cxx11abiTRUEsm90-...whl` says it, and still satisfies the lock's
`==1.7.0` (PEP 440 ignores a local label when the specifier has none). The rewrite renames the
.dist-info directory, sets METADATA's Version, regenerates RECORD, and writes entries in a fixed
order with a fixed timestamp, so the same build gives the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

from envbuilder.canonical import major_minor

_EPOCH = (1980, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def local_tag(cuda: str | None, torch_version: str, cxx11abi: bool, arch_tag: str) -> str:
    """'cu130torch2.11cxx11abiTRUEsm90' (cuda None: 'cpu'; arch_tag '' for a build without CUDA code)."""
    cu = "cu" + cuda.replace(".", "") if cuda else "cpu"
    return f"{cu}torch{major_minor(torch_version)}cxx11abi{str(bool(cxx11abi)).upper()}{arch_tag}"


def add_local_version(wheel: Path, local: str, out_dir: Path) -> Path:
    """Write a copy of `wheel` whose version is `<version>+<local>` into out_dir; returns its path."""
    if not re.fullmatch(r"[A-Za-z0-9]+(\.[A-Za-z0-9]+)*", local):
        raise ValueError(f"{local!r} is not a valid local version label")
    _name, version, _build, _tags = parse_wheel_filename(wheel.name)
    parts = wheel.name[:-4].split("-")
    dist, old_ver = parts[0], parts[1]
    new_ver = f"{version.public}+{local}"
    old_info, new_info = f"{dist}-{old_ver}.dist-info", f"{dist}-{new_ver}.dist-info"
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    out = Path(out_dir) / ("-".join([dist, new_ver, *parts[2:]]) + ".whl")
    with zipfile.ZipFile(wheel) as zin:
        entries: list[tuple[str, bytes, int]] = []
        for info in zin.infolist():
            if info.is_dir():
                continue
            data = zin.read(info)
            arcname = info.filename
            if arcname.startswith(old_info + "/"):
                arcname = new_info + arcname[len(old_info):]
                if arcname == f"{new_info}/METADATA":
                    data = re.sub(rb"(?m)^Version: .*$", f"Version: {new_ver}".encode(), data, count=1)
            entries.append((arcname, data, info.external_attr))
    record_name = f"{new_info}/RECORD"
    entries = [e for e in entries if e[0] != record_name]
    # .dist-info last (the wheel spec recommends it), everything else in name order
    entries.sort(key=lambda e: (e[0].startswith(new_info + "/"), e[0]))
    record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d, _ in entries) + f"{record_name},,\n"
    entries.append((record_name, record.encode(), 0o644 << 16))
    tmp = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for arcname, data, attr in entries:
            zi = zipfile.ZipInfo(arcname, date_time=_EPOCH)
            zi.external_attr = attr or (0o644 << 16)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(zi, data)
    tmp.replace(out)
    return out
