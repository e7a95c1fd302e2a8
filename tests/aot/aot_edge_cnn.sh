#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# aot_edge_cnn.sh BUILD_DIR SOURCE_DIR
#
# samples/edge_cnn.cast as an edge-device executable (issue 23): trained
# briefly by `castor train` (so its batch norms have moving statistics of
# their own, which fold-bn folds into the convolutions), built with
# `castor build --policy float16`, it
#   - carries at most 500 KB (500,000 bytes, DCASE2020 Task 1b's budget) of
#     weights, all 16-bit: castor run --stats's weight bytes under float16
#     are half those under float32, and the object file's read-only data
#     (weights and constants) is within the budget too;
#   - gives outputs bit-identical to castor run's (the JIT) on Fashion-MNIST
#     images and on random inputs, for 1, 2 and 3 threads.
set -eu
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
castor=$bin/castor
model=$src/samples/edge_cnn.cast
data=$src/tests/golden/train/cnn
budget=500000
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-aot-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# 100 Adam steps on the 32 images of the training goldens: weights and
# moving statistics that are not the initial ones
"$castor" train "$model" --x "$data/x.npy" --y "$data/y.npy" --epochs 25 --batch-size 8 \
  --optimizer adam --learning-rate 0.01 --save w.safetensors >train.txt 2>&1 ||
  { cat train.txt >&2; echo "FAIL: castor train" >&2; exit 1; }
tail -n 1 train.txt

"$castor" build "$model" --policy float16 --weights w.safetensors -o edge_cnn 2>build.txt ||
  { cat build.txt >&2; echo "FAIL: castor build" >&2; exit 1; }
"$castor" build "$model" --policy float16 --weights w.safetensors --emit=obj -o edge_cnn.o 2>/dev/null ||
  fail "castor build --emit=obj"

# the weight bytes: under the budget, and 16-bit (half of float32's)
weight_bytes() {
  "$castor" run "$model" --policy "$1" --weights w.safetensors --batch 1 --stats 2>/dev/null |
    sed -n 's/^memory: weights \([0-9]*\) bytes.*/\1/p'
}
w16=$(weight_bytes float16)
w32=$(weight_bytes float32)
[ -n "$w16" ] && [ -n "$w32" ] || { echo "FAIL: no weight bytes in castor run --stats" >&2; exit 1; }
echo "weights: float16 $w16 bytes, float32 $w32 bytes (budget $budget)"
[ "$w16" -le "$budget" ] || fail "float16 weights are $w16 bytes, over $budget"
[ $((2 * w16)) -eq "$w32" ] || fail "float16 weights ($w16 bytes) are not half of float32's ($w32): some stay 32-bit"
# the object's read-only data holds the weights (and a few constants)
rodata=$(size -A edge_cnn.o | awk '$1 ~ /^\.rodata/ {s += $2} END {print s + 0}')
echo "edge_cnn.o: $rodata bytes of read-only data; executable: $(wc -c <edge_cnn) bytes in all"
[ "$rodata" -ge "$w16" ] || fail "the object's read-only data ($rodata bytes) cannot hold the $w16 bytes of weights"
[ "$rodata" -le "$budget" ] || fail "the object carries $rodata bytes of read-only data, over $budget"

# the executable against the JIT, bit for bit
"$castor" run "$model" --policy float16 --weights w.safetensors --input "$data/x.npy" --output jit.npy >jit.txt 2>/dev/null
grep -q "argmax" jit.txt || fail "castor run printed no summary"
for t in 1 2 3; do
  ./edge_cnn --input "$data/x.npy" --output aot.npy --threads $t >aot.txt
  cmp jit.npy aot.npy || fail "Fashion-MNIST images, $t threads: outputs differ"
  cmp jit.txt aot.txt || fail "Fashion-MNIST images, $t threads: summaries differ: $(cat jit.txt) / $(cat aot.txt)"
done
for batch in 1 5; do
  "$castor" run "$model" --policy float16 --weights w.safetensors --batch $batch --seed 9 --output jit.npy >jit.txt 2>/dev/null
  ./edge_cnn --batch $batch --seed 9 --output aot.npy >aot.txt
  cmp jit.npy aot.npy || fail "random batch $batch: outputs differ"
  cmp jit.txt aot.txt || fail "random batch $batch: summaries differ"
done
cat jit.txt

# a static batch of 8 (castor build --batch 8): its first launches run an
# image at a time, the classifier's on the whole batch (the cut is the
# program's, rt_program.image_launches, emitted with it), on 1 to 3 threads
"$castor" build "$model" --policy float16 --weights w.safetensors --batch 8 -o edge_cnn8 2>build8.txt ||
  { cat build8.txt >&2; fail "castor build --batch 8"; }
"$castor" run "$model" --policy float16 --weights w.safetensors --batch 8 --seed 5 --stats --output jit8.npy \
  >jit8.txt 2>/dev/null
grep "^by image: launches 1-[0-9]* of [0-9]* run an image at a time (8 images), the rest on the whole batch" jit8.txt ||
  fail "castor run --batch 8 --stats does not say it runs the first launches by image: $(cat jit8.txt)"
for t in 1 2 3; do
  ./edge_cnn8 --batch 8 --seed 5 --threads $t --output aot8.npy >aot8.txt || fail "edge_cnn8 on $t threads"
  cmp jit8.npy aot8.npy || fail "static batch 8, $t threads: outputs differ"
done

[ "$fails" -eq 0 ] || { echo "aot_edge_cnn: $fails failure(s)" >&2; exit 1; }
echo "aot_edge_cnn: ok"
