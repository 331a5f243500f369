#!/usr/bin/env python3
"""Build an offline OSV database (a zip of OSV JSON records, OSV's own export layout) holding the real
advisories that name a package of the given locks.

    .venv/bin/python scripts/osv-subset.py --pypa ADVISORY_DB_CHECKOUT [--record GHSA.json ...] \
        --locks locks -o tests/audit/data/osv-pypi-locks.zip

--pypa: a checkout of the PyPA advisory database (github.com/pypa/advisory-database: vulns/<pkg>/*.yaml,
OSV records in YAML); read with YAML's base loader, so every scalar stays the string it was written as
("1.10" is not the float 1.1). --record: OSV JSON records taken as they are (e.g. GitHub's, from
github.com/github/advisory-database). The zip is deterministic: members sorted, fixed timestamps.
Needs PyYAML (a dev dependency).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import zipfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import yaml
from packaging.utils import canonicalize_name


def lock_names(locks: Path) -> set[str]:
    names: set[str] = set()
    for f in sorted(glob.glob(str(locks / "*" / "uv.lock"))):
        data = tomllib.loads(Path(f).read_text(encoding="utf-8"))
        names |= {canonicalize_name(p["name"]) for p in data.get("package", [])}
    return names


def affected_names(record: dict) -> set[str]:
    return {canonicalize_name(a["package"]["name"]) for a in record.get("affected") or []
            if isinstance(a.get("package"), dict) and a["package"].get("ecosystem") == "PyPI"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pypa", type=Path, required=True, help="checkout of pypa/advisory-database")
    ap.add_argument("--record", type=Path, action="append", default=[], help="an OSV JSON record to add")
    ap.add_argument("--locks", type=Path, default=Path("locks"))
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args()
    loader = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
    wanted = lock_names(args.locks)
    records: dict[str, dict] = {}
    for f in sorted((args.pypa / "vulns").rglob("*.yaml")):
        rec = yaml.load(f.read_text(encoding="utf-8"), Loader=loader)  # BaseLoader builds only str/list/dict
        if affected_names(rec) & wanted:
            records[rec["id"]] = rec
    for f in args.record:
        rec = json.loads(f.read_text(encoding="utf-8"))
        records[rec["id"]] = rec
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(args.output.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for vid in sorted(records):
            info = zipfile.ZipInfo(f"{vid}.json", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, json.dumps(records[vid], indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    tmp.replace(args.output)
    print(f"wrote {args.output}: {len(records)} records naming {len(wanted)} locked package names", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
