#!/usr/bin/env bash
# Stage-2 compile probe for BENCHMARKS.md "## Build", run on the device machine:
#   mkdir -p build/sdists && (download the sdists there from PyPI: flash_attn-2.7.3.tar.gz, ...)
#   run (device tool, carry build/sdists):  bash bench/build_kernels.sh flash_attn-2.7.3.tar.gz 510
# Builds one sdist without isolation against the machine's torch for sm_90 with MAX_JOBS=nproc,
# sampling ninja's [done/total] progress, load and memory every 30 s until the time limit.
set -u
SDIST=${1:?sdist file name under build/sdists}
LIMIT=${2:-510}
cd "$(dirname "$0")/../build/sdists"
export TORCH_CUDA_ARCH_LIST="9.0" MAX_JOBS=$(nproc)
export FLASH_ATTENTION_FORCE_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE
OUT=${OUT:-/tmp}
echo "nproc=$(nproc) mem=$(free -g | awk '/Mem/{print $2}')G nvcc=$(nvcc --version | tail -1)"
python3 -m pip wheel --no-build-isolation --no-deps -v -w /tmp/wheels "$SDIST" > "$OUT/compile.log" 2>&1 &
pid=$!
t0=$(date +%s)
while kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$LIMIT" ]; do
  sleep 30
  echo "t=$(( $(date +%s) - t0 ))s $(grep -oE '\[[0-9]+/[0-9]+\]' "$OUT/compile.log" | tail -1)" \
       "load=$(cut -d' ' -f1 /proc/loadavg) mem_used=$(free -g | awk '/Mem/{print $3}')G"
done
if kill -0 "$pid" 2>/dev/null; then kill "$pid"; echo "stopped at the ${LIMIT}s limit"; else wait "$pid"; echo "rc=$?"; fi
grep -E "error|Error" "$OUT/compile.log" | head -3
