#!/bin/bash
# Slurm + pyxis/enroot launch for nemo-v2.3.0.sqsh on one node (rendered by envbuilder export).
# The squashfs is used as is: pyxis passes it to enroot, which applies /etc/environment
# (the image ENV) and the mount/hook configuration of the site. enroot starts a login shell;
# the image's PATH survives its /etc/profile through /etc/profile.d/zz-envbuilder-path.sh.
# The training script, train.py, is found from sbatch's working directory: submit from the
# directory that holds it (or pass --chdir=DIR). That directory is mounted at /workspace and the job runs there:
#   sbatch nemo-v2.3.0.sqsh.slurm-pyxis.sh
# The image: the exported file beside this script by default. ENVBUILDER_IMAGE names another copy (e.g. on
# shared storage); sbatch passes the submitting shell's
# environment to the job:
#   ENVBUILDER_IMAGE=/shared/images/nemo-v2.3.0.sqsh sbatch nemo-v2.3.0.sqsh.slurm-pyxis.sh
#SBATCH --job-name=nemo-v2.3.0
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
set -euo pipefail

IMAGE=${ENVBUILDER_IMAGE:-/shared/images/nemo-v2.3.0.sqsh}

srun --container-image="$IMAGE" \
     --container-mounts="$PWD:/workspace" \
     --container-workdir=/workspace \
     torchrun --standalone --nproc-per-node=8 train.py
