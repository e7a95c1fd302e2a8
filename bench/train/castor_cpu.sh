#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/train/castor_cpu.sh: castor train's CPU time per training step,
# which its --history does not report: the process's user+sys CPU of
# `castor train` with --epochs E2 minus that with --epochs E1 (the same
# compile, data loading and first epochs), over the (E2 - E1) x steps in
# between. The validation set is a separate file of 128 images, so that
# validation adds one batch's forward pass per epoch. From the repository root:
#
#   bench/train/castor_cpu.sh [BUILD_DIR]          # default build
#
# Environment: MODELS ["fashion_cnn fashion_vit"], POLICIES ["float32
# mixed_bfloat16"], TRAIN_SAMPLES [6000: the first 6000 training images,
# i.e. the training part of run.sh's TRAIN_SAMPLES=7500], E1 [1], E2 [3],
# SEED [0], THREADS [2], PY [python3]. Prints one line per (model, policy).
set -eu
BUILD=${1:-build}
MODELS=${MODELS:-fashion_cnn fashion_vit}
POLICIES=${POLICIES:-float32 mixed_bfloat16}
TRAIN_SAMPLES=${TRAIN_SAMPLES:-6000}
E1=${E1:-1} E2=${E2:-3} SEED=${SEED:-0} THREADS=${THREADS:-2} PY=${PY:-python3}
[ "$E2" -gt "$E1" ] || { echo "E2 must be greater than E1" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PIN=""
command -v taskset >/dev/null && PIN="taskset -c 0-$((THREADS - 1))"
"$PY" bench/train/subset.py --train-samples "$TRAIN_SAMPLES" --test-samples 128 --out "$TMP"
steps=$(( (TRAIN_SAMPLES + 127) / 128 ))
for m in $MODELS; do
  "$PY" bench/train/init_weights.py --model "$m" --seed "$SEED" --out "$TMP/init.safetensors"
  for p in $POLICIES; do
    for e in "$E1" "$E2"; do
      /usr/bin/time -f "%U %S %e" -o "$TMP/t$e" $PIN "$BUILD/castor" train "samples/$m.cast" \
        --weights "$TMP/init.safetensors" --x "$TMP/x_train.npy" --y "$TMP/y_train.npy" \
        --x-val "$TMP/x_test.npy" --y-val "$TMP/y_test.npy" --policy "$p" --epochs "$e" \
        --batch-size 128 --optimizer adam --seed "$SEED" --threads "$THREADS" >"$TMP/log" 2>&1 ||
        { echo "castor train failed:" >&2; tail -3 "$TMP/log" >&2; exit 1; }
    done
    "$PY" - "$TMP/t$E1" "$TMP/t$E2" "$m" "$p" "$steps" "$E1" "$E2" <<'PY'
import sys
a = [float(v) for v in open(sys.argv[1]).read().split()[-3:]]
b = [float(v) for v in open(sys.argv[2]).read().split()[-3:]]
steps, e1, e2 = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
n = steps * (e2 - e1)
print(f"{sys.argv[3]} {sys.argv[4]}: CPU {(b[0] + b[1] - a[0] - a[1]) / n * 1e3:.1f} ms/step, "
      f"wall {(b[2] - a[2]) / n * 1e3:.1f} ms/step over {n} steps "
      f"(epochs {e1}: {a[0] + a[1]:.2f} s CPU, {a[2]:.2f} s wall; epochs {e2}: {b[0] + b[1]:.2f} s CPU, {b[2]:.2f} s wall)")
PY
  done
done
