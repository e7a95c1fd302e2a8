#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/compile/deep.sh: writes to stdout a .cast model of N chained dense
# layers, UNITS wide (default 16), with a relu on every layer but the last
# and a softmax at the end: the deep model of issue 14 item 2. With
# OPTIMIZER (sgd, rmsprop, adam) it also says how it trains (`compile
# loss=categorical_crossentropy, optimizer=OPTIMIZER`), for castor train and
# bench/compile/train.sh.
#
#   bench/compile/deep.sh N [UNITS [OPTIMIZER]] > deep.cast
set -eu
N=${1:?usage: deep.sh N [UNITS [OPTIMIZER]]}
U=${2:-16}
OPT=${3:-}
awk -v n="$N" -v u="$U" -v opt="$OPT" 'BEGIN {
  printf "model deep_%d\npolicy float32\nx0 = input(shape=[%d])\n", n, u
  if (opt != "") printf "compile loss=categorical_crossentropy, optimizer=%s\n", opt
  for (i = 1; i <= n; i++) {
    act = i < n ? ", activation=relu" : ""
    printf "x%d = dense(x%d, units=%d%s, name=d%d)\n", i, i - 1, u, act, i
  }
  printf "y = activation(x%d, softmax)\noutput y\n", n
}'
