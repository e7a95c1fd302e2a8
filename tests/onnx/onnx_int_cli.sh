#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# onnx_int_cli.sh BUILD_DIR: integer inputs through the CLI and an AOT
# executable (issue 36), on the transformers BERT export
# (tests/onnx/models/bert.onnx, its int64 input_ids and attention_mask):
# `castor run --dim sequence=16` with the batch taken from the --input
# files gives the same bytes as with --batch 4 and as `castor build`'s
# executable; bad integer inputs (an id outside the vocabulary, a float id
# that is not a whole number, a mask one token short) are these exact
# errors with status 1, from castor run and from the executable.
set -eu
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)/models
castor=$bin/castor
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-onnx-int.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
m=$here/bert.onnx
ids=$here/tf.ids.npy
mask=$here/tf.mask.npy

"$castor" run "$m" --dim sequence=16 --input "$ids" --input "$mask" --output "$tmp/a.npy" >"$tmp/a.txt" ||
  fail "castor run with the batch of the --input files"
"$castor" run "$m" --dim sequence=16 --batch 4 --input "$ids" --input "$mask" --output "$tmp/b.npy" >"$tmp/b.txt" ||
  fail "castor run --batch 4"
cmp "$tmp/a.npy" "$tmp/b.npy" || fail "the batch of the --input files and --batch 4 differ"
if "$castor" build "$m" --dim sequence=16 --batch 4 -o "$tmp/bert" >"$tmp/build.txt" 2>&1; then
  "$tmp/bert" --input "$ids" --input "$mask" --output "$tmp/c.npy" >"$tmp/c.txt" || fail "the executable"
  cmp "$tmp/b.npy" "$tmp/c.npy" || fail "the executable's output differs from castor run's"
else
  fail "castor build: $(cat "$tmp/build.txt")"
fi

# expect WHAT WANT CMD...: CMD fails with status 1 and exactly WANT on stderr
expect() {
  what=$1 want=$2
  shift 2
  if "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    fail "$what: succeeded"
    return
  fi
  got=$(sed "s|$here/||g; s|$tmp/||g" "$tmp/err.txt")
  [ "$got" = "$want" ] || fail "$what: got
$got
want
$want"
}
expect "an id outside the vocabulary" \
  "castor: error: input 'input_ids' [1, 5] = 1000 is outside [-1000, 1000), the rows of the table that gather 'node_embedding' reads (a negative index counts from the end)" \
  "$castor" run "$m" --dim sequence=16 --input "$here/tf.ids_oob.npy" --input "$mask"
expect "a float id" \
  "tf.ids_frac.npy: error: element 3 is 2.5, which is not a whole number; the model's input is int64" \
  "$castor" run "$m" --dim sequence=16 --batch 4 --input "$here/tf.ids_frac.npy" --input "$mask"
expect "a short mask" \
  "castor: error: input 'attention_mask': expected i64[4,16], got i64[4,15]" \
  "$castor" run "$m" --dim sequence=16 --input "$ids" --input "$here/tf.mask_short.npy"
if [ -x "$tmp/bert" ]; then
  expect "an id outside the vocabulary (executable)" \
    "error: input 'input_ids' [1, 5] = 1000 is outside [-1000, 1000), the rows of the table that gather 'node_embedding' reads (a negative index counts from the end)" \
    "$tmp/bert" --input "$here/tf.ids_oob.npy" --input "$mask"
  expect "a float id (executable)" \
    "tf.ids_frac.npy: error: input 'input_ids' expects i64[4,16], got f32[4,16]" \
    "$tmp/bert" --input "$here/tf.ids_frac.npy" --input "$mask"
fi
[ $fails = 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "onnx_int_cli: integer inputs run, and bad ones are refused"
