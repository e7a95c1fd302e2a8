#!/bin/sh
# bench/gpu/train.sh: the training step on one NVIDIA GPU (issue 42, item 4):
# castor train --target=cuda vs PyTorch AMP (autocast + GradScaler) and
# Keras 3 on JAX, per policy, interleaved (castor torch keras castor ...).
# From the repository root, on a machine with a GPU, its driver and python3
# with torch (CUDA) and/or keras + jax[cuda]:
#
#   bench/gpu/train.sh [BUILD_DIR]          # default build-bench (made if missing)
#
# STATUS: written and dry-run on the PTX emulator only (no GPU was at hand:
# CASTOR_CUDA_EMULATE=1 MODELS=fashion_cnn POLICIES=float32 SAMPLE_BATCH=2
# STEPS=1 EPOCHS=2 PEERS=castor runs its castor half); no GPU numbers yet.
#
# What it measures, per (model, policy), as the median step time in ms:
#   seed         784-4096-4096-10 (samples/mnist_mlp.cast), RMSprop, batch 8192
#   mnist_mlp    the same model at batch 128 (the sample's own batch)
#   fashion_cnn  samples/fashion_cnn.cast, Adam, batch 128
#   fashion_vit  samples/fashion_vit.cast, Adam, batch 128
# castor: `castor train --target=cuda` on synthetic data (STEPS steps an
# epoch, EPOCHS epochs): the median over the epochs after the first of its
# printed us/sample times the batch, i.e. the fit loop's wall time per step
# (the batch's copy in, the step's kernels, the outputs and the loss scale
# and step count read back for the log). torch: the same model on the GPU
# with torch.autocast (float16 or bfloat16) and, for float16, GradScaler;
# CUDA events around each step, the batch already on the device.
# keras: Keras 3 on JAX, jit-compiled train_on_batch, wall time per call
# (block_until_ready), the batch already on the device. Each peer's steps
# are timed after WARMUP untimed ones.
#
# Environment: MODELS ["seed mnist_mlp fashion_cnn fashion_vit"], POLICIES
# ["float32 mixed_float16 mixed_bfloat16"], PEERS ["castor torch keras"],
# ROUNDS [3], EPOCHS [4], STEPS [20], WARMUP [5], SEED_BATCH [8192],
# SAMPLE_BATCH [128], TORCH_PY, KERAS_PY [python3].
#
# Writes bench/results/gpu-train-DATE.md (GPU, driver, date, versions, the
# command, medians and castor/peer ratios per round) and prints it, with the
# issue's two checks: the seed's mixed_float16 step >= 2.5x faster than its
# float32 step, and every sample's step <= 1.0x PyTorch AMP's.
set -eu
BUILD=${1:-build-bench}
[ -f samples/mnist_mlp.cast ] || { echo "run from the castor repository root" >&2; exit 1; }
MODELS=${MODELS:-seed mnist_mlp fashion_cnn fashion_vit}
POLICIES=${POLICIES:-float32 mixed_float16 mixed_bfloat16}
PEERS=${PEERS:-castor torch keras}
ROUNDS=${ROUNDS:-3} EPOCHS=${EPOCHS:-4} STEPS=${STEPS:-20} WARMUP=${WARMUP:-5}
SEED_BATCH=${SEED_BATCH:-8192} SAMPLE_BATCH=${SAMPLE_BATCH:-128}
TORCH_PY=${TORCH_PY:-python3} KERAS_PY=${KERAS_PY:-python3}
[ "$EPOCHS" -ge 2 ] || { echo "EPOCHS must be at least 2 (the first is the warm-up)" >&2; exit 2; }
if [ ! -x "$BUILD/castor" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCASTOR_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" >/dev/null
fi
CASTOR=$BUILD/castor
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
[ -n "$GPU" ] || GPU="no nvidia-smi (${CASTOR_CUDA_EMULATE:+emulated: }unknown)"
DATE=$(date -u +%Y-%m-%d)

file_of() { case $1 in seed | mnist_mlp) echo samples/mnist_mlp.cast ;; *) echo "samples/$1.cast" ;; esac; }
batch_of() { if [ "$1" = seed ]; then echo "$SEED_BATCH"; else echo "$SAMPLE_BATCH"; fi; }
optimizer_of() { case $1 in seed | mnist_mlp) echo rmsprop ;; *) echo adam ;; esac; }

# synthetic data per model: STEPS batches, x in [0, 1), labels 0..9
"$KERAS_PY" - "$TMP" "$STEPS" "$SEED_BATCH" "$SAMPLE_BATCH" <<'PY' || { echo "numpy is needed for the data" >&2; exit 1; }
import sys, numpy as np
out, steps, sb, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = np.random.default_rng(0)
for name, n, shape in (("seed", sb, (784,)), ("mnist_mlp", b, (784,)), ("fashion_cnn", b, (28, 28, 1)),
                       ("fashion_vit", b, (28, 28))):
    np.save(f"{out}/{name}_x.npy", r.random((steps * n,) + shape, dtype=np.float32))
    np.save(f"{out}/{name}_y.npy", r.integers(0, 10, steps * n).astype(np.int32))
PY

castor_ms() { # MODEL POLICY -> median ms per step, or n/a
  m=$1 p=$2 b=$(batch_of "$1")
  "$CASTOR" train "$(file_of "$m")" --target=cuda --policy "$p" --optimizer "$(optimizer_of "$m")" \
    --x "$TMP/${m}_x.npy" --y "$TMP/${m}_y.npy" --batch-size "$b" --epochs "$EPOCHS" --no-shuffle \
    >"$TMP/log" 2>"$TMP/err" || { tail -2 "$TMP/err" >&2; echo n/a; return; }
  sed -n 's/^Epoch \([0-9]*\)\/[0-9]* - [0-9.]*s \([0-9.]*\)us\/sample.*/\1 \2/p' "$TMP/log" |
    awk -v b="$b" '$1 > 1 { v[n++] = $2 * b / 1000 } END {
      if (!n) { print "n/a"; exit } for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      printf "%.3f\n", n % 2 ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2 }'
}

: >"$TMP/rows"
r=1
while [ $r -le "$ROUNDS" ]; do
  for m in $MODELS; do
    for p in $POLICIES; do
      for peer in $PEERS; do
        case $peer in
        castor) printf 'castor\t%s\t%s\t%s\t%s\n' "$m" "$p" "$r" "$(castor_ms "$m" "$p")" >>"$TMP/rows" ;;
        torch | keras)
          py=$TORCH_PY
          [ "$peer" = keras ] && py=$KERAS_PY
          KERAS_BACKEND=jax "$py" bench/gpu/train_peers.py --peer "$peer" --model "$m" --policy "$p" \
            --batch "$(batch_of "$m")" --steps "$STEPS" --warmup "$WARMUP" --round "$r" >>"$TMP/rows" 2>"$TMP/perr" ||
            printf '%s\t%s\t%s\t%s\tn/a\n' "$peer" "$m" "$p" "$r" >>"$TMP/rows"
          ;;
        esac
      done
    done
  done
  r=$((r + 1))
done

mkdir -p bench/results
OUT=bench/results/gpu-train-$DATE.md
CMD="MODELS='$MODELS' POLICIES='$POLICIES' PEERS='$PEERS' ROUNDS=$ROUNDS EPOCHS=$EPOCHS STEPS=$STEPS bench/gpu/train.sh $BUILD"
python3 - "$TMP/rows" "$GPU" "$DATE" "$("$CASTOR" --version)" "$CMD" >"$OUT" <<'PY'
import statistics, sys
rows, gpu, date, ver, cmd = sys.argv[1:6]
t = {}
for line in open(rows):
    f = line.rstrip("\n").split("\t")
    if len(f) >= 5 and f[4] != "n/a":
        t.setdefault((f[0], f[1], f[2]), {})[int(f[3])] = float(f[4])
def med(k): return statistics.median(t[k].values()) if k in t else None
def ms(v): return "n/a" if v is None else f"{v:.3f}"
print(f"# Training step on the GPU: castor vs PyTorch AMP and Keras 3 (JAX)\n")
print(f"- GPU: {gpu}\n- date: {date}\n- castor: {ver}\n- command: `{cmd}`")
print("- median ms per step over the rounds (each round's own median of its steps);"
      " castor's is the fit loop's wall time, the peers' device time (torch) or call time (keras)\n")
print("| model | policy | castor | torch AMP | keras (JAX) | castor/torch | castor/keras | per round (castor/torch) |")
print("|---|---|---|---|---|---|---|---|")
for m in ("seed", "mnist_mlp", "fashion_cnn", "fashion_vit"):
    for p in ("float32", "mixed_float16", "mixed_bfloat16"):
        c, to, ke = med(("castor", m, p)), med(("torch", m, p)), med(("keras", m, p))
        if c is None and to is None and ke is None: continue
        rr = [f"{t[('castor', m, p)][r] / t[('torch', m, p)][r]:.2f}" for r in sorted(t.get(("castor", m, p), {}))
              if r in t.get(("torch", m, p), {})]
        print(f"| {m} | {p} | {ms(c)} | {ms(to)} | {ms(ke)} | "
              f"{'n/a' if c is None or to is None else f'{c / to:.2f}x'} | "
              f"{'n/a' if c is None or ke is None else f'{c / ke:.2f}x'} | {' '.join(rr) or 'n/a'} |")
f32, f16 = med(("castor", "seed", "float32")), med(("castor", "seed", "mixed_float16"))
print("\nChecks (issue 42):")
print(f"- seed mixed_float16 speed-up over float32: {'n/a' if not f32 or not f16 else f'{f32 / f16:.2f}x'} (wanted >= 2.5x)")
for m in ("mnist_mlp", "fashion_cnn", "fashion_vit"):
    for p in ("mixed_float16", "mixed_bfloat16"):
        c, to = med(("castor", m, p)), med(("torch", m, p))
        if c is not None and to is not None:
            print(f"- {m} {p}: castor/torch AMP {c / to:.2f}x (wanted <= 1.0x)")
PY
cat "$OUT"
