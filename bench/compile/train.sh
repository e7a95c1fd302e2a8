#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/compile/train.sh: training and inference compile time side by side
# over depth (issue 26 item 12), from the repository root:
#
#   bench/compile/train.sh [BUILD_DIR]          # default: build
#   RUNS=3 DEPTHS="100 1000 10000" OPTIMIZER=adam bench/compile/train.sh build
#
# For each N in DEPTHS, a model of N chained 16-wide dense layers
# (bench/compile/deep.sh N 16 OPTIMIZER: categorical cross-entropy) goes
# through BUILD_DIR/bench/compile_time RUNS times, which times, through
# castor.h, castor_compile (inference), castor_compile_train (the training
# step) and castor_compile_eval (the loss program castor train also
# compiles). Reports the median wall and process-CPU milliseconds of each,
# per layer, and the ratios the issue asks about: training per layer at N
# over training per layer at the smallest N, and training over inference
# per layer. Writes bench/results/compile-train-DATE.md (machine, date,
# commit, command, load) and prints it.
set -eu
[ -f bench/compile/deep.sh ] || { echo "run from the castor repository root" >&2; exit 1; }
B=${1:-build}
RUNS=${RUNS:-3}
DEPTHS=${DEPTHS:-100 1000 10000}
OPT=${OPTIMIZER:-sgd}
[ -x "$B/bench/compile_time" ] || { echo "no $B/bench/compile_time (build castor_compile_time)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
median() { sort -n | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for n in $DEPTHS; do
  bench/compile/deep.sh "$n" 16 "$OPT" >"$TMP/deep$n.cast"
  r=0
  while [ $r -lt "$RUNS" ]; do
    "$B/bench/compile_time" "$TMP/deep$n.cast" >"$TMP/out"
    for w in inference train eval; do
      sed -n "s/^$w: \([0-9.]*\) ms (cpu \([0-9.]*\) ms)/\1/p" "$TMP/out" >>"$TMP/$n.$w.wall"
      sed -n "s/^$w: \([0-9.]*\) ms (cpu \([0-9.]*\) ms)/\2/p" "$TMP/out" >>"$TMP/$n.$w.cpu"
    done
    r=$((r + 1))
  done
done
OUT=bench/results/compile-train-$(date -u +%F).md
{
  echo "# Training and inference compile time over depth ($(date -u '+%F %H:%M UTC'))"
  echo
  echo "Command: \`RUNS=$RUNS DEPTHS=\"$DEPTHS\" OPTIMIZER=$OPT bench/compile/train.sh $B\`"
  echo
  echo "Machine: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs, load average" \
       "at the start: $load0, at the end: $(cut -d' ' -f1-3 /proc/loadavg); commit" \
       "$(git rev-parse --short HEAD 2>/dev/null || echo '?') ($("$B/castor" --version 2>/dev/null | head -1))"
  echo
  echo "Model: \`bench/compile/deep.sh N 16 $OPT\` (N chained 16-wide dense layers, relu, softmax;"
  echo "categorical cross-entropy, $OPT). Median of $RUNS runs of \`$B/bench/compile_time\`; ms of"
  echo "wall-clock time and, in parentheses, of the process's CPU time (all threads) over the call."
  echo "Per layer: the CPU time over N, in microseconds; marginal: the CPU time added per layer since the"
  echo "previous N (what linear growth keeps constant, free of the fixed cost of a compile)."
  echo
  echo "| layers | inference ms | train step ms | eval ms | inference us/layer (cpu) | train us/layer (cpu) | train / inference per layer | train per layer / at $(echo $DEPTHS | cut -d' ' -f1) | marginal us/layer: inference, train |"
  echo "|---|---|---|---|---|---|---|---|---|"
  base="" prev_n="" prev_t="" prev_i=""
  for n in $DEPTHS; do
    for w in inference train eval; do
      eval "${w}_w=\$(median <\"\$TMP/\$n.\$w.wall\")"
      eval "${w}_c=\$(median <\"\$TMP/\$n.\$w.cpu\")"
    done
    tl=$(awk -v c="$train_c" -v n="$n" 'BEGIN {printf "%.1f", c * 1000 / n}')
    il=$(awk -v c="$inference_c" -v n="$n" 'BEGIN {printf "%.1f", c * 1000 / n}')
    [ -n "$base" ] || base=$tl
    marg=-
    [ -z "$prev_n" ] || marg=$(awk -v n="$n" -v p="$prev_n" -v i="$inference_c" -v pi="$prev_i" -v t="$train_c" \
      -v pt="$prev_t" 'BEGIN {printf "%.1f, %.1f", (i - pi) * 1000 / (n - p), (t - pt) * 1000 / (n - p)}')
    printf '| %s | %s (%s) | %s (%s) | %s (%s) | %s | %s | %s | %s | %s |\n' "$n" "$inference_w" "$inference_c" \
      "$train_w" "$train_c" "$eval_w" "$eval_c" "$il" "$tl" \
      "$(awk -v a="$tl" -v b="$il" 'BEGIN {printf "%.1fx", a / b}')" \
      "$(awk -v a="$tl" -v b="$base" 'BEGIN {printf "%.2fx", a / b}')" "$marg"
    prev_n=$n prev_t=$train_c prev_i=$inference_c
  done
} >"$OUT"
cat "$OUT"
