#!/usr/bin/env bash
# One-off diagnosis of the PP2xVPP2 variant (flat loss on 4xH200); see BENCHMARKS.md "## Certify".
set -uo pipefail
OUT=${OUT:-/tmp/vppdbg}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
COMMON="--layers=4 --hidden=512 --heads=8 --seq=1024 --vocab=4096 --mbs=4 --steps=30"
run() {  # name devices nproc args...
  local name=$1 dev=$2 n=$3; shift 3
  CUDA_VISIBLE_DEVICES=$dev timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node=$n \
    -m envbuilder.certify.train_mcore --out /tmp/vpp-$name.json $COMMON "$@" > /tmp/vpp-$name.log 2>&1
  echo "$name rc=$?"
}
run d1-dp2 0,1,2,3 4 --pp=2 --vpp=2 --nmb=4
run d2-dp1 0,1 2 --pp=2 --vpp=2 --nmb=4 & run d3-overlap 2,3 2 --pp=2 --vpp=2 --nmb=4 --overlap-p2p & wait
run d4-nmb2 0,1 2 --pp=2 --vpp=2 --nmb=2 & run d5-fp32 2,3 2 --pp=2 --vpp=2 --nmb=4 --fp32 & wait
run d6-learned 0,1 2 --pp=2 --vpp=2 --nmb=4 --pos=learned_absolute & run d7-nmb8 2,3 2 --pp=2 --vpp=2 --nmb=8 & wait
run d8-pp2 0,1 2 --pp=2 --nmb=4 & run d9-pp2-overlap 2,3 2 --pp=2 --nmb=4 --overlap-p2p & wait
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob('/tmp/vpp-*.json')):
    d = json.load(open(f)); L = d['losses']; g = d.get('grad_norms', [])
    print(f.split('/')[-1], 'loss', round(L[0], 3), '->', round(L[-1], 3), 'gn', g[:3], g[-2:])
PY
tar -C /tmp -czf "$OUT/vpp.tgz" $(cd /tmp && ls vpp-*) 2>/dev/null
for f in /tmp/vpp-*.log; do [ -f "${f%.log}.json" ] || { echo "== $f"; grep -v "warn\|Warning" "$f" | tail -15; }; done
