#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# dump_roundtrip.sh BINDIR MODEL...: `castor dump` output must parse back
# through castor-opt and print identically, byte for byte; so must the
# training step of each model under every policy (castor dump --train).
bin=$1; shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for m in "$@"; do
  for args in "" "--train --policy float32" "--train --policy mixed_float16 --optimizer=adam" \
              "--train --policy bfloat16 --optimizer=sgd"; do
    # shellcheck disable=SC2086
    if "$bin/castor" dump "$m" $args > "$tmp/a.cir" && "$bin/castor-opt" "$tmp/a.cir" --passes=verify > "$tmp/b.cir" &&
       cmp -s "$tmp/a.cir" "$tmp/b.cir"; then
      pass=$((pass+1))
    else
      echo "FAIL: $m $args does not round-trip"; diff "$tmp/a.cir" "$tmp/b.cir" | head -20; fail=$((fail+1))
    fi
  done
done
echo "dump round trip: $pass passed, $fail failed"
[ "$fail" = 0 ]
