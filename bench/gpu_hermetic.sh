#!/usr/bin/env bash
# A hermetic row on a bare GPU host, and the north star: the row's kernels built once, published to a signed
# shared cache, then a fresh venv installed from the bundle + that cache (compiling nothing) and certified.
# (BENCHMARKS.md "26.04 hermetic on an H100"). Nothing comes from the GPU host's own Python packages: the venv
# is made from its bare interpreter, every file from the bundle, verified by sha256.
#
# On the host (network):  envbuilder bundle --lock locks/26.04 -o B --split 60M   (parts carried one per call)
# Another row: LOCK=locks/ROW, and HOST_PYTHON=an interpreter of the lock's Python (v2.3.0 needs 3.11: carried).
# On the device (no network), one step per call, from the repository root:
#   bash bench/gpu_hermetic.sh kit       envbuilder's own dependencies offline; a team signing key; then the
#                                        team's kernel build in the background (setsid): `wheels --publish --sign`
#                                        of the lock's stage-2 sdists (.devcarry/sdists) into the shared cache,
#                                        against the host's torch 2.11.0+cu130 (the very wheel the lock pins:
#                                        the cache key checks torch's version, CUDA, ABI and Python)
#   bash bench/gpu_hermetic.sh part      move what this call carried (.devcarry/p*) out of the repository
#   bash bench/gpu_hermetic.sh poll S    wait for the build (up to S seconds)
#   bash bench/gpu_hermetic.sh fresh     a fresh venv: `install --cache --trusted-key` (stage 2 pulled and verified,
#                                        nothing compiled) + `certify --level 1` (LEVEL=2 on 2 GPUs), timed together
set -uo pipefail
STEP=${1:?step}
G=$HOME/eb
OUT=${OUT:-/tmp/ebout}
PY=${HOST_PYTHON:-/opt/torch/.venv/bin/python3}
LOCK=${LOCK:-locks/26.04}  # the lock the bundle was made from (its stage-2 sdists travel in .devcarry/sdists)
mkdir -p "$G"/{bundle,logs,site} "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=$G/site/bin:$PATH ENVBUILDER_CACHE_DIR=$G/ebcache
CACHE=file://$G/shared-cache
now() { date +%s.%N; }
since() { python3 -c "print(round($(now) - $1, 1))"; }
eb() { PYTHONPATH=$G/src:$G/site "$PY" -m envbuilder "$@"; }

for d in .devcarry/p*/; do  # what this call carried: parts of the bundle
  [ -d "$d" ] && mv "$d"/* "$G/bundle/" 2>/dev/null
done

case $STEP in
kit)
  t0=$(now)
  "$PY" -m pip install -q --no-index --no-deps --find-links .devcarry/kit --target "$G/site" .devcarry/kit/*.whl 2>&1 | tail -3
  rm -rf "$G/src" && mkdir -p "$G/src" && cp -r envbuilder matrices templates "$G/src/"  # later checkouts cannot change it
  echo "kit installed in $(since "$t0") s"; eb --version
  eb keygen -o "$G/keys" --name team --json > "$OUT/keygen.json" && cat "$OUT/keygen.json"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  rm -rf "$G/lock" "$G/sdists" && cp -r "$LOCK" "$G/lock" && cp -r .devcarry/sdists "$G/sdists"
  rm -f "$G/logs/wheels.rc"
  setsid nohup bash -c "cd '$G' && PYTHONPATH='$G/src:$G/site' '$PY' -m envbuilder wheels \
      --lock '$G/lock' -o '$G/wh' --torch-from host --interpreter '$PY' --sdists '$G/sdists' \
      --arch-list 9.0 --parallel 3 --cuda-home /usr/local/cuda --publish '$CACHE' --sign '$G/keys/team.key' \
      --json --timings > '$G/logs/wheels.json' 2> '$G/logs/wheels.err'; echo \$? > '$G/logs/wheels.rc'" \
      > /dev/null 2>&1 < /dev/null &
  echo "kernel build started in the background"
  ;;
part)
  ls "$G/bundle" | wc -l; du -sh "$G/bundle"; df -h "$HOME" | tail -1
  ;;
poll)
  t0=$(now); lim=${2:-540}
  while [ ! -f "$G/logs/wheels.rc" ] && python3 -c "import sys; sys.exit(0 if $(since "$t0") < $lim else 1)"; do
    sleep 15; echo "--- $(date -u +%T) $(grep -E 'building|built|published|error' "$G/logs/wheels.err" | tail -2 | tr '\n' ' ' | cut -c1-300)"
  done
  if [ -f "$G/logs/wheels.rc" ]; then
    echo "wheels rc=$(cat "$G/logs/wheels.rc")"; cp "$G/logs/wheels.json" "$OUT/wheels-build.json"
    tail -c 3000 "$G/logs/wheels.err" > "$OUT/wheels-build.err.txt"; tail -8 "$G/logs/wheels.err"
  fi
  ;;
fresh)  # the north star, on this host: bundle + signed shared cache -> level-1 certificate, nothing compiled
  rm -rf "$G/venv" "$G/ebcache/wheels"; mkdir -p "$OUT/freshlog" && t0=$(now)
  eb install "$G/bundle" --venv "$G/venv" --python "$PY" --cache "$CACHE" --trusted-key "$G/keys/team.pub" \
      --arch-list 9.0 --json --timings > "$OUT/freshlog/install.json" 2> "$OUT/freshlog/install.err"
  echo "fresh install rc=$? in $(since "$t0") s"; tail -3 "$OUT/freshlog/install.err"; t1=$(now)
  eb certify --venv "$G/venv" --lock "$G/venv/envbuilder-lock" --level "${LEVEL:-1}" ${ONLY:+--only "$ONLY"} \
      -o "$OUT/cert" --logs "$OUT/freshlog/logs" --json > "$OUT/freshlog/certificate.stdout.json" \
      2> "$OUT/freshlog/console.txt"
  echo "certify rc=$? in $(since "$t1") s; install + certify $(since "$t0") s"
  grep -E "pass|fail|not-installed|skipped" "$OUT/freshlog/console.txt" | grep -v "│" | tail -25
  ;;
*) echo "unknown step $STEP"; exit 2 ;;
esac
