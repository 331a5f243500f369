#!/usr/bin/env bash
# Kernel builds and GPU certification on the lent GPU machines (BENCHMARKS.md "Kernels on the GPU machines").
# Prepared on the host by bench/kernels_prepare.sh into /work/main/.devcarry/pN (N = 1..5); each device
# call carries one part and runs, from the repository root:
#   bash .devcarry/p1/src/bench/kernels_device.sh start          # p1: sources, wheels, lock; starts the builds
#   bash .devcarry/pN/kernels_device.sh poll                     # p2..p5: the TE core wheel in parts
#   bash ~/k/src/bench/kernels_device.sh te|certify|neg|out|level2|ratio|flash
# Everything lives in ~/k, which survives between consecutive calls on a warm machine.
set -uo pipefail
STEP=${1:?step}
K=$HOME/k
OUT=${OUT:-/tmp/kout}
mkdir -p "$K"/{parts,wheels,logs,site,neg} "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$K/site:$K/src
ARCH=${ARCH:-90}
# transformer-engine-cu13 2.14.1 needs libcublasLt >= 13.2 (cublasLtGroupedMatrixLayoutInit_internal); torch
# 2.11.0+cu130 brings nvidia-cublas 13.1.0.3. When the bundle carried nvidia-cublas 13.2.x, preload its two libraries.
if [ -f "$K/cublas/nvidia/cu13/lib/libcublasLt.so.13" ]; then
  export LD_PRELOAD=$K/cublas/nvidia/cu13/lib/libcublasLt.so.13:$K/cublas/nvidia/cu13/lib/libcublas.so.13
fi
now() { date +%s.%N; }
since() { python3 -c "print(round($(now) - $1, 1))"; }

# whatever this call carried: move it out of the repository into ~/k
for d in .devcarry/p*; do
  [ -d "$d" ] || continue
  [ -d "$d/src" ] && { rm -rf "$K/src"; cp -r "$d/src" "$K/src"; }
  for sub in sdists whl lock neg; do [ -d "$d/$sub" ] && mkdir -p "$K/$sub" && cp -r "$d/$sub/." "$K/$sub/"; done
  cp "$d"/te-core.part-* "$d"/bundle.part-* "$K/parts/" 2>/dev/null
  [ -f "$d/kernels_device.sh" ] && cp "$d/kernels_device.sh" "$K/kd.sh"
  cp "$d"/*.whl.part-* "$K/parts/" 2>/dev/null
  cp "$d"/*.sha256 "$d"/te-core.name "$K/" 2>/dev/null
done

patch_gencodes() {  # setup.py ARCH: keep only the literal -gencode pair for ARCH (the file hard-codes nine)
  python3 - "$1" "$2" <<'EOF'
import re, sys
path, keep = sys.argv[1], sys.argv[2]
lines = open(path).read().splitlines(keepends=True)
pat = re.compile(r"""^(\s*)\w+\.append\(\s*["']arch=compute_(\d+)a?,code=sm_\d+a?["']\s*\)""")
kept = removed = 0
for i, line in enumerate(lines):
    m = pat.match(line)
    if not m:
        continue
    if m.group(2) == keep:
        kept += 1
        continue
    lines[i] = m.group(1) + "pass  # envbuilder: sm_%s removed\n" % m.group(2)
    if i and "-gencode" in lines[i - 1]:
        lines[i - 1] = re.match(r"\s*", lines[i - 1]).group(0) + "pass\n"
    removed += 1
if not kept:  # the requested arch was not among the literal ones (sm_80 is): add it after the last pass
    last = max(i for i, l in enumerate(lines) if "envbuilder: sm_" in l)
    ind = re.match(r"\s*", lines[last]).group(0)
    var = re.search(r"(\w+)\.append\(\s*[\"']-gencode", "".join(lines)).group(1)
    lines.insert(last + 1, f'{ind}{var} += ["-gencode", "arch=compute_{keep},code=sm_{keep}"]  # envbuilder\n')
open(path, "w").writelines(lines)
print(f"{path}: kept {kept}, removed {removed} literal gencodes, target sm_{keep}")
EOF
}

build() {  # name sdist-dir env...: pip wheel without isolation; wall time and peak RSS of the tree
  local name=$1 dir=$2; shift 2
  local log=$K/logs/build-$name.log t0; t0=$(now)
  ( cd "$dir" && env "$@" MAX_JOBS="${MAX_JOBS:-16}" python3 - "$K/wheels/$name" > "$log" 2>&1 <<'EOF'
import resource, subprocess, sys, time
t = time.time()
rc = subprocess.call([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v", "-w", sys.argv[1], "."])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"BUILD rc={rc} wall_s={time.time() - t:.1f} peak_rss_gib={ru.ru_maxrss / 2**20:.2f} cpu_s={ru.ru_utime + ru.ru_stime:.0f}")
EOF
  )
  echo "$name done after $(since "$t0") s: $(grep '^BUILD' "$log")" >> "$K/logs/builds.txt"
}

status() {
  echo "--- $(date -u +%T) builds:"; cat "$K/logs/builds.txt" 2>/dev/null
  for f in "$K"/logs/build-*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -oE '\[[0-9]+/[0-9]+\]' "$f" | tail -1) $(tail -c 160 "$f" | tr '\n' ' ' | cut -c1-160)"; done
  echo "parts: $(ls "$K/parts" 2>/dev/null | tr '\n' ' ') load=$(cut -d' ' -f1 /proc/loadavg) mem_used=$(free -g | awk '/Mem/{print $3}')G"
}

certify() {  # name timeout args...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(now)
  ( cd "$K/src" && timeout "$limit" python3 -m envbuilder certify --in-place -o "$K/cert-$name" --logs "$K/logs-$name" "$@" > "$K/logs/certify-$name.txt" 2>&1 )
  local rc=$?
  echo "certify $name rc=$rc wall_s=$(since "$t0")"
  tail -25 "$K/logs/certify-$name.txt"
  cp "$K/cert-$name/certificate.json" "$OUT/cert-$name.json" 2>/dev/null
}

case $STEP in
  recv)  # a part of the one-piece bundle (bench/kernels_bundle.sh); `unpack` once all have arrived
    ls "$K/parts" | tr '\n' ' '; echo ;;
  unpack)  # reassemble, verify, unpack; install every wheel in one pip call; the cuBLAS 13.2 libraries aside
    t0=$(now)
    cat "$K"/parts/bundle.part-* > "$K/bundle.tar" && (cd "$K" && sha256sum -c bundle.sha256) || exit 1
    tar -C "$K" -xf "$K/bundle.tar" && rm -f "$K/bundle.tar" "$K"/parts/bundle.part-*
    echo "bundle reassembled, verified, unpacked: $(since "$t0") s"
    t0=$(now); rm -rf "$K/site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$K/site" "$K"/whl/*.whl \
      "$K"/built/*.whl || exit 1
    echo "offline install of $(ls "$K"/site | grep -c dist-info) distributions: $(since "$t0") s"
    t0=$(now); mkdir -p "$K/cublas" && (cd "$K/cublas" && python3 -m zipfile -e "$K"/cublas-whl/nvidia_cublas-*.whl .)
    echo "cuBLAS $(ls "$K"/cublas-whl) unpacked: $(since "$t0") s"
    export LD_PRELOAD=$K/cublas/nvidia/cu13/lib/libcublasLt.so.13:$K/cublas/nvidia/cu13/lib/libcublas.so.13
    python3 -c "import torch, transformer_engine.pytorch as te; print('TE', te.__version__ if hasattr(te, '__version__') else '', 'imports with cuBLAS', torch.backends.cuda.preferred_blas_library())" 2>&1 | tail -2 ;;
  start)
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch._C._GLIBCXX_USE_CXX11_ABI)"
    echo "nproc=$(nproc) mem=$(free -g | awk '/Mem/{print $2}')G $(nvcc --version | tail -1) cuobjdump=$(command -v cuobjdump)"
    t0=$(now)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$K/site" "$K"/whl/*.whl || exit 1
    echo "offline install of $(ls "$K"/whl/*.whl | wc -l) wheels: $(since "$t0") s"
    mkdir -p "$K/build"
    for s in "$K"/sdists/*.tar.gz; do tar -C "$K/build" -xzf "$s"; done
    cp -r "$K/build/causal_conv1d-1.6.1" "$K/build/causal_conv1d-1.6.1-sm80"
    patch_gencodes "$K/build/mamba_ssm-2.3.1/setup.py" "$ARCH"
    patch_gencodes "$K/build/causal_conv1d-1.6.1/setup.py" "$ARCH"
    patch_gencodes "$K/build/causal_conv1d-1.6.1-sm80/setup.py" 80
    # the three sm_90 builds and the sm_80 negative build run at once, in their own session (they outlive the call)
    export -f build now since; export K
    setsid nohup bash -c "build mamba-ssm $K/build/mamba_ssm-2.3.1 TORCH_CUDA_ARCH_LIST=9.0 MAMBA_FORCE_BUILD=TRUE" > /dev/null 2>&1 &
    setsid nohup bash -c "build causal-conv1d $K/build/causal_conv1d-1.6.1 TORCH_CUDA_ARCH_LIST=9.0 CAUSAL_CONV1D_FORCE_BUILD=TRUE" > /dev/null 2>&1 &
    # TE's torch binding is C++ only (no .cu) and includes cudnn.h: take it from the nvidia-cudnn wheel
    CUDNN_INC=$(dirname "$(python3 -c "import site; print(' '.join(site.getsitepackages()))" | xargs -n1 -I{} find {} -maxdepth 5 -name cudnn.h -path '*nvidia*' 2>/dev/null | head -1)")
    echo "cudnn.h in $CUDNN_INC"
    setsid nohup bash -c "build transformer-engine-torch $K/build/transformer_engine_torch-2.14.1 NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_CUDA_ARCHS=90 TORCH_CUDA_ARCH_LIST=9.0 CPLUS_INCLUDE_PATH=$CUDNN_INC" > /dev/null 2>&1 &
    setsid nohup bash -c "build causal-conv1d-sm80 $K/build/causal_conv1d-1.6.1-sm80 TORCH_CUDA_ARCH_LIST=8.0 CAUSAL_CONV1D_FORCE_BUILD=TRUE" > /dev/null 2>&1 &
    sleep 20; status ;;
  poll)
    status ;;
  wait)  # wait (up to $2 s) for the builds that were started
    t0=$(now); n=${2:-500}
    while [ "$(wc -l < "$K/logs/builds.txt" 2>/dev/null || echo 0)" -lt "${3:-4}" ] && [ "$(python3 -c "print(int($(now) - $t0))")" -lt "$n" ]; do sleep 10; done
    status ;;
  te)  # reassemble the TE core wheel, check its sha256, install it and everything built
    t0=$(now)
    mkdir -p "$K/whl-te" && cat "$K"/parts/te-core.part-* > "$K/whl-te/$(cat "$K/te-core.name")"
    (cd "$K/whl-te" && sha256sum -c "$K/te-core.sha256") || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$K/site" "$K"/whl-te/*.whl || exit 1
    echo "TE core reassembled, verified, installed: $(since "$t0") s"
    status ;;
  install-built)  # the sm_90 wheels built here (or carried back in parts) into the site
    for p in "$K"/parts/*.whl.part-aa; do [ -f "$p" ] || continue; b=$(basename "$p" .part-aa); cat "$K/parts/$b".part-* > "$K/wheels/$b"; done
    ls -la "$K"/wheels/*/*.whl "$K"/wheels/*.whl 2>/dev/null
    # one pip call into a fresh directory: `pip install --target --upgrade` replaces a top-level directory
    # (transformer_engine/) that an earlier call installed instead of merging into it
    t0=$(now); rm -rf "$K/site.new"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$K/site.new" "$K"/whl/*.whl \
      "$K"/whl-te/*.whl $(ls "$K"/wheels/mamba-ssm/*.whl "$K"/wheels/causal-conv1d/*.whl "$K"/wheels/transformer-engine-torch/*.whl "$K"/wheels/*.whl 2>/dev/null) || exit 1
    rm -rf "$K/site" && mv "$K/site.new" "$K/site"
    echo "offline install of $(ls "$K"/site | grep -c dist-info) distributions: $(since "$t0") s"
    for so in $(find "$K/site" -maxdepth 3 -name "*.so"); do
      e=$(cuobjdump --list-elf "$so" 2>/dev/null | grep -oE 'sm_[0-9]+a?' | sort -u | tr '\n' ' ')
      p=$(cuobjdump --list-ptx "$so" 2>/dev/null | grep -oE 'sm_[0-9]+a?' | sort -u | tr '\n' ' ')
      [ -n "$e$p" ] && echo "cuobjdump: ${so#$K/site/}: elf $e ptx $p"
    done
    (cd "$K/src" && python3 -c "
from envbuilder.certify.gpu import installed_kernel_archs
for d, sos in installed_kernel_archs().items():
    for so, a in sos.items(): print('fatbin reader:', d, so, sorted(a['sass']), 'ptx', sorted(a['ptx']))") ;;
  certify)  # level 1 against the lock, every group but drift (the device image is not the lock's stage 1)
    certify l1 560 --lock "$K/lock" --level 1 --only imports,torch-build,driver,arch,kernels,gemm,pretrain,mcore
    certify drift 120 --lock "$K/lock" --level 0 --only drift
    tar -C "$K" -czf "$OUT/certify-l1.tgz" cert-l1 logs-l1 cert-drift logs/certify-l1.txt 2>/dev/null ;;
  level2)
    certify l2 500 --lock "$K/lock" --level 2 --only imports,torch-build,driver,arch,kernels,gemm,nccl,parallel
    tar -C "$K" -czf "$OUT/certify-l2.tgz" cert-l2 logs-l2 logs/certify-l2.txt 2>/dev/null ;;
  neg)  # negative cases: an extension built against torch 2.6.0 (old C++ ABI); causal-conv1d built for sm_80 only
    mkdir -p "$K/t26" && tar -C "$K/t26" -xzf "$K/neg/torch26-include.tgz"
    python3 "$K/src/bench/negative/make_probe_wheel.py" "$K/neg/wheels" --torch-include "$K/t26/torch/include" \
      --cxx11-abi 0 --gencode "$ARCH" 2>&1 | tail -3
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$K/site-abi" "$K"/neg/wheels/*.whl
    python3 -c "import torch; import envbuilder_abi_probe" 2>&1 | tail -1
    (cd "$K/src" && python3 -c "
import json, sys
from pathlib import Path
from envbuilder.certify.expectations import expectations_from_lock
from envbuilder.paths import matrices_dir
from uv import find_uv_bin
e = expectations_from_lock(Path('$K/lock'), uv_bin=str(find_uv_bin()), matrices=matrices_dir(), artifact={'kind': 'in-place'})
e['packages']['envbuilder-abi-probe'] = '0.1'   # the probe wheel stands for a locked kernel package
Path('$K/neg/expect-abi.json').write_text(json.dumps(e, indent=1))")
    PYTHONPATH=$K/site-abi:$PYTHONPATH certify neg-abi 200 --expect "$K/neg/expect-abi.json" --level 1 --only imports
    mkdir -p "$K/site-sm80"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$K/site-sm80" "$K"/wheels/causal-conv1d-sm80/*.whl
    PYTHONPATH=$K/site-sm80:$PYTHONPATH certify neg-arch 200 --lock "$K/lock" --level 1 --only arch,kernels
    tar -C "$K" -czf "$OUT/negative.tgz" cert-neg-abi cert-neg-arch logs/certify-neg-*.txt 2>/dev/null ;;
  out)  # built wheels back to the host in parts of at most 15 MiB, plus the build logs
    mkdir -p "$OUT/w"
    for w in "$K"/wheels/*/*.whl; do
      case $w in *sm80*) continue;; esac
      [ -f "$w.sent" ] && continue
      split -b 15m "$w" "$OUT/w/$(basename "$w").part-" && touch "$w.sent"
    done
    cp "$K"/logs/ratio-*.json "$OUT/" 2>/dev/null
    ls -la "$OUT/w"
    tar -C "$K" -czf "$OUT/build-logs.tgz" logs ;;
  ratio)  # sm_90 vs the default nine gencodes, per file (bench/gencode_ratio.py), in the background
    # niced: the CPU seconds are the measure, and the sm_90 causal-conv1d build keeps its core
    C=$K/build/causal_conv1d-1.6.1; M=$K/build/mamba_ssm-2.3.1/csrc/selective_scan
    setsid nohup nice -n 19 python3 "$K/src/bench/gencode_ratio.py" "$C" "$C"/csrc/causal_conv1d_update.cu \
      > "$K/logs/ratio-causal-conv1d.json" 2> "$K/logs/ratio-causal-conv1d.err" &
    setsid nohup nice -n 19 python3 "$K/src/bench/gencode_ratio.py" "$K/build/mamba_ssm-2.3.1" "$M"/selective_scan_fwd_fp32.cu \
      > "$K/logs/ratio-mamba-ssm.json" 2> "$K/logs/ratio-mamba-ssm.err" &
    echo "ratio started" ;;
  flash)  # flash-attn sm_90-only build in the background; `poll` samples its ninja progress
    mkdir -p "$K/build" && tar -C "$K/build" -xzf "$K"/sdists/flash_attn-*.tar.gz
    export -f build now since; export K
    setsid nohup bash -c "build flash-attn $(ls -d "$K"/build/flash_attn-*/) FLASH_ATTN_CUDA_ARCHS=90 FLASH_ATTENTION_FORCE_BUILD=TRUE TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=${FLASH_JOBS:-16}" > /dev/null 2>&1 &
    setsid nohup bash -c "while sleep 15; do echo \"\$(date +%s) \$(grep -oE '\\[[0-9]+/[0-9]+\\]' $K/logs/build-flash-attn.log | tail -1) mem_used=\$(free -m | awk '/Mem/{print \$3}')M\"; done" > "$K/logs/flash-progress.txt" 2>&1 &
    sleep 5; status ;;
  *) echo "unknown step $STEP"; exit 2 ;;
esac
