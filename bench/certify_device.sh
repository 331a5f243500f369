#!/usr/bin/env bash
# Certification runs on the lent GPU machines. Results: BENCHMARKS.md "## Certify".
#   bench/certify_device.sh h100     # doctor --json + certify --level 1 (1 GPU), timed
#   bench/certify_device.sh h200x4   # doctor --json + certify --level 2 on 2 GPUs, then on 4 GPUs
# Needs the wheels in .whl/ (megatron-core 0.19.2 cp312, tomlkit, docker; see BENCHMARKS.md) and
# writes into $OUT (default /tmp/certify-out): at most 8 files, as the device tool returns them.
set -uo pipefail
MODE=${1:?h100 or h200x4}
OUT=${OUT:-/tmp/certify-out}
mkdir -p "$OUT"
LOG="$OUT/console.log"
exec > >(tee -a "$LOG") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.device_count())"
python3 -m envbuilder doctor --json > "$OUT/doctor-$MODE.json" 2> /tmp/doctor.err; echo "doctor rc=$?"; tail -3 /tmp/doctor.err

certify() {  # name, timeout, extra args...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s.%N)
  timeout "$limit" python3 -m envbuilder certify --in-place --expect bench/certify/device-expect.json \
    -o "/tmp/cert-$name" --logs "/tmp/logs-$name" "$@" > /dev/null
  local rc=$?
  echo "certify $name rc=$rc wall_s=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")"
  cp "/tmp/cert-$name/certificate.json" "$OUT/cert-$name.json" 2>/dev/null
  tar -C /tmp -czf "$OUT/$name.tgz" "cert-$name" "logs-$name" 2>/dev/null
}
case $MODE in
  h100) certify h100 420 --level 1 ;;
  h200x4)
    # 1-GPU pretrains were certified on the H100 run; here: level 0, driver/arch/kernels/GEMM, NCCL, variants
    ONLY=drift,imports,torch-build,driver,arch,kernels,gemm,nccl,parallel
    CUDA_VISIBLE_DEVICES=0,1 certify h200x2 290 --level 2 --only $ONLY
    certify h200x4 290 --level 2 --only $ONLY ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
ls -la "$OUT"
