#!/bin/sh
# install-deps.sh: installs what castor needs to build and test on Debian 12
# (bookworm), skipping packages that are already there. Run as root or with
# sudo available. Idempotent; prints nothing when all is present.
set -eu
# clang-19 and libclang-rt-19-dev: the libFuzzer targets of tests/fuzz (.ci/run);
# graphviz: dot, for --emit=svg|png and the dot_svg test (it skips without it);
# protobuf-c and libonnx-dev: the ONNX reader (formats/onnx_read.c, C generated
# from Debian's onnx.proto); libonnx-testdata: ONNX's node tests (tests/onnx);
# dataset-fashion-mnist: the samples' training data and check_dataset_fashion_mnist
# python3-h5py and hdf5-tools: libhdf5 as the oracle of the .keras files castor
# writes (tests/keras/h5_oracle.py; never linked into castor)
# python3-numpy: the Python module (python/castor, docs/python.md) and its tests
pkgs="llvm-19-dev libzstd-dev check pkg-config cmake make gcc libc6-dev zlib1g-dev clang-19 libclang-rt-19-dev graphviz libprotobuf-c-dev protobuf-c-compiler libonnx-dev libonnx-testdata dataset-fashion-mnist python3-h5py hdf5-tools python3-numpy"
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
