#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/device.sh DIR: everything castor checks on a real NVIDIA GPU, in
# one call, on a machine that has the GPU's driver and python3 with NumPy
# (and, for the peers, PyTorch and JAX) but no LLVM: DIR holds a castor built
# with -DCASTOR_STATIC_LLVM=ON (from the repository root):
#
#   cmake -S . -B build-static -DCMAKE_BUILD_TYPE=Release -DCASTOR_BUILD_TESTS=OFF \
#     -DCASTOR_STATIC_LLVM=ON && cmake --build build-static -j2 --target castor_cli
#   (on the GPU machine) bench/gpu/device.sh build-static
#
# 1. Numerics: both samples under all five policies at batches 1, 7, 129 and
#    1000, as the device's PTX (sm_90 on Hopper) and as sm_80 PTX (the mma.sync
#    path), against castor's CPU JIT on the same inputs (the CPU is the
#    reference interpreter's match, check_e2e): normalized error
#    max|gpu - cpu| / max|cpu| under twice check_cuda's bounds (f32 1e-5,
#    f16 4e-3, bf16 3.2e-2: the two targets may round a value to opposite
#    neighbours), every output finite, and the argmax of each row the same
#    where the top two CPU values differ by more than the bound.
# 2. Speed: bench/gpu/run.sh (castor vs PyTorch eager and JAX/XLA).
# Prints a table per part; exits 1 if a numeric check fails.
set -u
dir=$(cd "${1:?usage: bench/gpu/device.sh DIR}" && pwd)
castor=$dir/castor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$castor" --version
fail=0
for model in mnist_mlp_small mnist_mlp; do
  for b in 1 7 129 1000; do
    python3 -c "import numpy as np; np.save('$tmp/x.npy', np.random.default_rng($b).uniform(-1, 1, ($b, 784)).astype(np.float32))"
    for p in float32 float16 bfloat16 mixed_float16 mixed_bfloat16; do
      "$castor" run "samples/$model.cast" --policy $p --input "$tmp/x.npy" --output "$tmp/cpu.npy" >/dev/null 2>"$tmp/err" ||
        { echo "FAIL cpu $model $p b=$b: $(cat "$tmp/err")"; fail=1; continue; }
      for sm in device sm_80; do
        smarg=""; [ $sm = device ] || smarg="--sm=$sm"
        if ! "$castor" run "samples/$model.cast" --target=cuda $smarg --policy $p --input "$tmp/x.npy" \
            --output "$tmp/gpu.npy" >/dev/null 2>"$tmp/err"; then
          echo "FAIL cuda $model $p b=$b $sm: $(cat "$tmp/err")"; fail=1; continue
        fi
        python3 - "$tmp/gpu.npy" "$tmp/cpu.npy" "$model $p b=$b $sm" "$p" <<'PY' || fail=1
import sys
import numpy as np
g, c, what, p = np.load(sys.argv[1]), np.load(sys.argv[2]), sys.argv[3], sys.argv[4]
bound = 2 * (3.2e-2 if "bfloat16" in p else 4e-3 if "float16" in p else 1e-5)
err = float(np.max(np.abs(g.astype(np.float64) - c)) / max(np.max(np.abs(c)), 1e-30))
top = np.sort(c, axis=1)
clear = (top[:, -1] - top[:, -2]) > bound * np.max(np.abs(c))
same = bool(np.all(np.argmax(g, 1)[clear] == np.argmax(c, 1)[clear]))
ok = g.shape == c.shape and np.all(np.isfinite(g)) and err <= bound and same
print("%s %-40s err %.2e (bound %.1e) argmax %s" % ("ok  " if ok else "FAIL", what, err, bound, "same" if same else "DIFFERS"))
sys.exit(0 if ok else 1)
PY
      done
    done
  done
done
[ $fail = 0 ] && echo "device.sh: every GPU output matches the CPU" || echo "device.sh: FAILURES above"
sh bench/gpu/run.sh "$dir"
exit $fail
