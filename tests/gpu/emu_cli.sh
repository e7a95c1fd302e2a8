#!/bin/sh
# emu_cli.sh BUILD_DIR SOURCE_DIR: `castor run --target=cuda` through the PTX
# emulator (CASTOR_CUDA_EMULATE=1: the build tree's libcastor_ptxemu.so in
# place of libcuda.so.1). The small sample under every policy, as sm_80 and
# as sm_90 PTX, gives the CPU's argmax and a summary within a few units of
# the last printed digit, and so do the two CNN samples (fashion_cnn under
# float32 and mixed_float16, edge_cnn under mixed_bfloat16); a bad emulator path is one line and status 1.
set -u
build=$1 src=$2
castor=$build/castor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for policy in float32 float16 bfloat16 mixed_float16 mixed_bfloat16; do
  for sm in 80 90; do
    if ! CASTOR_CUDA_EMULATE=1 CASTOR_PTXEMU_SM=$sm "$castor" run "$src/samples/mnist_mlp_small.cast" --target=cuda \
        --policy $policy --batch 5 >"$tmp/gpu" 2>"$tmp/err"; then
      echo "FAIL: castor run --target=cuda ($policy, sm_$sm) under CASTOR_CUDA_EMULATE=1:"; cat "$tmp/err"; fail=1; continue
    fi
    "$castor" run "$src/samples/mnist_mlp_small.cast" --policy $policy --batch 5 >"$tmp/cpu" 2>/dev/null
    # predictions: f32[5,10] min A max B mean C argmax [...]
    g=$(sed 's/.*argmax/argmax/' "$tmp/gpu") c=$(sed 's/.*argmax/argmax/' "$tmp/cpu")
    [ "$g" = "$c" ] || { echo "FAIL: $policy sm_$sm: cuda '$g' vs cpu '$c'"; fail=1; }
    grep -q "^predictions: f32\[5,10\] min 0\.0" "$tmp/gpu" || { echo "FAIL: $policy sm_$sm: odd output:"; cat "$tmp/gpu"; fail=1; }
    awk -v g="$(cat "$tmp/gpu")" -v c="$(cat "$tmp/cpu")" 'BEGIN {
      split(g, a, " "); split(c, b, " ");
      for (i = 4; i <= 8; i += 2) if ((a[i] - b[i]) > 1e-5 || (b[i] - a[i]) > 1e-5) { print "FAIL: " a[i-1] " " a[i] " vs " b[i]; exit 1 } }' ||
      fail=1
  done
done
# a scalar literal in an inference graph (position_embedding's select) is
# a constant like any other: it runs on the cuda target (it was once refused
# as "training runs on the CPU")
printf 'model pe\nx = input(shape=[4, 8])\np = position_embedding(x, sequence_length=4, name=pos)\nh = add(x, p)\noutput h\n' >"$tmp/pe.cast"
for policy in float32 mixed_float16; do
  if CASTOR_CUDA_EMULATE=1 "$castor" run "$tmp/pe.cast" --target=cuda --policy $policy --batch 3 >"$tmp/gpu" 2>"$tmp/err"; then
    "$castor" run "$tmp/pe.cast" --policy $policy --batch 3 >"$tmp/cpu" 2>"$tmp/cpu_err"
    cmp -s "$tmp/gpu" "$tmp/cpu" || { echo "FAIL: position_embedding ($policy): cuda '$(cat "$tmp/gpu")' vs cpu '$(cat "$tmp/cpu")'"; fail=1; }
  else
    echo "FAIL: position_embedding on the cuda target ($policy):"; cat "$tmp/err"; fail=1
  fi
done
# convolutional networks: the CNN samples' forward pass on the cuda target
# (conv2d's implicit GEMM, max and global pooling, batch norm folded into
# the convolutions, depthwise convolutions) give the CPU's argmax and
# summary, as the small sample above (three runs: every policy of both
# samples is check_cuda_emu's, and under ASan each run takes a while)
for run in fashion_cnn:float32 fashion_cnn:mixed_float16 edge_cnn:mixed_bfloat16; do
  model=${run%%:*} policy=${run#*:}
  if ! CASTOR_CUDA_EMULATE=1 "$castor" run "$src/samples/$model.cast" --target=cuda --policy $policy --batch 4 \
      >"$tmp/gpu" 2>"$tmp/err"; then
    echo "FAIL: castor run $model --target=cuda ($policy) under CASTOR_CUDA_EMULATE=1:"; cat "$tmp/err"; fail=1; continue
  fi
  "$castor" run "$src/samples/$model.cast" --policy $policy --batch 4 >"$tmp/cpu" 2>/dev/null
  g=$(sed 's/.*argmax/argmax/' "$tmp/gpu") c=$(sed 's/.*argmax/argmax/' "$tmp/cpu")
  [ "$g" = "$c" ] || { echo "FAIL: $model $policy: cuda '$g' vs cpu '$c'"; fail=1; }
  grep -q "^probs: f32\[4,10\] min 0\.0" "$tmp/gpu" || { echo "FAIL: $model $policy: odd output:"; cat "$tmp/gpu"; fail=1; }
  awk -v g="$(cat "$tmp/gpu")" -v c="$(cat "$tmp/cpu")" 'BEGIN {
    split(g, a, " "); split(c, b, " ");
    for (i = 4; i <= 8; i += 2) if ((a[i] - b[i]) > 1e-5 || (b[i] - a[i]) > 1e-5) { print "FAIL: " a[i-1] " " a[i] " vs " b[i]; exit 1 } }' ||
    fail=1
done
if CASTOR_CUDA_EMULATE=/nonexistent/libcastor_ptxemu.so "$castor" run "$src/samples/mnist_mlp_small.cast" --target=cuda \
    >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL: a missing emulator library ran"; fail=1
fi
[ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "no PTX emulator" "$tmp/err" ||
  { echo "FAIL: a missing emulator should be one line:"; cat "$tmp/err"; fail=1; }
[ $fail -eq 0 ] && echo "emu_cli: ok"
exit $fail
