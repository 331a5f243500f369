#!/usr/bin/env bash
# Makes (once) and prints the cached Debian sid root filesystem that carries Apptainer.
#
# Debian 12 has no apptainer package; sid has (1.4.x). No image registry is reachable, so the
# rootfs is bootstrapped with mmdebstrap and kept under the cache dir:
#   $CACHE/apptainer-sid-KEY/rootfs.tar   what mmdebstrap wrote (kept: re-extracting is ~5 s)
#   $CACHE/apptainer-sid-KEY/root/        the extracted tree that scripts/bin/apptainer enters
#   $CACHE/apptainer-sid-KEY/stamp        the inputs below
# KEY hashes the inputs (suite, packages, user): checkouts with different inputs keep separate
# rootfs trees instead of rebuilding each other's; a lock file serialises concurrent builds.
# CACHE is $ENVBUILDER_CACHE_DIR, else ${XDG_CACHE_HOME:-~/.cache}/envbuilder.
# Usage: scripts/apptainer-rootfs.sh [--force]    (prints the root dir on stdout)
# The rootfs has an unprivileged user `runner` (uid/gid 1000, subordinate ids for --fakeroot):
# scripts/bin/apptainer runs apptainer as that user, in user-namespace mode as on HPC sites
# without setuid. Needs root (mmdebstrap --mode=root, and entering needs mount namespaces).
set -euo pipefail

CACHE="${ENVBUILDER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/envbuilder}"
SUITE=sid
MIRROR="${ENVBUILDER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="apptainer,squashfuse,fuse3,squashfs-tools,uidmap,mount,util-linux,ca-certificates,python3"
RUNNER_UID=1000
# fixed so the tree's timestamps do not change between bootstraps (2025-05-17)
SOURCE_DATE_EPOCH=1747440000
STAMP="suite=$SUITE packages=$PACKAGES runner=$RUNNER_UID v=1"
DIR="$CACHE/apptainer-sid-$(printf '%s' "$STAMP" | sha256sum | cut -c1-12)"

force=0
[ "${1:-}" = "--force" ] && force=1

if [ "$force" = 0 ] && [ -f "$DIR/stamp" ] && [ "$(cat "$DIR/stamp")" = "$STAMP" ] \
   && [ -x "$DIR/root/usr/bin/apptainer" ]; then
  echo "$DIR/root"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "apptainer-rootfs: needs root (mmdebstrap --mode=root)" >&2; exit 1; }
command -v mmdebstrap >/dev/null || { echo "apptainer-rootfs: mmdebstrap missing; run scripts/setup-host.sh" >&2; exit 1; }

mkdir -p "$DIR"
exec 9>"$CACHE/apptainer-sid.lock"
flock 9
# another process may have finished it while this one waited for the lock
if [ "$force" = 0 ] && [ -f "$DIR/stamp" ] && [ -x "$DIR/root/usr/bin/apptainer" ]; then
  echo "$DIR/root"
  exit 0
fi
tmp_tar="$DIR/.rootfs.$$.tar"  # mmdebstrap picks its output format by the suffix
tmp_root="$DIR/.root.$$"
trap 'rm -rf "$tmp_tar" "$tmp_root"' EXIT
if [ "$force" = 1 ] || [ ! -f "$DIR/rootfs.tar" ] || [ "$(cat "$DIR/stamp" 2>/dev/null)" != "$STAMP" ]; then
  echo "apptainer-rootfs: bootstrapping Debian $SUITE with $PACKAGES (about a minute)" >&2
  # sid's Release file can be past its Valid-Until behind a caching proxy; the signature is still checked
  SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH mmdebstrap --mode=root --variant=apt --quiet \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="echo runner:x:$RUNNER_UID:$RUNNER_UID::/home/runner:/bin/bash >> \"\$1/etc/passwd\"" \
    --customize-hook="echo runner:x:$RUNNER_UID: >> \"\$1/etc/group\"" \
    --customize-hook="install -d -o $RUNNER_UID -g $RUNNER_UID -m 0755 \"\$1/home/runner\"" \
    --customize-hook='echo "runner:100000:65536" > "$1/etc/subuid"; echo "runner:100000:65536" > "$1/etc/subgid"' \
    --customize-hook='mkdir -p "$1/work" "$1/opt" "$1/srv"' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
    "$SUITE" "$tmp_tar" "$MIRROR"
  mv "$tmp_tar" "$DIR/rootfs.tar"
fi
rm -rf "$DIR/root"
mkdir -p "$tmp_root"
tar -C "$tmp_root" -xf "$DIR/rootfs.tar"
mv "$tmp_root" "$DIR/root"
echo "$STAMP" > "$DIR/stamp"
echo "apptainer-rootfs: ready in $DIR/root" >&2
echo "$DIR/root"
