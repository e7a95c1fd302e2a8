#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install-deps.sh [--test]: installs the Debian 12 (bookworm) packages castor
# needs, skipping those already there. Run as root or with sudo available.
# Idempotent; prints nothing when all is present.
#
# Without a flag: what building castor (with its test suite's Check
# framework, which the default build compiles) and running it need:
# LLVM 19, zstd, zlib, libpng (castor run --input IMAGE.png), protobuf-c and libonnx-dev (the ONNX reader's C is
# generated from Debian's onnx.proto), Check, and graphviz (dot, for
# `castor dump --emit=svg|png` and `castor check --graph`).
#
# --test: also what the whole test suite and CI (.ci/run) use:
# clang-19 and libclang-rt-19-dev (the libFuzzer targets of tests/fuzz);
# libonnx-testdata (ONNX's node tests, tests/onnx); dataset-fashion-mnist
# (the samples' training data and check_dataset_fashion_mnist);
# python3-h5py and hdf5-tools (libhdf5 as the oracle of the .keras files
# castor writes, tests/keras/h5_oracle.py; never linked into castor).
# tests/emulated-cpu.sh installs qemu-user itself when it runs.
set -eu
pkgs="llvm-19-dev libzstd-dev check pkg-config cmake make gcc libc6-dev zlib1g-dev libpng-dev graphviz libprotobuf-c-dev protobuf-c-compiler libonnx-dev python3-numpy"
test_pkgs="clang-19 libclang-rt-19-dev libonnx-testdata dataset-fashion-mnist python3-h5py hdf5-tools"
case "${1:-}" in
  "") ;;
  --test) pkgs="$pkgs $test_pkgs" ;;
  -h|--help) sed -n '3,/^set -eu/p' "$0" | sed -e '/^set -eu/d' -e 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-deps: unknown option '$1' (install-deps.sh [--test])" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing:$missing" >&2
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
