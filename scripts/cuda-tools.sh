#!/usr/bin/env bash
# NVIDIA's CUDA compiler and cuobjdump from their PyPI wheels, for the GPU-less arch tests:
# nvcc compiles a small kernel for a chosen arch list and cuobjdump reads the archs back.
# Installs into DEST (default build/cuda-tools/<version>) with uv; a second run is a no-op.
# The toolkit root is DEST/nvidia/cu13 (bin/nvcc, bin/cuobjdump, include/, nvvm/).
set -euo pipefail
VERSION=13.2.86          # nvcc, crt, nvvm and cuobjdump share it (https://pypi.org/project/nvidia-cuda-nvcc/13.2.86/)
RUNTIME_VERSION=13.2.75  # cuda_runtime.h (https://pypi.org/project/nvidia-cuda-runtime/13.2.75/)
DEST=${1:-build/cuda-tools/$VERSION}
UV=${UV:-$(dirname "$0")/../.venv/bin/uv}
if [ -x "$DEST/nvidia/cu13/bin/nvcc" ] && [ -x "$DEST/nvidia/cu13/bin/cuobjdump" ]; then
  echo "$DEST/nvidia/cu13"; exit 0
fi
tmp="$DEST.tmp.$$"
rm -rf "$tmp"
"$UV" pip install -q --target "$tmp" \
  "nvidia-cuda-nvcc==$VERSION" "nvidia-cuda-crt==$VERSION" "nvidia-nvvm==$VERSION" \
  "nvidia-cuda-cuobjdump==$VERSION" "nvidia-cuda-runtime==$RUNTIME_VERSION" >&2
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$tmp" "$DEST"
echo "$DEST/nvidia/cu13"
