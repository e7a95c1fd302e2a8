#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# aot_obj.sh BUILD_DIR SOURCE_DIR
#
# The object-file sample: `castor build --emit=obj`, samples/aot_host.c
# compiled and linked with the object and the static runtime by the link
# line the README and the generated header give, then run; its output is
# bit-identical to `castor run` on the same input.
set -eu
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-aot-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp"

"$bin/castor" build "$src/samples/mnist_mlp_small.cast" --emit=obj -o mnist_mlp_small.o
grep -q -- "-L$bin -lcastor_runtime -lcastor_util" mnist_mlp_small.h ||
  { echo "FAIL: the header's link line does not name $bin" >&2; exit 1; }
${CC:-cc} -std=c11 -Wall -Wextra -Werror -I. "$src/samples/aot_host.c" mnist_mlp_small.o \
  -L"$bin" -lcastor_runtime -lcastor_util -lm -lpthread ${CASTOR_TEST_LDFLAGS:-} -o aot_host
if ldd ./aot_host | grep -i llvm; then echo "FAIL: aot_host links LLVM" >&2; exit 1; fi
./aot_host 6 in.npy out.npy
"$bin/castor" run "$src/samples/mnist_mlp_small.cast" --input in.npy --output jit.npy >/dev/null
cmp out.npy jit.npy || { echo "FAIL: aot_host and castor run differ" >&2; exit 1; }
echo "aot_obj: ok"
