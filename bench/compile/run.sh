#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/compile/run.sh: castor's JIT compile time, side by side for one or
# more builds in one run (from the repository root):
#
#   bench/compile/run.sh [BUILD_DIR...]     # default: build-bench
#   RUNS=5 TIMEOUT=120 DEPTHS="100 500 1000 10000" bench/compile/run.sh old-build new-build
#
# Measures, for each build's `castor run --repeat 1` (its `compile:` line:
# passes, planning, LLVM emission and optimization, machine code, weight
# packing; not the model's parsing), the median of RUNS runs of:
#   - samples/mnist_mlp.cast (784 -> 4096 -> 4096 -> 10, softmax), float32;
#   - deep models of N chained 16-wide dense layers (bench/compile/deep.sh)
#     for N in DEPTHS, also the peak memory of the process (max RSS).
# Builds are interleaved run by run, so a busy machine slows all of them
# alike. A run past TIMEOUT seconds is killed and reported as "> TIMEOUT s";
# a build whose run took over 10 s gets no further runs of that model.
# Writes bench/results/compile-DATE.md (machine, date, commits, command,
# tables, ratios to the first build) and prints it.
set -eu
[ -f samples/mnist_mlp.cast ] || { echo "run from the castor repository root" >&2; exit 1; }
[ $# -gt 0 ] || set -- build-bench
RUNS=${RUNS:-5}
TIMEOUT=${TIMEOUT:-120}
DEPTHS=${DEPTHS:-100 500 1000 10000}
for b in "$@"; do
  if [ ! -x "$b/castor" ]; then
    cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DCASTOR_BUILD_TESTS=OFF >/dev/null
    cmake --build "$b" -j2 >/dev/null
  fi
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export CASTOR_NUM_THREADS=${THREADS:-$(nproc)}

models="mnist_mlp"
cp samples/mnist_mlp.cast "$TMP/mnist_mlp.cast"
for n in $DEPTHS; do
  bench/compile/deep.sh "$n" >"$TMP/deep$n.cast"
  models="$models deep$n"
done

# one run: prints "compile_ms maxrss_kb process_cpu_s", or "timeout" / "error"
one() { # BUILD MODEL
  if timeout "$TIMEOUT" /usr/bin/time -f '%M %U %S' -o "$TMP/rss" "$1/castor" run "$TMP/$2.cast" --repeat 1 \
      >"$TMP/out" 2>"$TMP/err"; then
    printf '%s %s\n' "$(sed -n 's/^compile: \([0-9.]*\) ms.*/\1/p' "$TMP/out")" \
      "$(tail -1 "$TMP/rss" | awk '{printf "%s %.2f", $1, $2 + $3}')"
  elif [ $? -eq 124 ]; then echo timeout
  else cat "$TMP/err" >&2; echo error
  fi
}
median() { sort -n | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

for m in $models; do
  i=0
  for b in "$@"; do : >"$TMP/$i.$m.t"; : >"$TMP/$i.$m.m"; : >"$TMP/$i.$m.c"; : >"$TMP/$i.$m.x"; i=$((i + 1)); done
  r=0
  while [ $r -lt "$RUNS" ]; do
    i=0
    for b in "$@"; do
      if [ ! -s "$TMP/$i.$m.x" ]; then
        set -- $(one "$b" "$m") "$@"
        case $1 in
          timeout|error) echo "$1" >"$TMP/$i.$m.x"; shift ;;
          *) echo "$1" >>"$TMP/$i.$m.t"; echo "$2" >>"$TMP/$i.$m.m"; echo "$3" >>"$TMP/$i.$m.c"
             awk -v t="$1" 'BEGIN {exit !(t > 10000)}' && echo slow >"$TMP/$i.$m.x"
             shift 3 ;;
        esac
      fi
      i=$((i + 1))
    done
    r=$((r + 1))
  done
done

OUT=bench/results/compile-$(date -u +%F).md
{
  echo "# castor JIT compile time ($(date -u '+%F %H:%M UTC'))"
  echo
  echo "Command: \`RUNS=$RUNS TIMEOUT=$TIMEOUT DEPTHS=\"$DEPTHS\" bench/compile/run.sh $*\`"
  echo
  echo "Machine: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs" \
       "($(grep -o 'avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')), load average at the start:" \
       "$(cut -d' ' -f1-3 /proc/loadavg), CASTOR_NUM_THREADS=$CASTOR_NUM_THREADS"
  echo
  i=0
  for b in "$@"; do
    echo "- build $i: \`$b\` ($("$b/castor" --version 2>/dev/null | head -1))"
    i=$((i + 1))
  done
  echo
  echo "compile ms: castor run's \`compile:\` (wall), median of the runs; process CPU s: user + system"
  echo "time of the whole \`castor run\` (parsing, weight init, compile, one run), median."
  echo
  printf '| model |'; i=0; for b in "$@"; do printf ' build %d: compile ms (runs) | process CPU s | max RSS MB |' $i; i=$((i + 1)); done
  [ $# -gt 1 ] && printf ' compile speedup of build %d |' $(($# - 1)); echo
  printf '|---|'; for b in "$@"; do printf -- '---|---|---|'; done; [ $# -gt 1 ] && printf -- '---|'; echo
  for m in $models; do
    printf '| %s |' "$m"
    i=0; first=""; last=""
    for b in "$@"; do
      n=$(wc -l <"$TMP/$i.$m.t")
      t=$(median <"$TMP/$i.$m.t")
      rss=$(median <"$TMP/$i.$m.m")
      cpu=$(median <"$TMP/$i.$m.c")
      if [ "$n" -eq 0 ]; then
        reason=$(cat "$TMP/$i.$m.x")
        [ "$reason" = timeout ] && printf ' > %s s (killed) | - | - |' "$TIMEOUT" || printf ' %s | - | - |' "$reason"
        t=""
      else
        printf ' %s (%s) | %s | %s |' "$t" "$n" "$cpu" "$(awk -v k="$rss" 'BEGIN {printf "%.0f", k / 1024}')"
      fi
      [ $i -eq 0 ] && first=$t
      last=$t
      i=$((i + 1))
    done
    if [ $# -gt 1 ]; then
      if [ -n "$first" ] && [ -n "$last" ]; then awk -v a="$first" -v b="$last" 'BEGIN {printf " %.1fx |", a / b}'
      elif [ -n "$last" ]; then printf ' > %s x |' "$(awk -v a="$TIMEOUT" -v b="$last" 'BEGIN {printf "%.0f", a * 1000 / b}')"
      else printf ' - |'; fi
    fi
    echo
  done
} >"$OUT"
cat "$OUT"
