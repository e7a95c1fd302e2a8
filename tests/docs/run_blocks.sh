#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run_blocks.sh BUILD_DIR SOURCE_DIR [FILE.md...]: the README's and docs/'s
# code blocks, run as written, so that they cannot rot.
#
# Every ```sh block runs with `sh -e` in a scratch folder that looks like a
# fresh clone after the README's build: build/ is BUILD_DIR, samples/,
# include/, docs/, tests/ and scripts/ are the source's, and BUILD_DIR is on
# PATH (docs write `castor ...` for the installed command), then /usr/bin
# (Debian's python3, with the python3-numpy scripts/install-deps.sh
# installs, before a pyenv or venv python3 earlier on the PATH). The blocks of
# one file share the folder, in order, so a block may use what an earlier
# one wrote; each file starts afresh. Every ```c block is compiled with
# -std=c11 -Wall -Wextra -Werror against include/castor.h and linked with
# the build tree's libcastor (the README's link line); a block with main()
# is run in the folder too.
#
# A plain ``` transcript runs when the line before its fence is
#   <!-- docs-test: output -->
# each line that starts with "$ " is a command (run with sh in the folder),
# and the lines up to the next command are its expected stdout, compared
# line for line, where a line "..." stands for any lines (stderr is not
# compared; a command with no lines after it is checked for its exit status
# only). Use it for output that is the same on every machine (IR, cast
# reports, errors), not for timings or floating-point results.
#
# A block that must not run says so on the line just before its fence:
#   <!-- docs-test: skip: REASON -->
# (REASON says why: it builds castor itself, needs root, a GPU or minutes,
# or is a fragment). docs/development.md documents the convention. Blocks
# in other languages (```cmake, plain ``` transcripts) are not run.
set -u
if [ -n "${CASTOR_TEST_SANITIZED:-}" ]; then
  echo "docs_blocks: skipped: a sanitizer build's libcastor cannot be linked into the blocks' C programs or loaded into python3 (the release build runs this test)"
  exit 77
fi
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
shift 2
[ $# -gt 0 ] || set -- "$src/README.md" "$src"/docs/*.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc=${CC:-cc}
pass=0 fail=0 skip=0

# matches EXPECTED GOT: GOT's lines against EXPECTED's, "..." for any lines
matches() {
  awk 'NR == FNR { want[++n] = $0; next }
       { got[++m] = $0 }
       END {
         i = 1; j = 1
         while (i <= n) {
           if (want[i] == "...") {
             i++
             if (i > n) exit 0
             while (j <= m && got[j] != want[i]) j++
             if (j > m) { print "expected, after \"...\": " want[i]; exit 1 }
           } else if (j > m || got[j] != want[i]) {
             print "expected line " i ": " want[i]; print "got: " (j > m ? "(end of output)" : got[j]); exit 1
           }
           i++; j++
         }
         if (j <= m) { print "unexpected output: " got[j]; exit 1 }
       }' "$1" "$2"
}

# transcript FILE: runs its "$ " commands in $work, comparing their stdout
transcript() {
  awk -v dir="$tmp/tx" 'BEGIN { system("rm -rf " dir "; mkdir -p " dir) }
    /^\$ / { n++; c = sprintf("%s/%03d.cmd", dir, n); w = sprintf("%s/%03d.want", dir, n)
              print substr($0, 3) > c; close(c); printf "" > w; next }
    n { print >> sprintf("%s/%03d.want", dir, n) }' "$1"
  for c in "$tmp"/tx/*.cmd; do
    [ -e "$c" ] || continue
    w=${c%.cmd}.want
    # trailing blank lines separate commands in a transcript
    awk '{ l[NR] = $0 } END { e = NR; while (e > 0 && l[e] == "") e--; for (i = 1; i <= e; i++) print l[i] }' "$w" >"$w.t"
    echo "\$ $(cat "$c")"
    (cd "$work" && PATH="$build:/usr/bin:$PATH" timeout 300 sh -c "$(cat "$c")") >"$tmp/got" 2>"$tmp/err" ||
      { echo "exit status $?:"; cat "$tmp/err"; return 1; }
    if [ -s "$w.t" ] && ! matches "$w.t" "$tmp/got"; then
      echo "its output:"; head -n 40 "$tmp/got"; return 1
    fi
  done
  return 0
}
for md in "$@"; do
  rel=${md#"$src"/}
  work=$tmp/work.$(echo "$rel" | tr / _)
  mkdir -p "$work" "$tmp/blocks"
  ln -s "$build" "$work/build"
  for d in samples include docs tests scripts; do ln -s "$src/$d" "$work/$d"; done
  rm -f "$tmp"/blocks/*
  # one file per block: NNNN.LANG (its text) and NNNN.meta (line, skip reason)
  awk -v out="$tmp/blocks" '
    /^```[ \t]*$/ && !inb && prev ~ /<!-- docs-test: output -->/ { inb = 1; n++
      f = sprintf("%s/%04d.out", out, n)
      printf "%d\t\n", NR > sprintf("%s/%04d.meta", out, n)
      printf "" > f; next }
    /^```(sh|c)[ \t]*$/ && !inb { inb = 1; n++; lang = substr($0, 4); sub(/[ \t]+$/, "", lang)
      f = sprintf("%s/%04d.%s", out, n, lang)
      printf "%d\t%s\n", NR, (prev ~ /<!-- docs-test: skip/ ? prev : "") > sprintf("%s/%04d.meta", out, n)
      printf "" > f; next }
    /^```/ && inb { inb = 0; close(f); next }
    inb { print > f }
    { prev = $0 }' "$md"
  for b in "$tmp"/blocks/*.meta; do
    [ -e "$b" ] || continue
    base=${b%.meta}
    line=$(cut -f1 "$b") why=$(cut -f2- "$b")
    if [ -e "$base.sh" ]; then lang=sh; elif [ -e "$base.out" ]; then lang=out; else lang=c; fi
    if [ -n "$why" ]; then
      skip=$((skip+1)); continue
    fi
    log=$tmp/log
    st=0
    if [ $lang = sh ]; then
      (cd "$work" && PATH="$build:/usr/bin:$PATH" timeout 300 sh -e "$base.sh") >"$log" 2>&1 || st=$?
    elif [ $lang = out ]; then
      transcript "$base.out" >"$log" 2>&1 || st=$?
    else
      cp "$base.c" "$work/block.c"
      (cd "$work" && $cc -std=c11 -Wall -Wextra -Werror -Iinclude -c block.c -o block.o) >"$log" 2>&1 || st=$?
      if [ $st = 0 ] && grep -q 'main(' "$base.c"; then
        (cd "$work" && $cc block.o -Lbuild/lib -lcastor -Wl,-rpath,"$build/lib" -o block && timeout 300 ./block) >>"$log" 2>&1 || st=$?
      fi
    fi
    if [ $st = 0 ]; then
      pass=$((pass+1))
    else
      fail=$((fail+1))
      echo "FAIL $rel:$line: the \`\`\`$lang block:"; sed 's/^/    /' "$base.$lang"; echo "  output:"; head -n 60 "$log" | sed 's/^/    /'
    fi
  done
done
echo "docs blocks: $pass ran, $skip marked skip, $fail failed"
[ $fail = 0 ] && [ $pass -gt 0 ]
