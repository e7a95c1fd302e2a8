#!/bin/sh
# bench/compile/onnx.sh: how ONNX import grows with the graph (issue 41
# item 5), side by side for one or more builds (from the repository root):
#
#   bench/compile/onnx.sh [BUILD_DIR...]      # default: build-bench
#   RUNS=3 TIMEOUT=60 CHAINS="10000 100000 1000000" SUMS="10000 100000" bench/compile/onnx.sh old new
#
# Models come from the first build's bench/onnx_gen (tests/onnx/onnx_gen.c):
# chains of N Relu nodes and one Sum of N inputs. Each run is `castor dump
# MODEL --passes=verify` (the import, the verifier and the IR printed to
# /dev/null); the table has the median wall time of RUNS runs, the peak
# memory (max RSS) and how the run ended: "ok", or castor's first error
# (a chain of 100,000 Relu nodes is 100,001 IR nodes: imported, then
# refused by the compile's IR_MAX_NODES; 1,000,000 nodes are refused by the
# ONNX reader's ONNX_MAX_NODES before decoding). Builds are interleaved run
# by run; a run past TIMEOUT seconds is killed ("> TIMEOUT s") and that
# build gets no further runs of that model. Writes
# bench/results/onnx-import-DATE.md (machine, date, commits, command,
# table, ratios to the first build) and prints it.
set -eu
[ -f samples/mnist_mlp.cast ] || { echo "run from the castor repository root" >&2; exit 1; }
[ $# -gt 0 ] || set -- build-bench
RUNS=${RUNS:-3}
TIMEOUT=${TIMEOUT:-60}
CHAINS=${CHAINS:-10000 100000 1000000}
SUMS=${SUMS:-10000 100000}
for b in "$@"; do
  if [ ! -x "$b/castor" ]; then
    cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DCASTOR_BUILD_TESTS=OFF >/dev/null
    cmake --build "$b" -j2 --target castor_cli castor_onnx_gen >/dev/null
  fi
done
gen=
for b in "$@"; do [ -x "$b/bench/onnx_gen" ] && { gen=$b/bench/onnx_gen; break; }; done
[ -n "$gen" ] || { echo "no build has bench/onnx_gen (cmake --build B --target castor_onnx_gen)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
models=""
for n in $CHAINS; do "$gen" chain "$n" "$TMP/chain$n.onnx"; models="$models chain$n"; done
for n in $SUMS; do "$gen" sum "$n" "$TMP/sum$n.onnx"; models="$models sum$n"; done

# one BUILD MODEL: prints "SECONDS MAXRSS_KB STATUS" (STATUS: ok or the error), or "timeout"
one() {
  if timeout "$TIMEOUT" /usr/bin/time -f '%e %M' -o "$TMP/rss" "$1/castor" dump "$TMP/$2.onnx" \
      --passes=verify >/dev/null 2>"$TMP/err"; then
    echo "$(tail -1 "$TMP/rss") ok"
  elif [ $? -eq 124 ]; then echo timeout
  else
    echo "$(tail -1 "$TMP/rss") $(grep -m1 'error:' "$TMP/err" | sed 's/.*error: //' | cut -c1-90)"
  fi
}
median() { sort -n | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

for m in $models; do
  i=0
  for b in "$@"; do : >"$TMP/$i.$m.t"; : >"$TMP/$i.$m.m"; echo "" >"$TMP/$i.$m.s"; i=$((i + 1)); done
  r=0
  while [ $r -lt "$RUNS" ]; do
    i=0
    for b in "$@"; do
      if [ "$(cat "$TMP/$i.$m.s")" != timeout ]; then
        res=$(one "$b" "$m")
        if [ "$res" = timeout ]; then echo timeout >"$TMP/$i.$m.s"
        else
          echo "$res" | awk '{print $1}' >>"$TMP/$i.$m.t"
          echo "$res" | awk '{print $2}' >>"$TMP/$i.$m.m"
          echo "$res" | cut -d' ' -f3- >"$TMP/$i.$m.s"
        fi
      fi
      i=$((i + 1))
    done
    r=$((r + 1))
  done
done

date=$(date -u +%Y-%m-%d)
out=bench/results/onnx-import-$date.md
{
  echo "# ONNX import time: chains and wide Sums ($date)"
  echo
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs,"
  echo "$(free -g | awk '/Mem:/ {print $2}') GiB; shared with other engineers' builds and tests (noisy: compare"
  echo "ratios, not absolute times). Date: $(date -u '+%Y-%m-%d %H:%M UTC')."
  echo
  echo "Command: \`RUNS=$RUNS TIMEOUT=$TIMEOUT CHAINS=\"$CHAINS\" SUMS=\"$SUMS\" bench/compile/onnx.sh $*\`"
  echo
  i=0
  for b in "$@"; do
    echo "- build $i: \`$b\` ($(git -C "$(dirname "$(readlink -f "$b/castor")")/.." log -1 --format='%h %s' 2>/dev/null | cut -c1-80 || echo '?'))"
    i=$((i + 1))
  done
  echo
  echo "Each cell: median wall seconds of \`castor dump MODEL --passes=verify >/dev/null\` over"
  echo "$RUNS runs, max RSS, and how it ended."
  echo
  printf '| model |'
  i=0; for b in "$@"; do printf ' build %d |' $i; i=$((i + 1)); done
  [ $# -gt 1 ] && printf ' build 0 / build %d |' $(($# - 1))
  echo
  printf '|---|'; for b in "$@"; do printf '%s' '---|'; done; [ $# -gt 1 ] && printf '%s' '---|'; echo
  for m in $models; do
    printf '| %s |' "$m"
    i=0
    for b in "$@"; do
      s=$(cat "$TMP/$i.$m.s")
      if [ "$s" = timeout ] && [ ! -s "$TMP/$i.$m.t" ]; then printf ' > %s s (killed) |' "$TIMEOUT"
      else printf ' %s s, %s MB, %s |' "$(median <"$TMP/$i.$m.t")" \
        "$(median <"$TMP/$i.$m.m" | awk '{printf "%d", $1 / 1024}')" "$s"
      fi
      i=$((i + 1))
    done
    if [ $# -gt 1 ]; then
      t0=$(median <"$TMP/0.$m.t"); tl=$(median <"$TMP/$(($# - 1)).$m.t")
      if [ -s "$TMP/0.$m.t" ] && [ "$(cat "$TMP/0.$m.s")" != timeout ]; then
        printf ' %s |' "$(awk -v a="$t0" -v b="$tl" 'BEGIN {printf "%.1fx", a / (b > 0 ? b : 0.01)}')"
      else printf ' > %s |' "$(awk -v a="$TIMEOUT" -v b="$tl" 'BEGIN {printf "%.0fx", a / (b > 0 ? b : 0.01)}')"
      fi
    fi
    echo
  done
} >"$out"
cat "$out"
