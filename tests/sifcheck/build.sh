#!/bin/sh
# Build tests/sifcheck offline against the Debian-packaged reference library:
#   golang-github-sylabs-sif-dev (github.com/sylabs/sif/v2) and golang-github-google-uuid-dev.
# GOPATH mode: the package lives at /usr/share/gocode/src/github.com/sylabs/sif (module path .../v2),
# so a private GOPATH maps .../sif/v2 onto it with a symlink. Usage: build.sh OUTPUT_BINARY
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
gocode=${GOCODE:-/usr/share/gocode}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/github.com/sylabs/sif" "$work/src/sifcheck"
ln -s "$gocode/src/github.com/sylabs/sif" "$work/src/github.com/sylabs/sif/v2"
cp "$here/main.go" "$work/src/sifcheck/"
cd "$work/src/sifcheck"
GO111MODULE=off GOPATH="$work:$gocode" GOCACHE="$work/cache" GOFLAGS= GOPROXY=off \
  go build -o "$out" .
