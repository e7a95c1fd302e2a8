#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# layering.sh SOURCE_DIR: scripts/check-layering.sh passes on the tree, and
# fails, naming file, line and rule, on a copy of the tree with a
# deliberately wrong include (the runtime including the IR), a header
# that does not compile alone, and PTX outside codegen/nvptx.
set -u
src=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/castor-layering-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0
CC=${CC:-cc} sh "$src/scripts/check-layering.sh" "$src" >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail=1; }

for d in include util formats ir runtime train frontend passes codegen api tools scripts; do cp -R "$src/$d" "$tmp/$d"; done
# expect WHAT: the check fails and its output has the line WHAT
expect() {
  if CC=${CC:-cc} sh "$tmp/scripts/check-layering.sh" "$tmp" >"$tmp/out" 2>&1; then
    echo "FAIL: check-layering.sh passed on a tree with: $1"; fail=1
  elif ! grep -qF "$1" "$tmp/out"; then
    echo "FAIL: check-layering.sh did not say: $1"; cat "$tmp/out"; fail=1
  fi
}
cp "$tmp/runtime/program.c" "$tmp/keep.c"
sed -i '0,/^#include "runtime/s//#include "ir\/ir.h"\n&/' "$tmp/runtime/program.c"
n=$(grep -n '^#include "ir/ir.h"' "$tmp/runtime/program.c" | cut -d: -f1)
expect "layering: runtime/program.c:$n: runtime/ may not include \"ir/ir.h\" (ir/ is not below it; runtime/ may use: util)"
cp "$tmp/keep.c" "$tmp/runtime/program.c"

printf 'static int broken(void) { return undeclared_name; }\n' >>"$tmp/util/half.h"
expect "layering: util/half.h does not compile on its own (or twice):"
cp "$src/util/half.h" "$tmp/util/half.h"

printf '/* asm: mma.sync.aligned.m16n8k16 */\n' >>"$tmp/codegen/cg_plan.c"
expect "(PTX belongs in codegen/nvptx/)"
[ $fail = 0 ] && echo "layering test: ok"
exit $fail
