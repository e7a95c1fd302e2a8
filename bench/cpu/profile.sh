#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/cpu/profile.sh: where castor's f32 GEMM spends its time, for
# explaining a GEMM result of bench/cpu/run.sh (from the repository root):
#
#   bench/cpu/profile.sh [BUILD_DIR] [M K N]     # default build-bench, 4096 4096 4096
#
# CASTOR_CPU picks the code path (x86-64-v3: AVX2) as for castor run.
# Prints, for one thread:
#   - the GEMM's time and GFLOP/s (castor run --repeat), and the rate of
#     vector FMAs it implies (per ns; at the machine's nominal clock, per
#     cycle: the peak is 2 per cycle on Zen 3/4 and Intel since Haswell);
#   - a perf profile (cpu-clock samples: VMs often have no cycle counters):
#     the share of samples in the hottest 512 bytes of the JIT code,
#     which is the micro-kernel's k loop, and in the rest;
#   - the micro-kernel's k loop from `castor build --emit=asm`: its FMAs,
#     vector loads, broadcasts and prefetches per iteration.
set -eu
BUILD=${1:-build-bench}
M=${2:-4096} K=${3:-4096} N=${4:-4096}
CASTOR=$BUILD/castor
[ -x "$CASTOR" ] || { echo "no $CASTOR (build it: cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release)" >&2; exit 1; }
command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
printf 'model gemm\nx = input(shape=[%s])\ny = dense(x, units=%s, use_bias=false)\noutput y\n' "$K" "$N" >"$TMP/gemm.cast"

echo "castor GEMM ${M}x${K}x${N} f32, 1 thread, CPU path ${CASTOR_CPU:-host}"
"$CASTOR" run "$TMP/gemm.cast" --batch "$M" --repeat 5 --threads 1 >"$TMP/run.txt"
ms=$(sed -n 's/^time: median \([0-9.]*\) ms.*/\1/p' "$TMP/run.txt")
vw=8
grep -q 'avx512f' /proc/cpuinfo && [ "${CASTOR_CPU:-host}" != x86-64-v3 ] && [ "${CASTOR_CPU:-host}" != x86-64 ] && vw=16
[ "${CASTOR_CPU:-host}" = x86-64 ] && vw=4
mhz=$(lscpu | sed -n 's/^CPU MHz: *//p' | head -1)
[ -n "$mhz" ] || mhz=$(sed -n 's/^cpu MHz[^:]*: *//p' /proc/cpuinfo | head -1)
awk -v ms="$ms" -v m="$M" -v k="$K" -v n="$N" -v vw="$vw" -v mhz="$mhz" 'BEGIN {
  fl = 2 * m * k * n; v = m * k * n / vw / (ms * 1e6);
  printf "median %.1f ms, %.1f GFLOP/s; %.2f vector FMAs (%d lanes) per ns", ms, fl / ms / 1e6, v, vw;
  if (mhz > 0) printf "; at the nominal %.0f MHz %.2f per cycle (peak 2; above 2 means the core runs faster than nominal)", mhz, v / (mhz / 1e3);
  printf "\n" }'

perf record -q -e cpu-clock -o "$TMP/perf.data" -- "$CASTOR" run "$TMP/gemm.cast" --batch "$M" --repeat 3 --threads 1 \
  >/dev/null 2>"$TMP/perf.err" || { echo "perf record failed: $(tail -1 "$TMP/perf.err")" >&2; exit 1; }
perf script -i "$TMP/perf.data" -F ip,dso 2>/dev/null | python3 -c '
import sys, collections
n = j = 0
w = collections.Counter()
for line in sys.stdin:
    f = line.split()
    if not f:
        continue
    n += 1
    if len(f) < 2 or any(t in f[1] for t in ("JIT", "anon", "unknown", "perf-")):
        j += 1
        w[int(f[0], 16) // 64] += 1
# the hottest 512 bytes: the k loop is 100 to 350 bytes of code
best = max((sum(w[a + i] for i in range(8)) for a in list(w)), default=0)
print("perf: %d samples; %.1f%% in JIT code, %.1f%% in its hottest 512 bytes (the k loop), %.1f%% elsewhere "
      "(packing, epilogue, runtime, compile)" % (n, 100 * j / n, 100 * best / n, 100 * (n - best) / n))
'

# the same micro-kernel from a small model (the assembly of the big one
# would carry its weights as data)
printf 'model gemm\nx = input(shape=[256])\ny = dense(x, units=256, use_bias=false)\noutput y\n' >"$TMP/small.cast"
"$CASTOR" build "$TMP/small.cast" --emit=asm ${CASTOR_CPU:+--cpu=$CASTOR_CPU} -o "$TMP/gemm.s" 2>/dev/null
# the k loop: the basic block (up to its branch) with the most FMAs
awk 'function close_block() { if (f > bf) { bf = f; bl = l; bb = b; bx = x; bp = p } f = 0; l = 0; b = 0; x = 0; p = 0 }
  /^\.LBB|^[A-Za-z_.][A-Za-z0-9_.]*:/ { close_block(); next }
  /^[ \t]+\./ { next }
  /vfmadd/ { f++ } /prefetch/ { p++ } /vbroadcastss/ { b++ } /vmovups|vmovaps|vcvtph2ps|vpmovzxwd/ { if ($0 ~ /\(/) l++ }
  /^[ \t]+[a-z]/ { x++ } /^[ \t]+j[a-z]+[ \t]/ { close_block() }
  END { close_block(); printf "k loop (the block with the most FMAs): %d instructions, %d FMAs, %d vector loads of B, %d broadcasts of A, %d prefetches\n", bx, bf, bl, bb, bp }' "$TMP/gemm.s"
