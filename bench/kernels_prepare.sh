#!/usr/bin/env bash
# Host side of bench/kernels_device.sh: fetch what the GPU machine needs (it reaches no index) and cut it
# into parts of at most PART bytes under /work/main/.devcarry/pN (git-ignored there), one part per call.
#   bench/kernels_prepare.sh LOCKDIR [PART]
# Until `envbuilder bundle --split` lands this uses `pip download` (cp312 manylinux wheels, sdists by URL).
set -euo pipefail
LOCK=${1:?lock dir}
PART=${2:-62000000}
W=${WORK:-/tmp/gpu12}
DST=/work/main/.devcarry
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$W"/{dl,whl,sdists}
PIPDL=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
       --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
       --platform manylinux2014_x86_64)
# the lock's own pins for TE's python deps that the device image lacks, plus megatron-core and the TE meta wheel
pins=$(python3 - "$LOCK/uv.lock" <<'PY'
import sys, tomllib
want = ["transformer-engine", "megatron-core", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
        "nvdlfw-inspect", "importlib-metadata"]
pk = {p["name"]: p["version"] for p in tomllib.load(open(sys.argv[1], "rb"))["package"]}
print(" ".join(f"{n}=={pk[n]}" for n in want))
PY
)
"${PIPDL[@]}" -d "$W/whl" $pins uv=="$(uv --version | cut -d' ' -f2)" tomlkit
"${PIPDL[@]}" -d "$W/dl" "transformer-engine-cu13==$(grep -A1 '^name = "transformer-engine-cu13"' "$LOCK/uv.lock" | sed -n 's/version = "\(.*\)"/\1/p')"
python3 - "$LOCK/uv.lock" "$W/sdists" <<'PY'
import json, sys, tomllib, urllib.parse, urllib.request
pk = {p["name"]: p["version"] for p in tomllib.load(open(sys.argv[1], "rb"))["package"]}
for name in ("transformer-engine-torch", "mamba-ssm", "causal-conv1d", "flash-attn"):
    base = f"https://pypi.org/pypi/{name}/json"
    for u in json.load(urllib.request.urlopen(base))["releases"][pk[name]]:
        if u["packagetype"] == "sdist":
            urllib.request.urlretrieve(urllib.parse.urljoin(base, u["url"]), f"{sys.argv[2]}/{u['filename']}")
            print(u["filename"], u["digests"]["sha256"])
PY
rm -rf "$DST" && mkdir -p "$DST/p1/src" "$DST/p1/neg"
cp -r "$HERE/envbuilder" "$HERE/bench" "$HERE/matrices" "$DST/p1/src/"
find "$DST/p1/src" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$DST/p1/src/bench/results"
cp -r "$W/whl" "$W/sdists" "$DST/p1/"
cp -r "$LOCK" "$DST/p1/lock"
cp "$W/torch26-include.tgz" "$DST/p1/neg/"   # torch 2.6.0's include/ (from its PyPI wheel): the ABI negative case
core=$(ls "$W"/dl/transformer_engine_cu13-*.whl)
basename "$core" > "$DST/p1/te-core.name"
(cd "$(dirname "$core")" && sha256sum "$(basename "$core")") > "$DST/p1/te-core.sha256"
first=$(( PART - $(du -sb "$DST/p1" | cut -f1) ))
python3 - "$core" "$DST" "$first" "$PART" <<'PY'
import os, sys
core, dst, first, part = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
size = os.path.getsize(core)
rest = size - first
n_more = -(-rest // part)
each = -(-rest // n_more)
with open(core, "rb") as f:
    for i, chunk in enumerate([first] + [each] * n_more):
        data = f.read(chunk)
        if not data:
            break
        os.makedirs(f"{dst}/p{i + 1}", exist_ok=True)
        open(f"{dst}/p{i + 1}/te-core.part-a{chr(97 + i)}", "wb").write(data)
PY
du -sb "$DST"/p*
