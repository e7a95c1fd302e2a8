#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
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
#   VARIANTS  "small" (784-64-64-10, batch 128), "seed"
#             (784-4096-4096-10, batch 8192), "cnn" (samples/fashion_cnn.cast,
#             Adam, batch 128) and/or "vit" (samples/fashion_vit.cast, Adam,
#             batch 128), "lstm" (samples/fashion_lstm.cast, Adam, batch
#             128, every framework from init_weights.py's draw of Keras's
#             LSTM initializers) and/or "lstm_own" (the same, each framework
#             from its own seeded initializers: castor's --weights-seed, Keras's
#             set_random_seed) ["small seed"]
#   POLICIES  ["float32 mixed_float16 mixed_bfloat16"]
#   SEEDS     ["0 1 2"]
#   PEERS     ["castor torch keras"]
#   EPOCHS    [5]
#   ROUNDS    runs of every peer per (variant, seed, policy), the peers
#             interleaved (castor torch keras castor torch keras ...), so that
#             the report can give a ratio per round on a machine whose load
#             drifts [1]
#   TRAIN_SAMPLES, TEST_SAMPLES
#             train on the first N training images (the validation split is
#             the last 20% of them) and test on the first M test images, for
#             a reduced run; 0 = all 60000 / 10000 [0 0]
#   TORCH_PY  the python that runs torch_peer.py [/usr/bin/python3]
#   KERAS_PY  the python that runs keras_peer.py [bench/.venv-train/bin/python,
#             made and filled from PyPI when missing]
#   NICE      nice level of every run [0; use 19 on a shared machine]
#   NAME      the results' file name [train-DATE]
#   APPEND    1: add to NAME.jsonl instead of starting it afresh, so that a
#             benchmark may be run in parts (say one seed at a time) and
#             reported as one [0]
#
# cnn and vit: the sample's recipe (Adam with Keras's defaults, sparse
# categorical cross-entropy, batch 128), every weight drawn once by
# bench/train/init_weights.py --model and loaded by castor (--weights) and
# by both peers (--init); the rest as below.
#
# Recipe of the MLP variants (Keras's, written out in torch_peer.py): RMSprop defaults (lr 1e-3,
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
ROUNDS=${ROUNDS:-1}
TRAIN_SAMPLES=${TRAIN_SAMPLES:-0}
TEST_SAMPLES=${TEST_SAMPLES:-0}
NICE=${NICE:-0}
for n in "$ROUNDS" "$TRAIN_SAMPLES" "$TEST_SAMPLES" "$EPOCHS"; do
  case $n in '' | *[!0-9]*) echo "ROUNDS, TRAIN_SAMPLES, TEST_SAMPLES and EPOCHS must be whole numbers, got '$n'" >&2; exit 2 ;; esac
done
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
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
if [ -z "${KERAS_PY:-}" ]; then
  KERAS_PY=$VENV/bin/python
  if [ ! -x "$VENV/bin/python" ] || ! KERAS_BACKEND=jax "$VENV/bin/python" -c 'import keras, jax' 2>/dev/null; then
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q keras jax jaxlib >/dev/null || echo "bench/train: could not install keras/jax; Keras rows will be missing" >&2
  fi
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
printf '{"kind": "run", "date": "%s", "commit": "%s", "threads": %s, "cpu": "%s", "load": "%s", "command": "THREADS=%s VARIANTS=\\"%s\\" POLICIES=\\"%s\\" SEEDS=\\"%s\\" PEERS=\\"%s\\" EPOCHS=%s ROUNDS=%s TRAIN_SAMPLES=%s TEST_SAMPLES=%s TORCH_PY=%s KERAS_PY=%s NICE=%s NAME=%s APPEND=%s bench/train/run.sh %s"}\n' \
  "$DATE" "$(git rev-parse --short HEAD 2>/dev/null || echo ?)" "$THREADS" \
  "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$THREADS" "$VARIANTS" "$POLICIES" "$SEEDS" "$PEERS" "$EPOCHS" "$ROUNDS" "$TRAIN_SAMPLES" "$TEST_SAMPLES" \
  "$TORCH_PY" "$KERAS_PY" "$NICE" "$NAME" "${APPEND:-0}" "$BUILD" >>"$RAW"

# the whole process's wall and CPU time (load, compile, train, validate,
# test) of the last run, as a JSON line: PEER VARIANT POLICY SEED ROUND
proc_line() {
  if [ -s "$TMP/time" ]; then
    read -r wall user sys <"$TMP/time" || return 0
    printf '{"kind": "proc", "peer": "%s", "variant": "%s", "policy": "%s", "seed": %s, "round": %s, "wall_s": %s, "user_s": %s, "sys_s": %s, "load": "%s"}\n' \
      "$1" "$2" "$3" "$4" "$5" "$wall" "$user" "$sys" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"
  fi
  : >"$TMP/time"
}
TIMED=""
[ -x /usr/bin/time ] && TIMED="/usr/bin/time -f %e_%U_%S -o $TMP/time.raw"
timed() { # COMMAND...: runs it under /usr/bin/time when there is one
  if [ -n "$TIMED" ]; then
    rc=0
    $TIMED "$@" || rc=$?
    tail -1 "$TMP/time.raw" | tr '_' ' ' >"$TMP/time"
    return $rc
  fi
  "$@"
}

castor_has_train() { "$CASTOR" --help 2>&1 | grep -q '^ *train '; }

# the data castor reads: the IDX files, or the subset's .npy files
XTR=$DATA/train-images-idx3-ubyte.gz YTR=$DATA/train-labels-idx1-ubyte.gz
XTE=$DATA/t10k-images-idx3-ubyte.gz YTE=$DATA/t10k-labels-idx1-ubyte.gz
if [ "$TRAIN_SAMPLES" != 0 ] || [ "$TEST_SAMPLES" != 0 ]; then
  "$TORCH_PY" bench/train/subset.py --train-samples "$TRAIN_SAMPLES" --test-samples "$TEST_SAMPLES" --out "$TMP" ||
    { echo "bench/train: subset.py failed" >&2; exit 1; }
  XTR=$TMP/x_train.npy YTR=$TMP/y_train.npy XTE=$TMP/x_test.npy YTE=$TMP/y_test.npy
fi

run_castor() { # VARIANT UNITS BATCH POLICY SEED ROUND
  model=samples/mnist_mlp_small.cast
  optimizer=rmsprop
  init_args="--units $2"
  case $1 in
    seed) model=samples/mnist_mlp.cast ;;
    cnn) model=samples/fashion_cnn.cast optimizer=adam init_args="--model fashion_cnn" ;;
    vit) model=samples/fashion_vit.cast optimizer=adam init_args="--model fashion_vit" ;;
    lstm) model=samples/fashion_lstm.cast optimizer=adam init_args="--model fashion_lstm" ;;
    lstm_own) model=samples/fashion_lstm.cast optimizer=adam init_args="" ;;
  esac
  if ! castor_has_train; then
    echo "bench/train: skipping castor: '$CASTOR train' is not available yet (issue 10)" >&2
    printf '{"kind": "skipped", "peer": "castor", "policy": "%s", "units": %s, "batch_size": %s, "seed": %s, "reason": "castor train not available"}\n' \
      "$4" "$2" "$3" "$5" >>"$RAW"
    return
  fi
  # ======== castor's own run (issue 10's `castor train`) ========
  hist=$TMP/castor-$1-$4-$5.csv
  plot=""
  [ "$5" = "${SEEDS%% *}" ] && [ "$6" = 1 ] && plot="--plot bench/results/$NAME-$1-$4.svg"
  # the peers' initial weights (their seeded NumPy Glorot draw), so that
  # castor and the peers differ only in the order of the batches;
  # lstm_own: castor's own seeded init
  weights="--weights-seed $5"
  if [ -n "$init_args" ]; then
    "$TORCH_PY" bench/train/init_weights.py $init_args --seed "$5" --out "$TMP/init.safetensors" ||
      { echo "bench/train: init_weights.py failed" >&2; return; }
    weights="--weights $TMP/init.safetensors"
  fi
  timed nice -n "$NICE" $PIN "$CASTOR" train "$model" $weights \
    --x "$XTR" --y "$YTR" \
    --policy "$4" --epochs "$EPOCHS" --batch-size "$3" --optimizer "$optimizer" \
    --validation-split 0.2 --seed "$5" --threads "$THREADS" \
    --save "$TMP/castor.safetensors" --history "$hist" $plot >"$TMP/castor.log" 2>&1 ||
    { echo "bench/train: castor train failed:" >&2; tail -5 "$TMP/castor.log" >&2; return; }
  train_time=$(cat "$TMP/time" 2>/dev/null || true)
  test_line=$(nice -n "$NICE" $PIN "$CASTOR" evaluate "$model" --weights "$TMP/castor.safetensors" \
    --x "$XTE" --y "$YTE" --policy "$4" 2>&1 | tail -1) || test_line=""
  /usr/bin/python3 bench/train/report.py --castor-history "$hist" --policy "$4" --units "$2" \
    --batch-size "$3" --seed "$5" --test-line "$test_line" --model "$1" \
    --train-count "$(head -1 "$TMP/count")" >>"$RAW"
  echo "$train_time" >"$TMP/time"
  # ===============================================================
}

# the training rows castor and the peers see: Keras's split of the
# first TRAIN_SAMPLES (or all 60000) images
n_all=60000
[ "$TRAIN_SAMPLES" != 0 ] && [ "$TRAIN_SAMPLES" -lt 60000 ] && n_all=$TRAIN_SAMPLES
"$TORCH_PY" -c "import math; print(int(math.floor($n_all * (1 - 0.2))))" >"$TMP/count"

for v in $VARIANTS; do
  model_args="" own=""
  case $v in
    small) units=64 batch=128 ;;
    seed) units=4096 batch=8192 ;;
    cnn) units=0 batch=128 model_args="--model fashion_cnn" ;;
    vit) units=0 batch=128 model_args="--model fashion_vit" ;;
    lstm) units=0 batch=128 model_args="--model fashion_lstm" ;;
    lstm_own) units=0 batch=128 model_args="" own="--model fashion_lstm" ;;
    *) echo "unknown variant $v" >&2; exit 1 ;;
  esac
  for s in $SEEDS; do
    if [ -n "$model_args" ]; then # the weights every framework starts from
      "$TORCH_PY" bench/train/init_weights.py $model_args --seed "$s" --out "$TMP/peer-init.safetensors" ||
        { echo "bench/train: init_weights.py failed" >&2; exit 1; }
      model_args="$model_args --init $TMP/peer-init.safetensors"
    fi
    for p in $POLICIES; do
      r=1
      while [ "$r" -le "$ROUNDS" ]; do
        for peer in $PEERS; do
          echo "bench/train: $v $p seed $s round $r $peer ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
          args="--units $units --batch-size $batch --epochs $EPOCHS --policy $p --seed $s --threads $THREADS"
          args="$args --train-samples $TRAIN_SAMPLES --test-samples $TEST_SAMPLES $model_args $own"
          case $peer in
            castor) run_castor "$v" "$units" "$batch" "$p" "$s" "$r" ;;
            torch) timed nice -n "$NICE" $PIN "$TORCH_PY" bench/train/torch_peer.py $args >>"$RAW" 2>"$TMP/err" ||
                     { echo "torch_peer failed: $(tail -1 "$TMP/err")" >&2; } ;;
            keras) timed nice -n "$NICE" $PIN "$KERAS_PY" bench/train/keras_peer.py $args >>"$RAW" 2>"$TMP/err" ||
                     { echo "keras_peer failed: $(tail -1 "$TMP/err")" >&2; } ;;
            *) echo "unknown peer $peer" >&2; exit 1 ;;
          esac
          proc_line "$peer" "$v" "$p" "$s" "$r"
        done
        r=$((r + 1))
      done
    done
    [ -n "$model_args" ] && model_args=${model_args%% --init *}
  done
done

/usr/bin/python3 bench/train/report.py "$RAW" >"$OUT"
cat "$OUT"
echo "wrote $OUT and $RAW" >&2
