#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# dot_svg.sh BINDIR SRCDIR: the DOT castor writes parses with Graphviz.
#   - without dot on PATH, --emit=svg fails with the message saying how to
#     install it, and scripts/install-deps.sh installs graphviz (always
#     checked);
#   - with dot: castor dump --emit=dot of every sample and golden DOT case
#     renders with dot -Tsvg, --emit=svg|png write SVG and PNG, and
#     castor check --graph=FILE.svg writes the annotated graph.
# Exits 77 (skipped) after the first check when dot is not installed.
bin=$1 src=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$(PATH=/nonexistent "$bin/castor" dump "$src/samples/mnist_mlp_small.cast" --emit=svg 2>&1 >/dev/null)
rc=$?
want="castor: error: --emit=svg needs Graphviz's 'dot', which is not installed: install it with 'apt-get install graphviz' (Debian, Ubuntu), or write DOT with --emit=dot"
[ $rc = 1 ] || fail "--emit=svg without dot: exit status $rc, expected 1"
[ "$out" = "$want" ] || fail "--emit=svg without dot said: $out"

# a fresh machine gets dot from scripts/install-deps.sh (always checked)
grep -q '^pkgs=".* graphviz[ "]' "$src/scripts/install-deps.sh" ||
  fail "scripts/install-deps.sh does not install graphviz"

if ! command -v dot >/dev/null 2>&1; then
  echo "skipped: Graphviz's dot is not installed (apt-get install graphviz)"
  exit 77
fi
n=0
for m in "$src"/samples/*.cast "$src"/tests/golden/dot/*.cast "$src"/tests/check/*.cast; do
  for p in float32 mixed_float16 mixed_bfloat16; do
    "$bin/castor" dump "$m" --policy $p --emit=dot >"$tmp/g.dot" 2>/dev/null || fail "castor dump --emit=dot $m --policy $p"
    dot -Tsvg "$tmp/g.dot" >"$tmp/g.svg" || fail "dot -Tsvg rejects the DOT of $m under $p"
    n=$((n+1))
  done
done
"$bin/castor" dump "$src/samples/mnist_mlp_small.cast" --policy mixed_float16 --emit=svg >"$tmp/a.svg" 2>/dev/null || fail "--emit=svg"
grep -q '<svg' "$tmp/a.svg" || fail "--emit=svg wrote no SVG"
"$bin/castor" dump "$src/samples/mnist_mlp_small.cast" --emit=png >"$tmp/a.png" || fail "--emit=png"
[ "$(head -c 4 "$tmp/a.png" | tail -c 3)" = "PNG" ] || fail "--emit=png wrote no PNG"
"$bin/castor" check "$src/tests/check/overflow.cast" --input "$src/tests/check/overflow_x.npy" --graph="$tmp/c.svg" >/dev/null
[ $? = 2 ] || fail "castor check overflow.cast: expected exit status 2"
grep -q 'first NaN/Inf here: element 2 \[0,2\]' "$tmp/c.svg" || fail "castor check --graph: no first NaN/Inf mark"
echo "dot_svg: $n graphs rendered, svg, png and check --graph written"
