#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/cnn/bf16_vs_f32.sh BUILD DIR "MODELS" "BATCHES" "THREADS" ROUNDS REPEAT
# castor only: each torchvision model of DIR (exported by torchvision_peers.py)
# under float32 then mixed_bfloat16, interleaved round by round; prints for
# each the median wall ms of `castor run --repeat REPEAT` and its CPU ms a run
# (the process's CPU time over the runs, every thread: at one thread the
# number a loaded machine disturbs least), and the ratios mixed_bfloat16 /
# float32 of the same round.
# Results: bench/results/cnn-bf16-amx-2026-11-29.md, cnn-bf16-2026-11-29-s12.md,
# cnn-bf16-2026-11-30.md.
set -eu
C=${1:-build-rel}/castor
D=${2:-/tmp/castor-cnn}
MODELS=${3:-"resnet18 resnet50 mobilenet_v2 mobilenet_v3_small mobilenet_v3_large efficientnet_b0 squeezenet1_1 shufflenet_v2_x0_5 regnet_y_400mf resnext50_32x4d googlenet densenet121"}
BATCHES=${4:-"1 16"}
THREADS=${5:-"1 2"}
ROUNDS=${6:-3}
REPEAT=${7:-10}
t() {
  $C run "$1" --batch "$2" --threads "$3" --policy "$4" --repeat "$REPEAT" 2>&1 |
    sed -n -e 's/^time: median \([0-9.]*\) ms.*/\1/p' -e 's/^cpu: mean \([0-9.]*\) ms.*/\1/p' | tr '\n' ' '
}
for round in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    for b in $BATCHES; do
      for th in $THREADS; do
        f=$D/$m.onnx
        a=$(t "$f" "$b" "$th" float32)
        x=$(t "$f" "$b" "$th" mixed_bfloat16)
        echo "$a $x" | awk -v r="$round" -v m="$m" -v b="$b" -v th="$th" '{
          printf "round %s %s b%s t%s wall f32 %s bf16 %s ms ratio %.2f | cpu f32 %s bf16 %s ms ratio %.2f\n",
                 r, m, b, th, $1, $3, ($1 > 0 ? $3 / $1 : 0), $2, $4, ($2 > 0 ? $4 / $2 : 0) }'
      done
    done
  done
done
