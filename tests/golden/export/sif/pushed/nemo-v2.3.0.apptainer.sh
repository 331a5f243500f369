#!/bin/bash
# Apptainer launch for nemo-v2.3.0.sif on one node (rendered by envbuilder export); run it with
# sbatch, or with bash on a node you are on.
# --nv binds the host's NVIDIA driver libraries into the container; the image ENV comes from
# /.singularity.d/env/90-environment.sh inside the SIF.
# The training script, pretrain.py, is found from sbatch's working directory: submit from the
# directory that holds it (or pass --chdir=DIR). That directory is mounted at /workspace and the job runs there:
#   sbatch nemo-v2.3.0.sif.apptainer.sh
# The image: the exported file beside this script by default. ENVBUILDER_IMAGE names another copy (e.g. on
# shared storage) or the image pushed to a registry; sbatch passes the submitting shell's
# environment to the job:
#   ENVBUILDER_IMAGE=/shared/images/nemo-v2.3.0.sif sbatch nemo-v2.3.0.sif.apptainer.sh
#   ENVBUILDER_IMAGE=docker://registry.example.com:5000/team/nemo@sha256:5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e sbatch nemo-v2.3.0.sif.apptainer.sh
#   (apptainer pulls the pushed image by its digest)
#SBATCH --job-name=nemo-v2.3.0
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --exclusive
set -euo pipefail

IMAGE=${ENVBUILDER_IMAGE:-/shared/images/nemo-v2.3.0.sif}

apptainer exec --nv --bind "$PWD:/workspace" --pwd /workspace "$IMAGE" \
    torchrun --standalone --nproc-per-node=4 pretrain.py --config 'conf/a b.yaml'
