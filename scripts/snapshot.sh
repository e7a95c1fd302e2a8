#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# snapshot.sh BUILD_DIR OUT_DIR: writes every result a "changes no result"
# refactoring must keep identical into OUT_DIR: for both samples under all
# five policies, the CPU JIT's outputs (.npy), the emulated cuda target's
# outputs (the small sample), the AOT executable's outputs, the IR dump, the
# cast report, the training-step IR, the host assembly and the PTX; and the weights that
# `castor train` saves for each optimizer and policy. Compare two snapshots
# with `diff -r A B` (docs/architecture.md, "Refactoring without changing
# results"). Needs a build with its tests (tests/aot_make_npy, the PTX
# emulator).
set -eu
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
castor=$build/castor
mk=$build/tests/aot_make_npy
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-snapshot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
policies="float32 float16 bfloat16 mixed_float16 mixed_bfloat16"

for model in mnist_mlp_small mnist_mlp; do
  m=$src/samples/$model.cast
  "$mk" "$tmp/x_$model.npy" f32 1 5 784 >/dev/null
  for p in $policies; do
    o=$out/$model.$p
    "$castor" dump "$m" --policy $p >"$o.ir"
    "$castor" dump "$m" --policy $p --casts >"$o.casts"
    "$castor" dump "$m" --policy $p --train --optimizer=adam >"$o.train.ir"
    "$castor" build "$m" --policy $p --emit=asm -o "$o.s" 2>/dev/null
    "$castor" dump "$m" --policy $p --emit=ptx --target=cuda >"$o.sm80.ptx"
    "$castor" dump "$m" --policy $p --emit=ptx --target=cuda --sm=sm_90 >"$o.sm90.ptx"
    "$castor" run "$m" --policy $p --batch 3 --output "$o.jit-random.npy" >"$o.jit-random.txt"
    "$castor" run "$m" --policy $p --input "$tmp/x_$model.npy" --output "$o.jit.npy" >/dev/null
    "$castor" build "$m" --policy $p -o "$tmp/exe" >/dev/null
    "$tmp/exe" --input "$tmp/x_$model.npy" --output "$o.aot.npy" >/dev/null
    if [ $model = mnist_mlp_small ]; then
      CASTOR_CUDA_EMULATE=1 "$castor" run "$m" --policy $p --target=cuda --input "$tmp/x_$model.npy" \
        --output "$o.cuda-emu.npy" >/dev/null
    fi
  done
done

# training: a few steps of each optimizer under each policy, saved weights
"$mk" "$tmp/tx.npy" f32 2 64 784 >/dev/null
"$mk" "$tmp/ty.npy" f32 3 64 10 >/dev/null
for opt in rmsprop adam sgd; do
  for p in $policies; do
    "$castor" train "$src/samples/mnist_mlp_small.cast" --x "$tmp/tx.npy" --y "$tmp/ty.npy" --policy $p \
      --optimizer $opt --loss mean_squared_error --batch-size 16 --epochs 2 --save "$out/train.$opt.$p.safetensors" \
      --history "$out/train.$opt.$p.csv" >/dev/null 2>&1 || echo "train $opt $p: status $?" >>"$out/train.status"
  done
done
# the histories without their timing columns (seconds, ms per step)
for f in "$out"/train.*.csv; do cut -d, -f1,2,5- "$f" >"$f.tmp" && mv "$f.tmp" "$f"; done
echo "snapshot: $(ls "$out" | wc -l) files in $out"
