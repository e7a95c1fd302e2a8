#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/dump-train-step.sh CASTOR OUTDIR: the CPU training step of the
# three samples as optimized LLVM IR (castor dump --train --emit=llvm) and
# x86 assembly (llc-19 -O2 of that IR), under 10 configurations each (the four
# policies; adam + clipnorm; adamw + global_clipnorm under mixed_float16;
# sgd nesterov + clipvalue; centered rmsprop with momentum and categorical
# cross-entropy; mean squared error; from_logits under mixed_bfloat16).
# A refactor of the CPU codegen that must not change the emitted code dumps
# before and after and compares: `cmp` of every file (issue 42's check).
set -eu
castor=$1 out=$2
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
llc=$(command -v llc-19 || command -v llc)
run() {
  tag=$1
  shift
  "$castor" dump "$@" --train --emit=llvm >"$out/$tag.ll"
  "$llc" -O2 "$out/$tag.ll" -o "$out/$tag.s"
}
for s in mnist_mlp fashion_cnn fashion_vit; do
  m=$root/samples/$s.cast
  for pol in float32 mixed_float16 mixed_bfloat16 float16; do run "$s.$pol" "$m" --policy $pol; done
  run "$s.adam" "$m" --optimizer adam --clipnorm 1
  run "$s.adamw" "$m" --optimizer adamw --global-clipnorm 1 --policy mixed_float16
  run "$s.sgdm" "$m" --optimizer sgd --momentum 0.9 --nesterov --clipvalue 0.5
  run "$s.rmsc" "$m" --optimizer rmsprop --momentum 0.9 --centered --loss categorical_crossentropy
  run "$s.mse" "$m" --loss mean_squared_error
  run "$s.logits" "$m" --from-logits --policy mixed_bfloat16
done
echo "$(ls "$out" | wc -l) files in $out"
