"""Benchmark `envbuilder build` on the smoke row: cold build, warm rebuild after one pure-Python
pin change (stage 2 must come from the uv cache, not be recompiled), image size, and a
`--no-cache` rebuild compared with the first build (what differs: digest, layers, files, versions).

    .venv/bin/python bench/build.py [--workdir DIR] [--json]

"Cold" means: no layer cache for these Dockerfiles and an empty uv cache mount. The bench renders
the real templates with a fresh cache-mount id (a copy of templates/ in the work dir, only the
`id=envbuilder-uv` differs), so it neither prunes nor disturbs other builds on the engine.
The pin change is made the real way: a copy of matrices/ with einops 0.8.1 -> 0.8.0 in
smoke.toml, then `envbuilder lock` again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WHEELS = Path("/opt/wheels")

MANIFEST = r"""
import hashlib, json, os, importlib.metadata as md
files = {}
for root in ("/opt/venv", "/opt/envbuilder", "/opt/python"):
    for d, dirs, names in os.walk(root):
        dirs.sort()
        for n in sorted(names):
            p = os.path.join(d, n)
            if os.path.islink(p):
                files[p] = "link:" + os.readlink(p)
            elif os.path.isfile(p):
                with open(p, "rb") as fh:
                    files[p] = hashlib.sha256(fh.read()).hexdigest()
print(json.dumps({"files": files,
                  "versions": {d.metadata["Name"]: d.version for d in md.distributions()}}))
"""


def envb(args: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"envbuilder {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.monotonic() - t, proc.stdout


def lock(out: Path, matrices: Path | None = None) -> float:
    args = ["lock", "--nemo", "smoke", "-o", str(out), "--no-detect"]
    if any(WHEELS.glob("torch-*.whl")):
        args += ["--find-links", str(WHEELS)]
    secs, _ = envb(args, {"ENVBUILDER_MATRICES": str(matrices)} if matrices else None)
    return secs


def build(lockdir: Path, tag: str, templates: Path, log: Path, *extra: str) -> tuple[float, dict[str, Any]]:
    secs, out = envb(["build", str(lockdir), "--tag", tag, "--no-scan", "--json", "--log", str(log), *extra],
                     {"ENVBUILDER_TEMPLATES": str(templates)})
    return secs, json.loads(out)


def stage2_evidence(log: Path) -> dict[str, Any]:
    """From the plain log: the stage-2 step's status and whether uv compiled anything in it."""
    text = log.read_text()
    m = re.search(r"^#(\d+) \[builder [^\]]*\] RUN .*--extra compile.*$", text, re.M)
    if not m:
        return {"found": False}
    sid = m.group(1)
    lines = [ln for ln in text.splitlines() if ln.startswith(f"#{sid} ")]
    status = "cached" if f"#{sid} CACHED" in lines else "ran"
    done = next((ln.split()[-1] for ln in lines if ln.startswith(f"#{sid} DONE")), None)
    return {"found": True, "status": status, "seconds": done,
            "compiled": [ln.split(" ", 2)[-1] for ln in lines if re.search(r"Built |Building ", ln)],
            "uv_lines": [ln.split(" ", 2)[-1] for ln in lines if re.search(r"Prepared|Installed|Uninstalled", ln)]}


def manifest(tag: str) -> dict[str, Any]:
    out = subprocess.run(["/usr/bin/docker", "run", "--rm", "--network", "none", tag, "python", "-c", MANIFEST],
                         capture_output=True, text=True, check=True).stdout
    return dict(json.loads(out))


def layers(tag: str) -> list[str]:
    out = subprocess.run(["/usr/bin/docker", "image", "inspect", tag, "--format", "{{json .RootFS.Layers}}"],
                         capture_output=True, text=True, check=True).stdout
    return list(json.loads(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="envbuilder-bench-build-"))
    work.mkdir(parents=True, exist_ok=True)
    from envbuilder.image.baseimage import bootstrap

    base = bootstrap()
    run_id = os.urandom(4).hex()
    templates = work / "templates"
    shutil.copytree(REPO / "templates", templates, dirs_exist_ok=True)
    common = templates / "_envbuilder_common.j2"
    common.write_text(common.read_text().replace("id=envbuilder-uv,", f"id=envbuilder-uv-bench-{run_id},"))
    matrices = work / "matrices"
    shutil.copytree(REPO / "matrices", matrices, dirs_exist_ok=True)
    smoke = matrices / "smoke.toml"
    smoke.write_text(smoke.read_text().replace('"einops==0.8.1"', '"einops==0.8.0"'))

    res: dict[str, Any] = {"run_id": run_id, "base": base, "cpus": os.cpu_count()}
    res["lock_a_s"] = round(lock(work / "lock-a"), 1)
    res["lock_b_s"] = round(lock(work / "lock-b", matrices), 1)
    tag_a, tag_b, tag_r = (f"envbuilder-bench/smoke:{x}-{run_id}" for x in ("a", "b", "a-nocache"))

    cold_s, cold = build(work / "lock-a", tag_a, templates, work / "cold.log")
    res["cold"] = {"wall_s": round(cold_s, 1), "build_s": cold["build_seconds"], "size_bytes": cold["size_bytes"],
                   "image_id": cold["image_id"], "stage2": stage2_evidence(work / "cold.log")}
    warm_s, warm = build(work / "lock-b", tag_b, templates, work / "warm.log")
    res["warm_pin_change"] = {"wall_s": round(warm_s, 1), "build_s": warm["build_seconds"],
                              "stage2": stage2_evidence(work / "warm.log"),
                              "steps": [f"{s['status']:6} {s['seconds']}  {s['step'][:90]}" for s in warm["steps"]]}
    nc_s, nc = build(work / "lock-a", tag_r, templates, work / "nocache.log", "--no-cache")
    res["nocache_rebuild"] = {"wall_s": round(nc_s, 1), "image_id": nc["image_id"],
                              "stage2": stage2_evidence(work / "nocache.log")}
    ma, mr = manifest(tag_a), manifest(tag_r)
    la, lr = layers(tag_a), layers(tag_r)
    diff_files = sorted(p for p in set(ma["files"]) | set(mr["files"]) if ma["files"].get(p) != mr["files"].get(p))
    res["reproducibility"] = {
        "same_image_id": cold["image_id"] == nc["image_id"],
        "layers_total": len(la), "layers_identical": sum(1 for a, b in zip(la, lr, strict=False) if a == b),
        "files_compared": len(ma["files"]), "files_differing": len(diff_files), "differing_sample": diff_files[:15],
        "versions_identical": ma["versions"] == mr["versions"],
    }
    res["workdir"] = str(work)
    if args.json:
        print(json.dumps(res, indent=2, sort_keys=True))
        return
    print(f"cold build        {res['cold']['wall_s']:7.1f} s  (wall; BuildKit {cold['build_seconds']} s)")
    print(f"  stage 2         {res['cold']['stage2']}")
    print(f"warm, pin change  {res['warm_pin_change']['wall_s']:7.1f} s  (BuildKit {warm['build_seconds']} s)")
    print(f"  stage 2         {res['warm_pin_change']['stage2']}")
    print(f"image size        {cold['size_bytes'] / 1e9:.3f} GB")
    print(f"--no-cache again  {res['nocache_rebuild']['wall_s']:7.1f} s")
    print(f"reproducibility   {json.dumps(res['reproducibility'], indent=2)}")


if __name__ == "__main__":
    main()
