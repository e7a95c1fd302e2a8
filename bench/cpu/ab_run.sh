#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Two castor builds on one `castor run`, alternately, round by round:
#
#   sh bench/cpu/ab_run.sh BUILD_A BUILD_B ROUNDS -- MODEL [castor run options]
#
# Each round runs BUILD_A/castor run ARGS, then BUILD_B/castor run ARGS, and
# prints both `time: median` values and their ratio A/B (below 1: A is
# faster). Pairing keeps the ratio meaningful when a shared machine's speed
# drifts; quote the median of the per-round ratios.
set -eu
[ $# -ge 5 ] && [ "$4" = "--" ] || { echo "usage: $0 BUILD_A BUILD_B ROUNDS -- MODEL [castor run options]" >&2; exit 2; }
A=$1 B=$2 R=$3
shift 4
for b in "$A" "$B"; do [ -x "$b/castor" ] || { echo "$0: no castor in $b" >&2; exit 2; }; done
case $R in '' | *[!0-9]*) echo "$0: ROUNDS must be a positive integer, got '$R'" >&2; exit 2 ;; esac
i=0
while [ "$i" -lt "$R" ]; do
  a=$("$A/castor" run "$@" 2>&1 | sed -n 's/^time: median \([0-9.]*\) ms.*/\1/p')
  b=$("$B/castor" run "$@" 2>&1 | sed -n 's/^time: median \([0-9.]*\) ms.*/\1/p')
  [ -n "$a" ] && [ -n "$b" ] || { echo "$0: castor run $* printed no time (A: '$a', B: '$b')" >&2; exit 1; }
  echo "$a $b" | awk '{printf "A %.3f B %.3f A/B %.3f\n", $1, $2, $1 / $2}'
  i=$((i + 1))
done
