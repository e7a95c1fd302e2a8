#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# onnx_build.sh BUILD_DIR MODEL...: `castor build` of each exported ONNX
# model (tests/onnx/models/NAME.T.onnx) into an executable, under float32
# and mixed_bfloat16: the executable's outputs on NAME.x.npy are
# bit-identical to `castor run`'s (which check_onnx compares with ONNX
# Runtime's), at 1 and 2 threads.
set -eu
bin=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
castor=$bin/castor
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-onnx-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
for m in "$@"; do
  model=$here/models/$m.onnx
  x=$here/models/${m%%.*}.x.npy
  for policy in float32 mixed_bfloat16; do
    exe=$tmp/$(echo "$m" | tr . _)_$policy
    if ! "$castor" build "$model" --policy $policy -o "$exe" >"$tmp/build.txt" 2>&1; then
      fail "$m $policy: castor build: $(cat "$tmp/build.txt")"
      continue
    fi
    "$castor" run "$model" --policy $policy --input "$x" --output "$tmp/jit.npy" >"$tmp/jit.txt" ||
      { fail "$m $policy: castor run"; continue; }
    for t in 1 2; do
      "$exe" --input "$x" --output "$tmp/aot.npy" --threads $t >"$tmp/aot.txt" || { fail "$m $policy: $exe"; continue; }
      cmp "$tmp/jit.npy" "$tmp/aot.npy" || fail "$m $policy, $t threads: outputs differ from castor run's"
      cmp "$tmp/jit.txt" "$tmp/aot.txt" || fail "$m $policy, $t threads: summaries differ"
    done
  done
done
[ $fails = 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "onnx_build: $# models built and matched castor run"
