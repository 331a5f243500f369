#!/usr/bin/env bash
# The whole envbuilder path on a lent GPU machine, with envbuilder's own commands only
# (BENCHMARKS.md "The 26.04 stack on a bare GPU host with envbuilder's own commands").
#
# On the host (network):  envbuilder lock --release 26.04 --mode host-torch --host-torch-facts h100-torch.json ...
#                         envbuilder bundle LOCK -o BUNDLE --split 60M   (parts carried one per call)
# On the device (no network), one step per call, from the repository root:
#   bash bench/gpu_flow.sh kit          envbuilder's own dependencies (tomlkit, docker, cryptography, uv) offline
#   bash bench/gpu_flow.sh part         move whatever this call carried (.devcarry/bNNN, cN) out of the repository
#   bash bench/gpu_flow.sh install      envbuilder install (stage 1) + envbuilder wheels in the background (setsid)
#   bash bench/gpu_flow.sh poll SECS    wait for the wheels job (up to SECS), print its progress
#   bash bench/gpu_flow.sh hit          envbuilder wheels again: every package a cache hit
#   bash bench/gpu_flow.sh install2     envbuilder install --wheelhouse: the whole row, stage 2 included
#   bash bench/gpu_flow.sh certify      envbuilder certify --venv --level 1
#   bash bench/gpu_flow.sh fresh        a second venv from the bundle + wheelhouse: install + certify, timed
# Everything lives in ~/eb, which survives between consecutive calls on a warm machine.
set -uo pipefail
STEP=${1:?step}
G=$HOME/eb
OUT=${OUT:-/tmp/ebout}
PY=${HOST_PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$G"/{bundle,logs,site,cublas} "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=$G/site/bin:/usr/local/cuda/bin:$PATH CUDA_HOME=/usr/local/cuda
export ENVBUILDER_CACHE_DIR=$G/cache
now() { date +%s.%N; }
since() { python3 -c "print(round($(now) - $1, 1))"; }
eb() { PYTHONPATH=$PWD:$G/site "$PY" -m envbuilder "$@"; }

# what this call carried: move it out of the repository
for d in .devcarry/*/; do
  [ -d "$d" ] || continue
  mv "$d"/bundle.tar.* "$d"/envbuilder-bundle.parts.json "$G/bundle/" 2>/dev/null
  mv "$d"/cublas.* "$G/cublas/" 2>/dev/null
done

# torch 2.11.0+cu130 brings nvidia-cublas 13.1.0.3; transformer-engine-cu13 2.14 calls
# cublasLtGroupedMatrixLayoutInit_internal (cuBLAS >= 13.2). A host-torch venv cannot replace the host
# torch's cuBLAS, so the certify step preloads the carried 13.2 libraries (see BENCHMARKS.md).
cublas_preload() {
  local lib=$G/cublas/lib
  if [ ! -f "$lib/nvidia/cu13/lib/libcublasLt.so.13" ] && ls "$G"/cublas/cublas.whl.part-* >/dev/null 2>&1; then
    cat "$G"/cublas/cublas.whl.part-* > "$G/cublas/whl"
    (cd "$G/cublas" && awk '{print $1"  whl"}' cublas.sha256 | sha256sum --quiet -c - >&2) || return 1  # stdout is the preload value
    mkdir -p "$lib" && python3 -m zipfile -e "$G/cublas/whl" "$lib" && rm -f "$G/cublas/whl"
  fi
  [ -f "$lib/nvidia/cu13/lib/libcublasLt.so.13" ] && \
    echo "$lib/nvidia/cu13/lib/libcublasLt.so.13:$lib/nvidia/cu13/lib/libcublas.so.13"
}

wheels_bg() {  # $1 = output wheelhouse; a snapshot of the sources so later calls' checkouts cannot change it
  rm -rf "$G/src-w" && mkdir -p "$G/src-w" && cp -r envbuilder matrices "$G/src-w/"
  rm -f "$G/logs/wheels.rc"
  setsid nohup bash -c "cd '$G' && PYTHONPATH='$G/src-w:$G/site' '$PY' -m envbuilder wheels \
      --lock '$G/venv/envbuilder-lock' -o '$1' --torch-from host --interpreter '$G/venv/bin/python' \
      --sdists '$G/venv/envbuilder-sdists' --arch-list 9.0 --parallel 3 --cuda-home /usr/local/cuda \
      --json --timings > '$G/logs/wheels.json' 2> '$G/logs/wheels.err'; echo \$? > '$G/logs/wheels.rc'" \
      > /dev/null 2>&1 < /dev/null &
}

case $STEP in
kit)
  t0=$(now)
  "$PY" -m pip install -q --no-index --find-links .devcarry/kit --target "$G/site" tomlkit docker \
      "cryptography>=41" "uv==0.13.9" 2>&1 | tail -3
  echo "kit installed in $(since "$t0") s"
  eb --version && "$G/site/bin/uv" --version
  PYTHONPATH=$PWD "$PY" -m envbuilder.host.torchprobe | tee "$OUT/torch-probe.json"
  eb doctor --interpreter "$PY" --json > "$OUT/doctor.json" 2> "$OUT/doctor.err"; echo "doctor rc=$?"
  ;;
part)
  ls -la "$G/bundle" "$G/cublas" | tail -4; df -h "$HOME" | tail -1
  ;;
install)
  t0=$(now)
  eb install "$G/bundle" --venv "$G/venv" --python "$PY" --system-site-packages --json --timings \
      > "$OUT/install-stage1.json" 2> "$OUT/install-stage1.err"
  rc=$?; echo "install rc=$rc in $(since "$t0") s"; tail -5 "$OUT/install-stage1.err"
  [ $rc -eq 0 ] || exit $rc
  du -sh "$G/venv" | tee "$OUT/venv-size.txt"
  wheels_bg "$G/wh"
  echo "wheels started in the background"
  ;;
wheels)
  wheels_bg "$G/wh"; echo "wheels restarted in the background"
  ;;
poll)
  t0=$(now); lim=${2:-540}
  while [ ! -f "$G/logs/wheels.rc" ] && python3 -c "import sys; sys.exit(0 if $(since "$t0") < $lim else 1)"; do
    sleep 20; echo "--- $(date -u +%T) $(grep -E 'building|built|hit|patched|error' "$G/logs/wheels.err" | tail -3 | tr '\n' ' ' | cut -c1-400)"
  done
  if [ -f "$G/logs/wheels.rc" ]; then
    echo "wheels rc=$(cat "$G/logs/wheels.rc")"; cp "$G/logs/wheels.json" "$OUT/wheels-miss.json"
    tail -c 3000 "$G/logs/wheels.err" > "$OUT/wheels-miss.err.txt"; tail -12 "$G/logs/wheels.err"
  fi
  ;;
hit)
  t0=$(now)
  PYTHONPATH=$PWD:$G/site "$PY" -m envbuilder wheels --lock "$G/venv/envbuilder-lock" -o "$G/wh-hit" \
      --torch-from host --interpreter "$G/venv/bin/python" --sdists "$G/venv/envbuilder-sdists" --arch-list 9.0 \
      --cuda-home /usr/local/cuda --json --timings > "$OUT/wheels-hit.json" 2> "$OUT/wheels-hit.err"
  echo "wheels (cache) rc=$? in $(since "$t0") s"; tail -4 "$OUT/wheels-hit.err"
  ;;
install2)
  t0=$(now)
  eb install "$G/bundle" --venv "$G/venv" --python "$PY" --system-site-packages --wheelhouse "$G/wh" --json \
      --timings > "$OUT/install-full.json" 2> "$OUT/install-full.err"
  echo "install --wheelhouse rc=$? in $(since "$t0") s"; tail -4 "$OUT/install-full.err"
  ;;
certify)
  pre=$(cublas_preload) || { echo "cuBLAS parts damaged"; exit 1; }
  mkdir -p "$OUT/certlog" && t0=$(now)
  LD_PRELOAD=$pre eb certify --venv "$G/venv" --lock "$G/venv/envbuilder-lock" --level 1 ${ONLY:+--only "$ONLY"} \
      -o "$OUT/cert" --logs "$OUT/certlog/logs" --json > "$OUT/certlog/certificate.stdout.json" 2> "$OUT/certlog/console.txt"
  echo "certify rc=$? in $(since "$t0") s (LD_PRELOAD=${pre:-none})"; grep -E "PASS|FAIL|not-installed|SKIP|pass|fail" "$OUT/certlog/console.txt" | tail -30
  ;;
fresh)  # the north star: a bundle that carries its wheelhouse -> level-1 certificate, nothing compiled
  pre=$(cublas_preload) || exit 1
  rm -rf "$G/venv-fresh"; mkdir -p "$OUT/freshlog" && t0=$(now)
  eb install "$G/bundle" --venv "$G/venv-fresh" --python "$PY" --system-site-packages --json --timings \
      > "$OUT/freshlog/install.json" 2> "$OUT/freshlog/install.err"
  echo "fresh install rc=$? in $(since "$t0") s"; tail -2 "$OUT/freshlog/install.err"; t1=$(now)
  LD_PRELOAD=$pre eb certify --venv "$G/venv-fresh" --lock "$G/venv-fresh/envbuilder-lock" --level 1 \
      -o "$OUT/fresh" --logs "$OUT/freshlog/logs" --json > "$OUT/freshlog/certificate.stdout.json" \
      2> "$OUT/freshlog/console.txt"
  echo "certify rc=$? in $(since "$t1") s; install + certify $(since "$t0") s"
  grep -E "pass|fail|not-installed|skipped" "$OUT/freshlog/console.txt" | grep -v "│" | tail -20
  ;;
*) echo "unknown step $STEP"; exit 2 ;;
esac
