#!/bin/sh
# Build the two Go programs of bench_vs_go.py against a containerd source tree whose
# vendor/ holds github.com/containerd/nri and its dependencies (containerd v2.3.x; the
# driver also builds against v1.7.x), offline. Only this directory's own sources are
# compiled, in a scratch module that borrows the tree's go.mod, go.sum and vendor/
# (linked, never changed).
#   bench/go/build.sh CONTAINERD_SRC OUT_DIR
set -eu
src=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
cp "$src/go.mod" "$src/go.sum" "$tree/"
ln -s "$src/vendor" "$tree/vendor"
mkdir -p "$tree/cmd/nri-bench-driver" "$tree/cmd/nri-bench-goplugin"
cp "$here/driver/main.go" "$tree/cmd/nri-bench-driver/"
cp "$here/goplugin/main.go" "$tree/cmd/nri-bench-goplugin/"
cd "$tree"
export GOTOOLCHAIN=local GOFLAGS=-mod=vendor GOPROXY=off
go vet ./cmd/nri-bench-driver ./cmd/nri-bench-goplugin
go build -o "$out/nri-bench-driver" ./cmd/nri-bench-driver
go build -o "$out/nri-bench-goplugin" ./cmd/nri-bench-goplugin
