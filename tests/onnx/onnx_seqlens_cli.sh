#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# onnx_seqlens_cli.sh BUILD_DIR: ONNX's sequence_lens as a graph input
# through the CLI and an AOT executable (issue 39), on
# tests/onnx/models/rnn_seqlens_{lstm,gru}.onnx (generate_rnn.py seqlens):
# `castor run` and `castor build`'s executable give the same bytes; a
# length beyond the sequence or below 0 is this exact error with status 1,
# from castor run and from the executable; the object file's header states
# the range.
set -eu
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)/models
castor=$bin/castor
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-onnx-seqlens.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect WHAT WANT CMD...: CMD fails with status 1 and exactly WANT on stderr
expect() {
  what=$1 want=$2
  shift 2
  st=0
  "$@" >"$tmp/out.txt" 2>"$tmp/err.txt" || st=$?
  if [ $st != 1 ]; then
    fail "$what: status $st, not 1"
    return
  fi
  got=$(sed "s|$here/||g; s|$tmp/||g" "$tmp/err.txt")
  [ "$got" = "$want" ] || fail "$what: got
$got
want
$want"
}

for op in lstm gru; do
  m=$here/rnn_seqlens_$op.onnx
  x=$here/rnn_seqlens_$op.x.npy
  sl=$here/rnn_seqlens_$op.sl.npy
  "$castor" run "$m" --input "$x" --input "$sl" --output "$tmp/a.npy" >"$tmp/a.txt" || fail "$op: castor run"
  if "$castor" build "$m" -o "$tmp/$op" >"$tmp/build.txt" 2>&1; then
    "$tmp/$op" --input "$x" --input "$sl" --output "$tmp/b.npy" >"$tmp/b.txt" || fail "$op: the executable"
    cmp "$tmp/a.npy" "$tmp/b.npy" || fail "$op: the executable's output differs from castor run's"
    expect "$op: a length below 0 (executable)" \
      "error: input 'sl' [3] = -1 is outside [0, 6], the sequence lengths of the 6 steps that '$op' scans" \
      "$tmp/$op" --input "$x" --input "$here/rnn_seqlens.sl_neg.npy"
  else
    fail "$op: castor build: $(cat "$tmp/build.txt")"
  fi
  expect "$op: a length beyond the sequence" \
    "castor: error: input 'sl' [1] = 7 is outside [0, 6], the sequence lengths of the 6 steps that '$op' scans" \
    "$castor" run "$m" --input "$x" --input "$here/rnn_seqlens.sl_over.npy"
  expect "$op: a length below 0" \
    "castor: error: input 'sl' [3] = -1 is outside [0, 6], the sequence lengths of the 6 steps that '$op' scans" \
    "$castor" run "$m" --input "$x" --input "$here/rnn_seqlens.sl_neg.npy"
done

# the object file's header: the lengths' range (its _run does not check them)
if "$castor" build "$here/rnn_seqlens_rnn.onnx" --emit obj -o "$tmp/rnnobj" >"$tmp/obj.txt" 2>&1; then
  grep -q "^#define RNN_SEQLENS_RNN_SL_LENGTH_LIMIT 6$" "$tmp/rnnobj.h" || fail "the header has no length limit"
else
  fail "castor build --emit obj: $(cat "$tmp/obj.txt")"
fi
[ $fails = 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "onnx_seqlens_cli: sequence lengths run, and bad ones are refused"
