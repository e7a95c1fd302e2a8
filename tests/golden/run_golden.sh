#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run_golden.sh KIND DIR BINDIR: runs every golden case in DIR.
#
# A case is a file (*.cast or *.cir) whose first lines carry directives:
#   # RUN: castor dump %s            command; %s is the case's file name
#   # EXIT: 1                        expected exit status (default 0)
# Its expected output (stdout then stderr) is NAME.expected beside it. The
# command runs inside DIR so file names in diagnostics are stable.
# UPDATE_GOLDEN=1 rewrites the .expected files instead of comparing.
kind=$1 dir=$2 bin=$3
# the tools also by name anywhere in a command (`env VAR=1 castor run ...`)
PATH="$bin:$PATH"; export PATH
cd "$dir" || exit 1
pass=0 fail=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for f in *.cast *.cir; do
  [ -e "$f" ] || continue
  run=$(sed -n 's/^# RUN: //p' "$f" | head -n 1)
  [ -n "$run" ] || { echo "FAIL $kind/$f: no '# RUN:' line"; fail=$((fail+1)); continue; }
  want_exit=$(sed -n 's/^# EXIT: //p' "$f" | head -n 1)
  [ -n "$want_exit" ] || want_exit=0
  cmd=$(printf '%s' "$run" | sed -e "s|%s|$f|g" -e "s|^castor-opt |$bin/castor-opt |" -e "s|^castor |$bin/castor |")
  sh -c "$cmd" >"$tmp" 2>"$tmp.err"
  got_exit=$?
  cat "$tmp.err" >>"$tmp"
  rm -f "$tmp.err"
  exp="${f%.*}.expected"
  if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then cp "$tmp" "$exp"; fi
  if [ "$got_exit" != "$want_exit" ]; then
    echo "FAIL $kind/$f: exit status $got_exit, expected $want_exit"; cat "$tmp"; fail=$((fail+1))
  elif ! [ -e "$exp" ]; then
    echo "FAIL $kind/$f: missing $exp"; fail=$((fail+1))
  elif ! cmp -s "$tmp" "$exp"; then
    echo "FAIL $kind/$f: output differs from $exp"; diff "$exp" "$tmp" | head -n 40; fail=$((fail+1))
  else
    pass=$((pass+1))
  fi
done
echo "golden $kind: $pass passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" -gt 0 ]
