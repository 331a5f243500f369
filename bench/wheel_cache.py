"""Benchmark the shared kernel-wheel cache: a hit from each transport against the compile it replaces.

    .venv/bin/python bench/wheel_cache.py LOCKDIR [--out DIR] [--arch-list 9.0] [--wheels-arg=--sdists --wheels-arg=DIR]
                                          [--no-registry] [--json]

In one run, on one machine, per stage-2 package of LOCKDIR:
  * miss: `wheels` with no wheel anywhere (a real compile), publishing to a directory and a registry;
  * local hit: the same command again (the local content-addressed cache);
  * shared hits, each from a fresh local cache that holds only the stage-1 build venv: `wheels --cache` from
    the directory (file://), from that directory served by `python -m http.server` (a PEP 503 index), and from
    Debian's docker-registry with TLS from a test CA and htpasswd auth (the servers of tests/runtime_fixtures.py,
    started here). A shared hit verifies the entry's ed25519 signature, the wheel's sha256 and its archs.
Reported: the package's seconds in each case (sdist unpack + key + lookup + download + checks, or + compile),
the compile's own seconds, the wheel's size, and compile / shared-hit ratios. Markdown table, or JSON.
With --throughput-mb N, also the time to publish and to fetch-and-verify (signature, sha256) one N-MB wheel
through each transport, so a hit of a real kernel wheel (flash-attn's is ~250 MB) can be costed from its size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the real servers' fixtures, reused as plain classes


def _envb(args: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envbuilder", *args, "--json", "--timings"], capture_output=True,
                          text=True, env={**os.environ, **env}, cwd=REPO)
    wall = time.monotonic() - t
    if proc.returncode != 0:
        sys.exit(f"envbuilder {' '.join(args[:3])} ... failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


def _throughput(mb: int, out: Path, keys: Any, sources: dict[str, str], reg: Any) -> dict[str, Any]:
    """Publish one incompressible MB-sized wheel to each transport and fetch it back, verified, timing both."""
    from wheelkit import build_key, cached_wheel, make_wheel

    from envbuilder.dsse import load_private_key
    from envbuilder.kernels.wheelcache.shared import CacheSource, PublishTarget, SharedCache, publish
    from envbuilder.kernels.wheelcache.url import CacheUrl

    if reg is not None:
        os.environ.update({"ENVBUILDER_REGISTRY_USER": reg.username, "ENVBUILDER_REGISTRY_PASSWORD": reg.password})
    wheel = make_wheel(out / "big", version="9.9", filler=mb << 20)
    cached = cached_wheel(wheel, build_key(version="9.9"))
    ca = reg.ca_bundle if reg is not None else None
    got: dict[str, Any] = {"mb": round(wheel.stat().st_size / 1e6, 1)}
    for name, url in sources.items():
        if name != "http":  # the HTTP index is the directory, served
            t = time.monotonic()
            publish(PublishTarget(CacheUrl.parse(url)), load_private_key(keys.private), [(cached, wheel)], ca,
                    lambda _: None)
            got[f"{name}_publish_s"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        hit = SharedCache(CacheSource(CacheUrl.parse(url), (keys.public,)), ca, lambda _: None).fetch(
            cached.key, "demo-kernels", out / f"fetch-{name}")
        assert hit is not None
        got[f"{name}_fetch_s"] = round(time.monotonic() - t, 2)
    return got


def main() -> None:
    from runtime_fixtures import HttpServer, RegistryServer

    from envbuilder.dsse import generate_keypair

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lockdir", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--arch-list", default=None)
    ap.add_argument("--wheels-arg", action="append", default=[],
                    help="extra `wheels` argument for every run (repeatable): --cuda-home, --sdists, --torch-from ...")
    ap.add_argument("--no-registry", action="store_true",
                    help="skip the registry (a host without Debian's docker-registry); directory and HTTP only")
    ap.add_argument("--throughput-mb", type=int, default=0, help="also time one synthetic wheel of this size")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = (args.out or Path(tempfile.mkdtemp(prefix="envbuilder-bench-cache-"))).absolute()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    keys = generate_keypair(out / "keys" / "team.key", out / "keys" / "team.pub")
    (out / "servers").mkdir()
    use_registry = not args.no_registry and shutil.which("docker-registry") is not None
    reg = RegistryServer(out / "servers") if use_registry else None
    if reg is not None:
        reg.start()
    http = HttpServer(out / "servers")
    extra = [*(["--arch-list", args.arch_list] if args.arch_list else []), *args.wheels_arg]
    env = {"ENVBUILDER_REGISTRY_USER": reg.username, "ENVBUILDER_REGISTRY_PASSWORD": reg.password} if reg else {}
    tls = ["--ca-bundle", str(reg.ca_bundle)] if reg else []
    lock = str(args.lockdir)
    publisher = out / "publisher-cache"
    sources = {"directory": str(http.root / "team"), "http": f"{http.url}/team/"}
    if reg is not None:
        sources["registry"] = reg.oci("team/wheels")
    res: dict[str, Any] = {"lockdir": lock, "machine": f"{platform.node()} {os.cpu_count()} cores, load "
                           f"{os.getloadavg()[0]:.1f}", "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        runs: dict[str, dict[str, Any]] = {}
        runs["miss"] = _envb(["wheels", lock, "-o", str(out / "wh-miss"), "--cache-dir", str(publisher),
                              "--publish", sources["directory"], "--sign", str(keys.private), *extra], env)[1]
        if reg is not None:
            _envb(["wheels", lock, "-o", str(out / "wh-pub"), "--cache-dir", str(publisher), "--publish",
                   sources["registry"], "--sign", str(keys.private), *tls, *extra], env)
        runs["local"] = _envb(["wheels", lock, "-o", str(out / "wh-local"), "--cache-dir", str(publisher), *extra],
                              env)[1]
        for name, url in sources.items():
            reader = out / f"reader-{name}"
            reader.mkdir()
            (reader / "venvs").symlink_to(publisher / "venvs")  # the stage-1 build venv only, no wheel
            runs[name] = _envb(["wheels", lock, "-o", str(out / f"wh-{name}"), "--cache-dir", str(reader),
                                "--cache", url, "--trusted-key", str(keys.public), *tls, *extra], env)[1]
        if args.throughput_mb:
            res["throughput"] = _throughput(args.throughput_mb, out, keys, sources, reg)
    finally:
        http.stop()
        if reg is not None:
            reg.stop()
    packages = []
    for i, miss in enumerate(runs["miss"]["packages"]):
        row: dict[str, Any] = {"name": miss["name"], "wheel": miss["wheel"],
                               "wheel_mb": round((out / "wh-miss" / miss["wheel"]).stat().st_size / 1e6, 2),
                               "compile_s": miss["timings"]["compile_seconds"], "miss_s": miss["timings"]["seconds"]}
        for case in ("local", *sources):
            got = runs[case]["packages"][i]
            assert got["cache"] == ("hit" if case == "local" else "shared"), (case, got["cache"])
            row[f"{case}_s"] = got["timings"]["seconds"]
        packages.append(row)
    res["packages"] = packages
    if args.json:
        print(json.dumps(res, indent=2))
        return
    if "throughput" in res:
        print(f"synthetic wheel: {json.dumps(res['throughput'])}\n")
    print(f"{res['machine']}, {res['started']}, lock {lock}\n")
    print("| package (wheel MB) | miss: compile / package s | local hit s | shared hit s: directory / HTTP index / "
          "registry | compile ÷ registry hit |")
    print("|---|---|---|---|---|")
    for p in packages:
        last = p.get("registry_s", p["http_s"])
        print(f"| {p['name']} ({p['wheel_mb']}) | {p['compile_s']} / {p['miss_s']} | {p['local_s']} | "
              f"{p['directory_s']} / {p['http_s']} / {p.get('registry_s', '-')} | "
              f"x{(p['compile_s'] or 0) / max(last, 1e-3):.0f} |")


if __name__ == "__main__":
    main()
