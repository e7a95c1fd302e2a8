#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/cpu/run.sh: castor on the CPU vs NumPy + OpenBLAS, PyTorch eager and
# JAX/XLA, side by side from one run (from the repository root):
#
#   bench/cpu/run.sh [BUILD_DIR]          # default build-bench; THREADS=T to pick
#
# Installs what it needs: Debian's python3-numpy, python3-torch and
# libopenblas0-pthread (apt-get, when missing and run as root), JAX from
# PyPI into bench/.venv (a venv that also sees the Debian packages), and
# builds castor (Release) into BUILD_DIR if it is not there.
#
# Measures, as medians after a warm-up, every peer on the same THREADS
# threads (default: all online CPUs; OMP_WAIT_POLICY=PASSIVE for torch):
#   - the seed MLP (samples/mnist_mlp.cast: 784 -> 4096 -> 4096 -> 10,
#     softmax) at batch 1, 64, 1024, 2048, 8192: castor under float32,
#     mixed_bfloat16 and mixed_float16 (castor run --policy P --repeat R);
#     NumPy f32, PyTorch eager f32 and bf16 autocast, jax.jit f32 and bf16;
#   - GEMMs: castor (a one-dense-layer model, no bias) vs OpenBLAS sgemm
#     (NumPy float32 matmul) at 4096^3 and the model's three shapes at
#     batch 8192 (M x K x N = 8192x784x4096, 8192x4096x4096, 8192x4096x10);
#   - castor's JIT compile time of the sample (castor run's `compile:`).
# To measure the AVX2 path on an AVX-512 machine, hold both sides to it:
#   CASTOR_CPU=x86-64-v3 OPENBLAS_CORETYPE=Haswell THREADS=2 bench/cpu/run.sh
# (the report records both settings, the CPU model and its SIMD flags).
# Writes bench/results/cpu-DATE.md (machine, date, commit, command, the
# tables with GFLOP/s and castor's ratio to the best peer) and prints it.
set -eu
BUILD=${1:-build-bench}
[ -f samples/mnist_mlp.cast ] || { echo "run from the castor repository root" >&2; exit 1; }
THREADS=${THREADS:-$(nproc)}

# ---- peers ----
need=""
/usr/bin/python3 -c 'import numpy' 2>/dev/null || need="$need python3-numpy"
/usr/bin/python3 -c 'import torch' 2>/dev/null || need="$need python3-torch"
[ -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ] || need="$need libopenblas0-pthread"
if [ -n "$need" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need python3-venv >/dev/null
  else
    echo "bench: missing Debian packages:$need (install them as root)" >&2
  fi
fi
VENV=bench/.venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import jax' 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q "jax[cpu]" >/dev/null || echo "bench: could not install jax; XLA rows will be missing" >&2
fi
PY=$VENV/bin/python

# ---- castor ----
if [ ! -x "$BUILD/castor" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCASTOR_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" >/dev/null
fi
CASTOR=$BUILD/castor
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
export CASTOR_NUM_THREADS=$THREADS

reps() { if [ "$1" -le 1 ]; then echo 100; elif [ "$1" -le 64 ]; then echo 30; elif [ "$1" -le 1024 ]; then echo 10; else echo 5; fi; }
castor_ms() { # MODEL POLICY BATCH -> "median_ms compile_ms"
  "$CASTOR" run "$1" --policy "$2" --batch "$3" --repeat "$(reps "$3")" --threads "$THREADS" >"$TMP/out" 2>"$TMP/err" ||
    { cat "$TMP/err" >&2; echo "n/a n/a"; return; }
  t=$(sed -n 's/^time: median \([0-9.]*\) ms.*/\1/p' "$TMP/out")
  c=$(sed -n 's/^compile: \([0-9.]*\) ms.*/\1/p' "$TMP/out")
  echo "${t:-n/a} ${c:-n/a}"
}

: >"$TMP/rows"
for b in 1 64 1024 2048 8192; do
  for p in float32 mixed_bfloat16 mixed_float16; do
    set -- $(castor_ms samples/mnist_mlp.cast $p $b)
    printf 'mlp\tcastor\t%s\t%s\t%s\n' "$p" "$b" "$1" >>"$TMP/rows"
  done
done
for i in 1 2 3 4 5; do
  set -- $(castor_ms samples/mnist_mlp.cast float32 1)
  printf 'compile\tcastor\tfloat32\t1\t%s\n' "$2" >>"$TMP/rows"
done
for s in 4096x4096x4096 8192x784x4096 8192x4096x4096 8192x4096x10; do
  m=${s%%x*} r=${s#*x} k=${r%%x*} n=${r#*x}
  printf 'model gemm\nx = input(shape=[%s])\ny = dense(x, units=%s, use_bias=false)\noutput y\n' "$k" "$n" >"$TMP/gemm.cast"
  set -- $(castor_ms "$TMP/gemm.cast" float32 "$m")
  printf 'gemm\tcastor\tf32\t%s\t%s\n' "$s" "$1" >>"$TMP/rows"
done
# NumPy, OpenBLAS and PyTorch from Debian's python (torch 1.13 needs Debian's
# numpy); JAX from the venv (its wheel brings a newer numpy of its own)
/usr/bin/python3 bench/cpu/peers.py --threads "$THREADS" --only sgemm,numpy,torch --batches 1,64,1024,2048,8192 \
  --gemm 4096x4096x4096,8192x784x4096,8192x4096x4096,8192x4096x10 \
  >>"$TMP/rows" 2>"$TMP/peers.err" || echo "peers.py failed: $(tail -1 "$TMP/peers.err")" >&2
"$PY" bench/cpu/peers.py --threads "$THREADS" --only jax --batches 1,64,1024,2048,8192 >>"$TMP/rows" 2>>"$TMP/peers.err" ||
  echo "peers.py (jax) failed: $(tail -1 "$TMP/peers.err")" >&2

# ---- report ----
mkdir -p bench/results
DATE=$(date -u +%Y-%m-%d)
OUT=bench/results/cpu-${CASTOR_CPU:+$CASTOR_CPU-}$DATE.md
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
# the SIMD flags that decide the code paths (castor's and OpenBLAS's)
FLAGS=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(sse4_2|avx|avx2|fma|f16c|avx512[a-z0-9_]*)$' | tr '\n' ' ' | sed 's/ $//')
VERS="$(/usr/bin/python3 -c 'import numpy, torch; print("numpy", numpy.__version__ + ", torch", torch.__version__)' 2>/dev/null), $("$PY" -c 'import jax, jaxlib; print("jax", jax.__version__ + ", jaxlib", jaxlib.__version__)' 2>/dev/null)"
"$PY" - "$TMP/rows" >"$OUT" <<PY
import sys, statistics
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
def num(s):
    try: return float(s)
    except ValueError: return None
print("# castor CPU benchmark, $DATE")
print()
print("- machine: $CPU, $(nproc) CPUs online ($(lscpu | sed -n 's/^Core(s) per socket: *//p') cores per socket), $THREADS threads for every framework")
print("- CPU flags: $FLAGS")
print("- castor's CPU path: ${CASTOR_CPU:-host} (CASTOR_CPU); OpenBLAS kernels: ${OPENBLAS_CORETYPE:-auto-detected} (OPENBLAS_CORETYPE)")
print("- commit: $(git rev-parse --short HEAD 2>/dev/null || echo ?)$(git diff --quiet 2>/dev/null || echo ' + uncommitted changes'); $("$CASTOR" --version)")
print("- peers: $VERS, OpenBLAS (Debian libopenblas0-pthread)")
print("- command: \`${CASTOR_CPU:+CASTOR_CPU=$CASTOR_CPU }${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE }THREADS=$THREADS bench/cpu/run.sh $BUILD\`; medians after a warm-up (100 runs at batch 1, 30 at 64, 10 at 1024, 5 at 2048 and 8192)")
print()
mlp = {}
for r in rows:
    if r[0] == "mlp": mlp[(r[1], r[2], int(r[3]))] = num(r[4])
flops = lambda b: 2 * b * (784 * 4096 + 4096 * 4096 + 4096 * 10)
print("## Seed MLP forward (samples/mnist_mlp.cast), median ms (GFLOP/s)")
print()
peers = [("numpy", "f32"), ("torch", "f32"), ("torch", "bf16"), ("jax", "f32"), ("jax", "bf16")]
pols = ["float32", "mixed_bfloat16", "mixed_float16"]
head = ["batch"] + ["castor " + p for p in pols] + ["%s %s" % p for p in peers] + ["castor f32 / best f32 peer", "castor bf16 / best bf16 peer", "mixed_bf16 / f32", "mixed_f16 / f32"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for b in (1, 64, 1024, 2048, 8192):
    def cell(v):
        return "n/a" if v is None else "%.3f (%.0f)" % (v, flops(b) / v / 1e6)
    c = [mlp.get(("castor", p, b)) for p in pols]
    pv = [mlp.get((p, d, b)) for p, d in peers]
    f32_peers = [v for (p, d), v in zip(peers, pv) if d == "f32" and v]
    bf_peers = [v for (p, d), v in zip(peers, pv) if d == "bf16" and v]
    ratio = lambda a, bs: "%.2fx" % (a / min(bs)) if a and bs else "n/a"
    rel = lambda a, base: "%.2fx" % (a / base) if a and base else "n/a"
    print("| %d | " % b + " | ".join(cell(v) for v in c + pv) + " | %s | %s | %s | %s |" % (
        ratio(c[0], f32_peers), ratio(c[1], bf_peers), rel(c[1], c[0]), rel(c[2], c[0])))
print()
print("Ratios are time ratios: below 1.00x castor is faster.")
print()
print("## GEMM, f32, median ms (GFLOP/s)")
print()
g = {}
for r in rows:
    if r[0] == "gemm": g[(r[1], r[3])] = num(r[4])
print("| M x K x N | castor | OpenBLAS sgemm | castor speed / OpenBLAS |")
print("|---|---|---|---|")
for s in ("4096x4096x4096", "8192x784x4096", "8192x4096x4096", "8192x4096x10"):
    m, k, n = (int(v) for v in s.split("x"))
    fl = 2 * m * k * n
    c, o = g.get(("castor", s)), g.get(("openblas", s))
    fmt = lambda v: "n/a" if v is None else "%.2f (%.0f)" % (v, fl / v / 1e6)
    print("| %s | %s | %s | %s |" % (s, fmt(c), fmt(o), "%.2fx" % (o / c) if c and o else "n/a"))
print()
print("castor's GEMM is timed through a one-dense-layer model (no bias): the time includes the run's launch.")
print()
comp = [num(r[4]) for r in rows if r[0] == "compile" and num(r[4]) is not None]
if comp:
    print("## JIT compile of samples/mnist_mlp.cast (float32)")
    print()
    print("castor_compile (passes, codegen, LLVM O2, ORC JIT, weight packing): median %.1f ms, min %.1f ms over %d compiles." % (
        statistics.median(comp), min(comp), len(comp)))
PY
cat "$OUT"
echo "wrote $OUT" >&2
