#!/bin/sh
# bench/train/run.sh: the training benchmark of issue 10 (the seed
# experiment) -- castor train vs PyTorch eager and Keras 3 (JAX backend),
# same recipe, same data, same threads. From the repository root:
#
#   bench/train/run.sh [BUILD_DIR]        # default build-bench
#
# Environment (defaults in brackets):
#   THREADS   threads for every framework [2]; the peers are also pinned to
#             CPUs 0..THREADS-1 with taskset (XLA's CPU client has no thread
#             count option of its own)
#   VARIANTS  "small" (784-64-64-10, batch 128) and/or "seed"
#             (784-4096-4096-10, batch 8192) ["small seed"]
#   POLICIES  ["float32 mixed_float16 mixed_bfloat16"]
#   SEEDS     ["0 1 2"]
#   PEERS     ["castor torch keras"]
#   EPOCHS    [5]
#   NICE      nice level of every run [0; use 19 on a shared machine]
#   NAME      the results' file name [train-DATE]
#   APPEND    1: add to NAME.jsonl instead of starting it afresh, so that a
#             benchmark may be run in parts (say one seed at a time) and
#             reported as one [0]
#
# Recipe (Keras's, written out in torch_peer.py): RMSprop defaults (lr 1e-3,
# rho 0.9, eps 1e-7 inside the root), sparse categorical cross-entropy on
# the float32 softmax, Glorot-uniform kernels and zero biases (the same
# draw for every peer: bench/train/init_weights.py gives castor the NumPy
# draw torch_peer.py and keras_peer.py make), 5 epochs,
# validation_split 0.2 (the last 12000 training images), shuffling every
# epoch, Fashion-MNIST from Debian's dataset-fashion-mnist scaled by 1/255.
#
# Installs what it needs when run as root: Debian's dataset-fashion-mnist,
# python3-torch, python3-numpy, libopenblas0-pthread, python3-venv; Keras, JAX and jaxlib from
# PyPI into bench/.venv-train. torch runs on Debian's python (its torch
# needs Debian's numpy), Keras in the venv.
#
# Writes every measurement as JSON lines to bench/results/NAME.jsonl and the
# tables (bench/train/report.py, of the whole file) to bench/results/NAME.md;
# castor's curves (loss, accuracy and loss scale, `castor train --plot`) of
# the first seed to bench/results/NAME-VARIANT-POLICY.svg.
set -eu
BUILD=${1:-build-bench}
[ -f samples/mnist_mlp.cast ] || { echo "run from the castor repository root" >&2; exit 1; }
THREADS=${THREADS:-2}
VARIANTS=${VARIANTS:-small seed}
POLICIES=${POLICIES:-float32 mixed_float16 mixed_bfloat16}
SEEDS=${SEEDS:-0 1 2}
PEERS=${PEERS:-castor torch keras}
EPOCHS=${EPOCHS:-5}
NICE=${NICE:-0}
DATA=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

# ---- peers and data ----
need=""
[ -e "$DATA/train-images-idx3-ubyte.gz" ] || need="$need dataset-fashion-mnist"
/usr/bin/python3 -c 'import numpy' 2>/dev/null || need="$need python3-numpy"
/usr/bin/python3 -c 'import torch' 2>/dev/null || need="$need python3-torch"
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || need="$need python3-venv"
# Debian's torch calls the system BLAS: without OpenBLAS it gets the netlib
# reference BLAS, ~100x slower (a 4096-wide step took minutes)
[ -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ] || need="$need libopenblas0-pthread"
if [ -n "$need" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need >/dev/null
  else
    echo "bench/train: missing Debian packages:$need (install them as root)" >&2
  fi
fi
VENV=bench/.venv-train
if [ ! -x "$VENV/bin/python" ] || ! KERAS_BACKEND=jax "$VENV/bin/python" -c 'import keras, jax' 2>/dev/null; then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q keras jax jaxlib >/dev/null || echo "bench/train: could not install keras/jax; Keras rows will be missing" >&2
fi

# ---- castor ----
if [ ! -x "$BUILD/castor" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCASTOR_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" >/dev/null
fi
CASTOR=$BUILD/castor

export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
export CASTOR_NUM_THREADS=$THREADS KERAS_BACKEND=jax
CPUS=0-$((THREADS - 1))
PIN=""
command -v taskset >/dev/null && PIN="taskset -c $CPUS"
DATE=$(date -u +%Y-%m-%d)
mkdir -p bench/results
NAME=${NAME:-train-$DATE}
case $NAME in */* | "" | .*) echo "NAME must be a plain file name, got '$NAME'" >&2; exit 2 ;; esac
case ${APPEND:-0} in 0 | 1) ;; *) echo "APPEND must be 0 or 1, got '$APPEND'" >&2; exit 2 ;; esac
RAW=bench/results/$NAME.jsonl
OUT=bench/results/$NAME.md
[ "${APPEND:-0}" = 1 ] || : >"$RAW"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
printf '{"kind": "run", "date": "%s", "commit": "%s", "threads": %s, "cpu": "%s", "load": "%s", "command": "THREADS=%s VARIANTS=\\"%s\\" POLICIES=\\"%s\\" SEEDS=\\"%s\\" PEERS=\\"%s\\" EPOCHS=%s NICE=%s NAME=%s APPEND=%s bench/train/run.sh %s"}\n' \
  "$DATE" "$(git rev-parse --short HEAD 2>/dev/null || echo ?)" "$THREADS" \
  "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$THREADS" "$VARIANTS" "$POLICIES" "$SEEDS" "$PEERS" "$EPOCHS" "$NICE" "$NAME" "${APPEND:-0}" "$BUILD" >>"$RAW"

castor_has_train() { "$CASTOR" --help 2>&1 | grep -q '^ *train '; }

run_castor() { # VARIANT UNITS BATCH POLICY SEED
  model=samples/mnist_mlp_small.cast
  [ "$1" = seed ] && model=samples/mnist_mlp.cast
  if ! castor_has_train; then
    echo "bench/train: skipping castor: '$CASTOR train' is not available yet (issue 10)" >&2
    printf '{"kind": "skipped", "peer": "castor", "policy": "%s", "units": %s, "batch_size": %s, "seed": %s, "reason": "castor train not available"}\n' \
      "$4" "$2" "$3" "$5" >>"$RAW"
    return
  fi
  # ======== castor's own run (issue 10's `castor train`) ========
  hist=$TMP/castor-$1-$4-$5.csv
  plot=""
  [ "$5" = "${SEEDS%% *}" ] && plot="--plot bench/results/$NAME-$1-$4.svg"
  # the peers' initial weights (their seeded NumPy Glorot draw), so that
  # castor and the peers differ only in the order of the batches
  /usr/bin/python3 bench/train/init_weights.py --units "$2" --seed "$5" --out "$TMP/init.safetensors" ||
    { echo "bench/train: init_weights.py failed" >&2; return; }
  nice -n "$NICE" $PIN "$CASTOR" train "$model" --weights "$TMP/init.safetensors" \
    --x "$DATA/train-images-idx3-ubyte.gz" --y "$DATA/train-labels-idx1-ubyte.gz" \
    --policy "$4" --epochs "$EPOCHS" --batch-size "$3" --optimizer rmsprop \
    --validation-split 0.2 --seed "$5" --threads "$THREADS" \
    --save "$TMP/castor.safetensors" --history "$hist" $plot >"$TMP/castor.log" 2>&1 ||
    { echo "bench/train: castor train failed:" >&2; tail -5 "$TMP/castor.log" >&2; return; }
  test_line=$(nice -n "$NICE" $PIN "$CASTOR" evaluate "$model" --weights "$TMP/castor.safetensors" \
    --x "$DATA/t10k-images-idx3-ubyte.gz" --y "$DATA/t10k-labels-idx1-ubyte.gz" --policy "$4" 2>&1 | tail -1) || test_line=""
  /usr/bin/python3 bench/train/report.py --castor-history "$hist" --policy "$4" --units "$2" \
    --batch-size "$3" --seed "$5" --test-line "$test_line" >>"$RAW"
  # ===============================================================
}

for v in $VARIANTS; do
  case $v in
    small) units=64 batch=128 ;;
    seed) units=4096 batch=8192 ;;
    *) echo "unknown variant $v" >&2; exit 1 ;;
  esac
  for s in $SEEDS; do
    for p in $POLICIES; do
      for peer in $PEERS; do
        echo "bench/train: $v $p seed $s $peer" >&2
        args="--units $units --batch-size $batch --epochs $EPOCHS --policy $p --seed $s --threads $THREADS"
        case $peer in
          castor) run_castor "$v" "$units" "$batch" "$p" "$s" ;;
          torch) nice -n "$NICE" $PIN /usr/bin/python3 bench/train/torch_peer.py $args >>"$RAW" 2>"$TMP/err" ||
                   { echo "torch_peer failed: $(tail -1 "$TMP/err")" >&2; } ;;
          keras) nice -n "$NICE" $PIN "$VENV/bin/python" bench/train/keras_peer.py $args >>"$RAW" 2>"$TMP/err" ||
                   { echo "keras_peer failed: $(tail -1 "$TMP/err")" >&2; } ;;
          *) echo "unknown peer $peer" >&2; exit 1 ;;
        esac
      done
    done
  done
done

/usr/bin/python3 bench/train/report.py "$RAW" >"$OUT"
cat "$OUT"
echo "wrote $OUT and $RAW" >&2
