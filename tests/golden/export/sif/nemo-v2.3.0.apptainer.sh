#!/bin/bash
# Apptainer launch for nemo-v2.3.0.sif on one node (rendered by envbuilder export).
# --nv binds the host's NVIDIA driver libraries into the container; the image ENV comes from
# /.singularity.d/env/90-environment.sh inside the SIF.
#SBATCH --job-name=nemo-v2.3.0
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
set -euo pipefail

IMAGE=/shared/images/nemo-v2.3.0.sif

apptainer exec --nv --bind "$PWD:/workspace" --pwd /workspace "$IMAGE" \
    torchrun --standalone --nproc-per-node=8 train.py
