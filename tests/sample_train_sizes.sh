#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# sample_train_sizes.sh BUILD_DIR SOURCE_DIR: samples/train.c on datasets of
# 63, 5 and 1 samples (below its batch of 64: 63 divided by zero and fewer
# read past the data) and of 64 and 130; each trains to a lower loss.
set -u
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# y_npy N FILE: N int32 class indices, all 0 (a .npy written by hand, v1.0 header of 128 bytes)
y_npy() {
  h="{'descr': '<i4', 'fortran_order': False, 'shape': ($1,), }"
  pad=$((128 - 10 - ${#h} - 1))
  { printf '\223NUMPY\001\000\166\000%s' "$h"; printf "%${pad}s\n" ""; head -c $(($1 * 4)) /dev/zero; } >"$2"
}
fail=0
for n in 1 5 63 64 130; do
  "$build/tests/aot_make_npy" "$tmp/x$n.npy" f32 $n $n 784 || exit 1
  y_npy $n "$tmp/y$n.npy"
  if ! "$build/samples/train" "$src/samples/mnist_mlp_small.cast" "$tmp/x$n.npy" "$tmp/y$n.npy" >"$tmp/out" 2>&1; then
    echo "FAIL: samples/train.c with $n samples:"; cat "$tmp/out"; fail=1
  fi
done
[ $fail = 0 ] && echo "samples/train.c: 1, 5, 63, 64 and 130 samples train"
exit $fail
