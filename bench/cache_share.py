"""Which stage-2 wheels a second lock takes from a shared cache another lock's build filled, computed from keys.

    .venv/bin/python bench/cache_share.py WHEELS_JSON LOCK_A LOCK_B [LOCK_C ...] [--json]

WHEELS_JSON is the `wheels --json` of LOCK_A's build (on the GPU host that published it: every package's
cache key, sdist sha256, patch and the torch it was built against). The script first recomputes each of
LOCK_A's keys from those facts and LOCK_A's record (kernels/cache.py BuildKey): it stops unless every one
equals the key the build published, so the recipe is the build's own. Then, for each further lock, it
recomputes the key of each stage-2 sdist package with that lock's version, sdist sha256 and stage2_env on the
same host torch, Python and arch list: an equal key is a shared-cache hit (`wheels --cache` takes the
published wheel, verified, and compiles nothing); another key is a compile. A package whose sdist differs
from every published one has no known gencode patch: it compiles (its key cannot equal a published one).
Nothing here runs a build: it answers before a GPU is lent, from the lock files alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envbuilder.kernels.cache import BuildKey  # noqa: E402
from envbuilder.kernels.pipeline import EXACT_VERSION_PACKAGES  # noqa: E402
from envbuilder.lock.lockdir import open_lockdir  # noqa: E402
from envbuilder.lock.uvlock import by_name, read_uv_lock  # noqa: E402


def _keys(lock: Path, built: dict[str, Any], by_sdist: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    ld = open_lockdir(lock)
    torch = built["torch"]
    packages = by_name(read_uv_lock(lock / "uv.lock"))
    env = {str(k): str(v) for k, v in ld.record.stage2_env.items()}
    out = []
    for name in sorted(ld.record.stage2_packages):
        p = packages.get(name)
        if p is None or p.sdist is None:
            continue  # a wheel on the index: nothing to build
        seen = by_sdist.get(p.sdist.sha256)
        key = BuildKey(package=name, version=p.version, sdist_sha256=p.sdist.sha256, torch=torch["version"],
                       cuda=torch["cuda"], cxx11abi=bool(torch["cxx11abi"]),
                       arch_list=built["arch_list"] if (seen or {}).get("device_code") else "none",
                       python="cp" + str(torch["python"]).replace(".", ""),
                       patch=(seen or {}).get("patch_sha256"), stage2_env=env,
                       keep_version=name in EXACT_VERSION_PACKAGES).key if seen else None
        published = {b["cache_key"] for b in by_sdist.values()}
        out.append({"package": name, "version": p.version, "sdist_sha256": p.sdist.sha256[:12],
                    "key": key, "hit": key in published if key else False})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheels_json", type=Path)
    ap.add_argument("locks", type=Path, nargs="+")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    built = json.loads(a.wheels_json.read_text())
    by_sdist = {p["sdist_sha256"]: {"cache_key": p["cache_key"], "patch_sha256": (p.get("patch") or {}).get("sha256"),
                                    "name": p["name"], "compile_s": (p.get("timings") or {}).get("compile_seconds"),
                                    # a package with no device code is keyed with arch list "none"
                                    "device_code": bool(p.get("archs"))}
                for p in built["packages"]}
    first, rest = a.locks[0], a.locks[1:]
    check = _keys(first, built, by_sdist)
    wrong = [c for c in check if not c["hit"]]
    if wrong:
        print(f"the recomputed keys of {first} differ from the published ones: {wrong}", file=sys.stderr)
        return 1
    others: dict[str, list[dict[str, Any]]] = {str(lk): _keys(lk, built, by_sdist) for lk in rest}
    report = {"published_by": str(first), "recomputed": check, "locks": others}
    if a.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{first}: {len(check)} keys recomputed, each equal to the key its build published")
    for lk, rows in others.items():
        hits = [r for r in rows if r["hit"]]
        saved = sum(by_sdist[next(s for s in by_sdist if s.startswith(r["sdist_sha256"]))]["compile_s"] or 0
                    for r in hits)
        print(f"{lk}: {len(hits)} of {len(rows)} stage-2 sdists hit the shared cache "
              f"({', '.join(r['package'] + ' ' + r['version'] for r in hits) or 'none'}; "
              f"{saved:.0f} s of compiling on the build host not repeated); compiles: "
              f"{', '.join(r['package'] + ' ' + r['version'] for r in rows if not r['hit']) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
