#!/usr/bin/env bash
# One-piece offline kit for a fresh GPU machine once the kernels are built (bench/kernels_device.sh recv/unpack):
# envbuilder sources, the lock, the small wheels, the sm_90 wheels built on the device, the TE core wheel and
# nvidia-cublas 13.2.x (TE 2.14.1's core needs it), as one tar cut into parts of at most PART bytes.
#   bench/kernels_bundle.sh LOCKDIR BUILT_WHEEL_DIR CUBLAS_WHEEL [PART]
set -euo pipefail
LOCK=${1:?lock dir} BUILT=${2:?built wheels} CUBLAS=${3:?nvidia-cublas wheel} PART=${4:-62000000}
W=${WORK:-/tmp/gpu12}
HERE=$(cd "$(dirname "$0")/.." && pwd)
DST=/work/main/.devcarry
S=$(mktemp -d)
mkdir -p "$S"/{src,whl,built,cublas-whl,sdists}
cp -r "$HERE/envbuilder" "$HERE/bench" "$HERE/matrices" "$S/src/" && rm -rf "$S/src/bench/results"
find "$S/src" -name __pycache__ -prune -exec rm -rf {} +
cp -r "$LOCK" "$S/lock"
cp "$W"/whl/*.whl "$W"/dl/transformer_engine_cu13-*.whl "$S/whl/"
cp "$BUILT"/*.whl "$S/built/"
cp "$CUBLAS" "$S/cublas-whl/"
cp "$W"/sdists/flash_attn-*.tar.gz "$S/sdists/"
rm -rf "$DST" && mkdir -p "$DST/q"
tar -C "$S" -cf "$DST/q/bundle.tar" src lock whl built cublas-whl sdists
(cd "$DST/q" && sha256sum bundle.tar > bundle.sha256)
n=0
split -b "$PART" "$DST/q/bundle.tar" "$DST/q/bundle.part-"
for p in "$DST"/q/bundle.part-*; do
  n=$((n + 1)); mkdir -p "$DST/p$n"; mv "$p" "$DST/p$n/"
done
cp "$DST/q/bundle.sha256" "$DST/p1/"
# the first part also brings the device script itself
cp "$HERE/bench/kernels_device.sh" "$DST/p1/"
rm -rf "$DST/q" "$S"
du -sb "$DST"/p* | tr '\n' ' '; echo
