#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/gpu/run.sh: castor's cuda target vs PyTorch eager and JAX/XLA on one
# GPU, in one call (from the repository root, on a machine with an NVIDIA
# GPU, its driver, and optionally python3 with torch and/or jax[cuda]):
#
#   bench/gpu/run.sh [BUILD_DIR]
#
# Measures, as medians of 50 runs after a warm-up:
#   - the seed MLP (samples/mnist_mlp.cast: 784 -> 4096 -> 4096 -> 10,
#     softmax) at batch 8192: castor under float32, mixed_float16 and
#     mixed_bfloat16; PyTorch and JAX in f32, f16 and bf16 (f32 without TF32);
#   - an 8192 x 8192 x 8192 f16 GEMM: castor (a one-layer model, no bias,
#     16-bit output; its time includes the f32 -> f16 cast kernel of the
#     input, about 0.1 ms) vs torch.matmul and jnp.matmul.
# castor's times are device times of its kernel launches (castor run
# --repeat: CUDA events, inputs already on the device), like the peers'.
# Writes bench/results/gpu-DATE.md (GPU name, date, versions, the table of
# medians and castor/peer ratios) and prints it.
set -eu
BUILD=${1:-build-bench}
ROOT=$(pwd)
[ -f samples/mnist_mlp.cast ] || { echo "run from the castor repository root" >&2; exit 1; }
if [ ! -x "$BUILD/castor" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCASTOR_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" >/dev/null
fi
CASTOR=$BUILD/castor
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo unknown)
DATE=$(date -u +%Y-%m-%d)
ITERS=50

castor_ms() { # MODEL POLICY BATCH [extra args] -> median ms
  m=$1 p=$2 b=$3; shift 3
  "$CASTOR" run "$m" --target=cuda --policy "$p" --batch "$b" --repeat $ITERS "$@" 2>"$TMP/err" |
    sed -n 's/^time: median \([0-9.]*\) ms.*/\1/p' | grep . || { cat "$TMP/err" >&2; echo n/a; }
}

printf 'model gemm\nx = input(shape=[8192])\ny = dense(x, units=8192, use_bias=false)\noutput y\n' >"$TMP/gemm.cast"
: >"$TMP/rows"
for p in float32 mixed_float16 mixed_bfloat16; do
  printf 'castor\tmlp\t%s\t%s\n' "$p" "$(castor_ms samples/mnist_mlp.cast $p 8192)" >>"$TMP/rows"
done
printf 'castor\tgemm\tfloat16\t%s\n' "$(castor_ms "$TMP/gemm.cast" float16 8192 --keep-16bit-outputs)" >>"$TMP/rows"
python3 bench/gpu/peers.py --iters $ITERS >>"$TMP/rows" 2>"$TMP/peers.err" || echo "peers.py failed: $(tail -1 "$TMP/peers.err")" >&2

mkdir -p bench/results
OUT=bench/results/gpu-$DATE.md
python3 - "$TMP/rows" "$GPU" "$DATE" "$("$CASTOR" --version)" >"$OUT" <<'PY'
import sys
rows, gpu, date, ver = sys.argv[1:5]
t = {}
for line in open(rows):
    f = line.rstrip("\n").split("\t")
    if len(f) >= 4:
        t[(f[0], f[1], f[2])] = None if f[3] == "n/a" else float(f[3])
def ms(v): return "n/a" if v is None else f"{v:.3f}"
def ratio(c, p): return "n/a" if c is None or p is None else f"{c / p:.2f}x"
pol = {"float32": "float32", "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}
print(f"# castor vs PyTorch eager vs JAX/XLA on {gpu}\n\n{date}, {ver}; medians of 50 runs, milliseconds "
      "(device time, inputs resident). Ratio = castor / peer (below 1: castor faster).\n")
print("| case | dtype | castor | torch | jax | castor/torch | castor/jax |\n|---|---|---|---|---|---|---|")
for dt in ("float32", "float16", "bfloat16"):
    c = t.get(("castor", "mlp", pol[dt])); pt = t.get(("torch", "mlp", dt)); j = t.get(("jax", "mlp", dt))
    print(f"| MLP 784-4096-4096-10, batch 8192 | {dt} (castor {pol[dt]}) | {ms(c)} | {ms(pt)} | {ms(j)} | {ratio(c, pt)} | {ratio(c, j)} |")
c = t.get(("castor", "gemm", "float16")); pt = t.get(("torch", "gemm", "float16")); j = t.get(("jax", "gemm", "float16"))
print(f"| GEMM 8192^3 | float16 | {ms(c)} | {ms(pt)} | {ms(j)} | {ratio(c, pt)} | {ratio(c, j)} |")
if c: print(f"\ncastor GEMM: {2 * 8192**3 / c / 1e9:.1f} TFLOP/s (includes the input cast kernel).")
PY
cat "$OUT"
