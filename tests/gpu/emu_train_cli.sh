#!/bin/sh
# emu_train_cli.sh BUILD_DIR SOURCE_DIR: `castor train --target=cuda` through the
# PTX emulator (CASTOR_CUDA_EMULATE=1).
#   1. fashion_cnn under mixed_float16 (4 samples, batch 2) trains, logs the
#      loss scale and the skipped steps (stdout and FILE.loss_scale.csv), and
#      saves weights that `castor evaluate` reads on the cpu and on the cuda
#      target, to the same loss;
#   2. no CUDA driver: one error line, status 1, and the file --save names is
#      left as it was;
#   3. device memory running out (the emulator's CASTOR_PTXEMU_FAIL_ALLOC=N, N =
#      1, 2, ... until training succeeds): every failure is one
#      CUDA_ERROR_OUT_OF_MEMORY error and status 1, at least one of them in the
#      fit loop (after the data loaded), and the --save file is intact.
set -u
build=$1 src=$2
castor=$build/castor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$build/tests/aot_make_npy" "$tmp/x.npy" f32 5 4 28 28 1 || exit 1
"$build/tests/aot_make_npy" "$tmp/x784.npy" f32 6 8 784 || exit 1
# labels as IDX (ubyte, one dimension of 4 / 8): classes 3 1 4 1 5 9 2 6
printf '\000\000\010\001\000\000\000\004\003\001\004\001' >"$tmp/y4-idx1-ubyte"
printf '\000\000\010\001\000\000\000\010\003\001\004\001\005\011\002\006' >"$tmp/y8-idx1-ubyte"

# 1. train, log, save, evaluate
if ! CASTOR_CUDA_EMULATE=1 "$castor" train "$src/samples/fashion_cnn.cast" --target=cuda --policy mixed_float16 \
    --x "$tmp/x.npy" --y "$tmp/y4-idx1-ubyte" --batch-size 2 --no-shuffle --save "$tmp/w.safetensors" \
    --history "$tmp/h.csv" >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL: castor train --target=cuda:"; cat "$tmp/err"; fail=1
fi
grep -q "^Epoch 1/1 - .* - loss: [0-9.]* - accuracy: [0-9.]* - loss_scale: 32768 - skipped: 0$" "$tmp/out" ||
  { echo "FAIL: the epoch line has no loss scale and skips:"; cat "$tmp/out"; fail=1; }
[ "$(cat "$tmp/h.loss_scale.csv" 2>/dev/null)" = "step,epoch,loss_scale,steps_skipped
1,1,32768,0
2,1,32768,0" ] || { echo "FAIL: h.loss_scale.csv:"; cat "$tmp/h.loss_scale.csv"; fail=1; }
cpu=$("$castor" evaluate "$src/samples/fashion_cnn.cast" --policy mixed_float16 --x "$tmp/x.npy" \
  --y "$tmp/y4-idx1-ubyte" --weights "$tmp/w.safetensors" 2>"$tmp/err") || { echo "FAIL: cpu evaluate:"; cat "$tmp/err"; fail=1; }
gpu=$(CASTOR_CUDA_EMULATE=1 "$castor" evaluate "$src/samples/fashion_cnn.cast" --target=cuda --policy mixed_float16 \
  --x "$tmp/x.npy" --y "$tmp/y4-idx1-ubyte" --weights "$tmp/w.safetensors" 2>"$tmp/err") ||
  { echo "FAIL: cuda evaluate:"; cat "$tmp/err"; fail=1; }
# loss: L - accuracy: A; the two targets agree to 3 decimals
l1=$(echo "$cpu" | sed -n 's/^loss: \([0-9.]*\) .*/\1/p') l2=$(echo "$gpu" | sed -n 's/^loss: \([0-9.]*\) .*/\1/p')
[ -n "$l1" ] && awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; exit !(d < 1e-3 && d > -1e-3) }' ||
  { echo "FAIL: evaluate: cpu '$cpu', cuda '$gpu'"; fail=1; }

# 2. no driver: one clear error, --save untouched
echo keep >"$tmp/keep.safetensors"
if CASTOR_CUDA_EMULATE="$tmp/no-such-driver.so" "$castor" train "$src/samples/mnist_mlp_small.cast" --target=cuda \
    --x "$tmp/x784.npy" --y "$tmp/y8-idx1-ubyte" --save "$tmp/keep.safetensors" >/dev/null 2>"$tmp/err"; then
  echo "FAIL: training without a driver succeeded"; fail=1
fi
grep -q "CUDA" "$tmp/err" && [ "$(grep -c . "$tmp/err")" -le 2 ] || { echo "FAIL: no driver:"; cat "$tmp/err"; fail=1; }
[ "$(cat "$tmp/keep.safetensors")" = keep ] || { echo "FAIL: --save file changed without a driver"; fail=1; }

# 3. out of device memory at every allocation in turn
n=1 in_loop=0
while [ $n -le 80 ]; do
  CASTOR_PTXEMU_FAIL_ALLOC=$n CASTOR_CUDA_EMULATE=1 "$castor" train "$src/samples/mnist_mlp_small.cast" --target=cuda \
    --x "$tmp/x784.npy" --y "$tmp/y8-idx1-ubyte" --batch-size 8 --save "$tmp/keep.safetensors" >/dev/null 2>"$tmp/err"
  st=$?
  [ $st = 0 ] && break # enough memory for all of it
  [ $st = 1 ] && grep -q "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY" "$tmp/err" ||
    { echo "FAIL: allocation $n failing: status $st:"; cat "$tmp/err"; fail=1; }
  grep -q "samples: X" "$tmp/err" && in_loop=1
  [ "$(cat "$tmp/keep.safetensors")" = keep ] || { echo "FAIL: allocation $n failing: --save file changed"; fail=1; }
  n=$((n + 1))
done
[ $n -gt 1 ] && [ $n -le 80 ] || { echo "FAIL: out of memory: training never succeeded or never failed ($n)"; fail=1; }
[ $in_loop = 1 ] || { echo "FAIL: no allocation failed in the fit loop"; fail=1; }
exit $fail
