#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/cpu/amx_host.sh [BUILD]: on an AMX host (Sapphire Rapids), three
# interleaved rounds of each model at one thread: float32, mixed_bfloat16 on
# the FMA family (CASTOR_CPU=sapphirerapids: bf16 widened to f32) and
# mixed_bfloat16 on the host's own family (amx-bf16: tiles); castor run's
# median of 20 runs each, and the ratios of the same round.
# Results: bench/results/amx-host-2026-11-29.md.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'model d\npolicy float32\nx = input(shape=[1024])\ny = dense(x, units=1024, name=d)\noutput y\n' >"$tmp/d1024.cast"
C=${1:-build-rel}/castor
for round in 1 2 3; do
  for m in $tmp/d1024.cast:1024 samples/mnist_mlp.cast:256 samples/fashion_vit.cast:64 samples/fashion_cnn.cast:64; do
    f=${m%%:*}; b=${m##*:}
    t32=$($C run $f --batch $b --policy float32 --threads 1 --repeat 20 2>&1 | sed -n 's/^time: median \([0-9.]*\) ms.*/\1/p')
    tf=$(CASTOR_CPU=sapphirerapids $C run $f --batch $b --policy mixed_bfloat16 --threads 1 --repeat 20 2>&1 | sed -n 's/^time: median \([0-9.]*\) ms.*/\1/p')
    ta=$($C run $f --batch $b --policy mixed_bfloat16 --threads 1 --repeat 20 2>&1 | sed -n 's/^time: median \([0-9.]*\) ms.*/\1/p')
    awk -v r="$round" -v m="$(basename "$f") b$b" -v a="$t32" -v f="$tf" -v x="$ta" 'BEGIN {
      printf "round %s %s f32 %s ms | bf16 FMA family %s ms | bf16 AMX %s ms | AMX/f32 %.2f | AMX/FMA-bf16 %.2f\n", r, m, a, f, x, x / a, x / f }'
  done
done
