"""Pure-Python wheels for the stage-1 sdists of a lock, built while an index is still reachable.

A NeMo row installs a dozen packages that PyPI has only as sdists (antlr4-python3-runtime, docopt,
rouge-score, ...). Offline, each would be built in an isolated environment whose build backend
(setuptools, hatchling, ...) the bundle would have to carry too. So the bundle builds them here with
`uv build --wheel` (isolated, online) for the target Python and carries the wheel, recording which
sdist (by sha256) it came from. A `py3-none-any` result is always kept. A compiled one is kept when the
target's glibc has every glibc symbol version its shared objects need (bundle/glibc.py reads them from the ELF
tables: pesq 0.0.4 built on glibc 2.36 needs 2.14), or, where that cannot be told (one needs a versioned C++
runtime, as texterrors does), when the target's glibc is at least this machine's (megatron-core 0.12 has no
cp312 wheel, pesq and texterrors none at all: offline each would need a compiler, Python headers and its build
requirements on the target); otherwise the sdist travels and the bundle says so.
"""

from __future__ import annotations

import os
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

from envbuilder import procs
from envbuilder.atomic import run_tempdir
from envbuilder.bundle.glibc import wheel_glibc_need
from envbuilder.errors import WheelStubError
from envbuilder.lock.interpreter import interpreter_for
from envbuilder.lock.record import sha256_file
from envbuilder.lock.uvrun import uv_binary, uv_env
from envbuilder.progress import Progress
from envbuilder.toml_cache import tomllib


@dataclass(frozen=True)
class Prebuilt:
    package: str
    version: str
    sdist: str
    sdist_sha256: str
    wheel: Path
    sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"package": self.package, "version": self.version, "sdist": self.sdist,
                "sdist_sha256": self.sdist_sha256, "wheel": self.wheel.name, "sha256": self.sha256}


def host_glibc() -> tuple[int, ...] | None:
    """This machine's glibc version, None where there is none (musl)."""
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    name, _, version = found.partition(" ")
    return tuple(int(x) for x in version.split(".")) if name == "glibc" and version else None


def runs_on(target_glibc: str | None) -> bool:
    """Whether a wheel compiled here loads on the target: its glibc is at least this machine's."""
    here = host_glibc()
    if here is None or not target_glibc:
        return False
    return tuple(int(x) for x in target_glibc.split(".")) >= here


_PYPROJECT_MAX = 256 * 1024


def wheel_stub_index(sdist: Path) -> str | None:
    """The index a wheel-stub sdist downloads its real wheel from (build-backend wheel_stub.buildapi),
    or None for a real sdist. Reads only the top-level pyproject.toml, at most 256 KiB of it."""
    try:
        if sdist.name.endswith(".zip"):
            with zipfile.ZipFile(sdist) as z:
                names = [n for n in z.namelist() if n.count("/") == 1 and n.endswith("/pyproject.toml")]
                raw = z.open(names[0]).read(_PYPROJECT_MAX) if names else b""
        else:
            with tarfile.open(sdist) as t:
                member = next((m for m in t if m.isfile() and m.name.count("/") == 1
                               and m.name.endswith("/pyproject.toml")), None)
                f = t.extractfile(member) if member is not None else None
                raw = f.read(_PYPROJECT_MAX) if f is not None else b""
        data = tomllib.loads(raw.decode("utf-8", "replace"))
    except (OSError, tarfile.TarError, zipfile.BadZipFile, tomllib.TOMLDecodeError, EOFError):
        return None  # not readable as a stub: uv build says what is wrong with it
    backend = str(data.get("build-system", {}).get("build-backend", ""))
    if not backend.startswith("wheel_stub"):
        return None
    return str(data.get("tool", {}).get("wheel_stub", {}).get("index_url", "another index"))


def refuse_wheel_stub(package: str, version: str, sdist: Path) -> None:
    index = wheel_stub_index(sdist)
    if index is not None:
        raise WheelStubError(
            f"{package} {version} from PyPI is a wheel-stub sdist: building it downloads the real wheel from {index}, "
            "online and unhashed, so the bundle cannot carry it",
            f"pin a release of {package} that PyPI serves as a wheel: add the stub to matrices/pypi_stubs.toml and "
            f"re-derive the row (`envbuilder matrix derive --write`), then lock again")


def prebuild(package: str, version: str, sdist: Path, sdist_sha256: str, python: str, out: Path,
             ca_bundle: Path | None, progress: Progress, target_glibc: str | None = None) -> Prebuilt | str:
    """A pure wheel built from `sdist`, or the reason there is none (the sdist then travels as is)."""
    refuse_wheel_stub(package, version, sdist)
    env = uv_env(ca_bundle)
    # a concrete interpreter when one is installed: "3.12" alone makes uv look for a managed Python (a
    # download from GitHub) whenever the default python3 is another version or a pyenv shim cannot run
    python = interpreter_for(f"=={python}.*") or python
    with run_tempdir("prebuild") as tmp:
        proc = procs.run([uv_binary(), "build", "--wheel", "--python", python, "--out-dir", str(tmp), str(sdist)],
                         capture_output=True, text=True, env=env, timeout=1800)
        if proc.returncode != 0:
            last = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:] or ["no output"]
            return f"uv build failed: {last[0][:200]}"
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            return f"uv build made {len(wheels)} wheels"
        tags = parse_wheel_filename(wheels[0].name)[3]
        pure = all(t.abi == "none" and t.platform == "any" for t in tags)
        if not pure and not runs_on(target_glibc):
            # built against this machine's glibc, but it needs only the symbol versions it uses
            need = wheel_glibc_need(wheels[0])
            if need is None or not target_glibc or need > tuple(int(x) for x in target_glibc.split(".")):
                if need is None:  # unreadable, or a C++ runtime the target's glibc says nothing about
                    shown = ".".join(map(str, host_glibc() or ())) or "unknown"
                    return (f"compiled ({wheels[0].name}): built here it needs glibc {shown} (or a C++ runtime "
                            f"as new as this machine's), newer than the target's {target_glibc or 'unknown'}")
                return (f"compiled ({wheels[0].name}): it needs glibc {'.'.join(map(str, need))}, newer than the "
                        f"target's {target_glibc or 'unknown'}")
            needs = f"glibc {'.'.join(map(str, need))}" if need else "no versioned glibc symbol"
            progress(f"  {wheels[0].name} is compiled; it needs {needs}, which the target's glibc {target_glibc} has")
        out.mkdir(parents=True, exist_ok=True)
        dest = out / wheels[0].name
        dest.write_bytes(wheels[0].read_bytes())
    progress(f"  prebuilt {dest.name} from {sdist.name}")
    return Prebuilt(package, version, sdist.name, sdist_sha256, dest, sha256_file(dest))
