#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ptx_cli.sh BUILD_DIR SOURCE_DIR: `castor build --target=cuda --emit=ptx` on
# the seed model writes PTX that uses the tensor cores and that ptxas
# assembles for sm_90 (skipped, exit 77, without ptxas); `castor dump
# --target=cuda` shows pad8's pads and slices; `castor run --target=cuda`
# without a GPU fails with one line and status 1.
set -u
build=$1 src=$2
castor=$build/castor
ptxas=$(command -v ptxas || { [ -x /usr/local/cuda/bin/ptxas ] && echo /usr/local/cuda/bin/ptxas; })
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$castor" build "$src/samples/mnist_mlp.cast" --target=cuda --policy mixed_float16 --emit=ptx --sm=sm_90 \
  -o "$tmp/m.ptx" 2>"$tmp/err" || { echo "FAIL: castor build --emit=ptx:"; cat "$tmp/err"; fail=1; }
grep -q "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" "$tmp/m.ptx" || { echo "FAIL: no f16 mma.sync in the PTX"; fail=1; }
grep -q "^.target sm_90" "$tmp/m.ptx" || { echo "FAIL: the PTX does not target sm_90"; fail=1; }
"$castor" dump "$src/samples/mnist_mlp.cast" --target=cuda --policy mixed_bfloat16 >"$tmp/ir" 2>/dev/null
grep -q "bf16\[N,10\] slice(" "$tmp/ir" || { echo "FAIL: castor dump --target=cuda shows no slice"; fail=1; }
if ! "$castor" run "$src/samples/mnist_mlp_small.cast" --target=cuda >"$tmp/out" 2>"$tmp/err"; then
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || { echo "FAIL: a failed cuda run should print one line:"; cat "$tmp/err"; fail=1; }
fi
[ $fail -eq 0 ] || exit 1
if [ -z "$ptxas" ]; then echo "ptx_cli: skipped the ptxas check: no ptxas"; exit 77; fi
"$ptxas" -arch=sm_90 "$tmp/m.ptx" -o /dev/null || { echo "FAIL: ptxas -arch=sm_90 rejects castor's PTX"; exit 1; }
echo "ptx_cli: ok"
