# SPDX-License-Identifier: Apache-2.0
"""bench/cpu/interleave.py: castor against its peers round by round, for
machines too noisy for bench/cpu/run.sh's one pass (from the repository root):

    /usr/bin/python3 bench/cpu/interleave.py [--build build-bench] [--rounds 5] [--threads T]
    CASTOR_CPU=x86-64-v3 OPENBLAS_CORETYPE=Haswell /usr/bin/python3 bench/cpu/interleave.py

run.sh times castor, then each peer, minutes apart. On a shared VM the
memory bandwidth left to it drifts by 30% over minutes, enough to flip a
memory-bound ratio such as the seed MLP at batch 1. Here every round times
each measure on castor and then, right after, on its peers, and the report
gives the median over rounds of the per-round ratio, and its range, beside
the medians of the times:

  - the seed MLP in float32 at batch 1, 2048 and 8192 against NumPy +
    OpenBLAS and PyTorch eager (the fastest of the two in that round);
  - f32 GEMM at 4096^3 and the model's three shapes at batch 8192 against
    OpenBLAS sgemm (NumPy's float32 matmul).

castor runs as `castor run --repeat R` (a fresh process per round, so its
compile is not timed); the peers run in this process, with the threads and
OPENBLAS_CORETYPE that run.sh would give them. Writes
bench/results/cpu-interleaved-[CASTOR_CPU-]DATE.md and prints it.

    /usr/bin/python3 bench/cpu/interleave.py --build NEW --vs-build OLD [--rounds 7]

compares two castor builds instead (a change that must not move castor's
lead: a refactoring): each round runs the same measures on NEW and right
after on OLD, plus the sample's JIT compile time (castor run's `compile:`
line, median of 3 runs each), and reports NEW / OLD per round. Needs no
NumPy or PyTorch. Writes bench/results/cpu-ab-[CASTOR_CPU-]DATE.md.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build-bench")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--vs-build", help="compare --build with this other castor build instead of the peers")
args = ap.parse_args()
if args.rounds < 1 or args.threads < 1:
    ap.error("--rounds and --threads must be at least 1")
# the peers' thread pools read these when they load
for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "CASTOR_NUM_THREADS"):
    os.environ[v] = str(args.threads)
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if args.vs_build:
    import ab  # noqa: E402

    ab.main(args)
    sys.exit(0)
import numpy as np  # noqa: E402

import peers  # noqa: E402

CASTOR = os.path.join(args.build, "castor")
if not os.access(CASTOR, os.X_OK):
    sys.exit("interleave: no %s (build it: cmake -S . -B %s -DCMAKE_BUILD_TYPE=Release)" % (CASTOR, args.build))


def reps(batch):
    return 200 if batch <= 1 else 5


def castor_ms(model, batch):
    out = subprocess.run([CASTOR, "run", model, "--batch", str(batch), "--repeat", str(reps(batch)),
                          "--threads", str(args.threads)], capture_output=True, text=True)
    m = re.search(r"^time: median ([0-9.]+) ms", out.stdout, re.M)
    if out.returncode or not m:
        sys.exit("interleave: castor run %s failed: %s" % (model, out.stderr.strip()))
    return float(m.group(1))


def peer_ms(fn, batch):
    return peers.median_ms(fn, reps(batch))


tmp = tempfile.mkdtemp()
ws = peers.weights()
numpy_mlp = peers.numpy_mlp(ws)
torch_model = peers.torch_mlp(ws, args.threads)
measures = []  # (label, castor model, batch, flops, {peer: fn})
mlp_flops = 2 * (784 * 4096 + 4096 * 4096 + 4096 * 10)
for b in (1, 2048, 8192):
    x = peers.mlp_input(b)
    fns = {"numpy": (lambda x=x: numpy_mlp(x))}
    if torch_model is not None:
        import torch

        tx = torch.from_numpy(x)

        def run_torch(tx=tx):
            with torch.inference_mode():
                return torch_model(tx)

        fns["torch"] = run_torch
    measures.append(("seed MLP f32, batch %d" % b, "samples/mnist_mlp.cast", b, mlp_flops * b, fns))
rng = np.random.default_rng(2)
for m, k, n in ((4096, 4096, 4096), (8192, 784, 4096), (8192, 4096, 4096), (8192, 4096, 10)):
    path = os.path.join(tmp, "gemm_%d_%d.cast" % (k, n))
    with open(path, "w") as f:
        f.write("model gemm\nx = input(shape=[%d])\ny = dense(x, units=%d, use_bias=false)\noutput y\n" % (k, n))
    a = rng.standard_normal((m, k), dtype=np.float32)
    bm = rng.standard_normal((k, n), dtype=np.float32)
    measures.append(("f32 GEMM %dx%dx%d" % (m, k, n), path, m, 2 * m * k * n, {"openblas": (lambda a=a, bm=bm: a @ bm)}))

times = {lab: {"castor": []} for lab, *_ in measures}
ratios = {lab: [] for lab, *_ in measures}
best_peer = {lab: [] for lab, *_ in measures}
for r in range(args.rounds):
    for lab, model, batch, flops, fns in measures:
        c = castor_ms(model, batch)
        times[lab]["castor"].append(c)
        got = {}
        for name, fn in fns.items():
            got[name] = peer_ms(fn, batch)
            times[lab].setdefault(name, []).append(got[name])
        best = min(got, key=got.get)
        best_peer[lab].append(best)
        ratios[lab].append(c / got[best])
    print("round %d of %d done" % (r + 1, args.rounds), file=sys.stderr, flush=True)

cpu = os.environ.get("CASTOR_CPU", "")
date = time.strftime("%Y-%m-%d", time.gmtime())
out_path = "bench/results/cpu-interleaved-%s%s.md" % (cpu + "-" if cpu else "", date)
model_name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
simd = [f for f in flags if f in ("sse4_2", "avx", "avx2", "fma", "f16c") or f.startswith("avx512")]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "?"
dirty = subprocess.run(["git", "diff", "--quiet"]).returncode != 0
version = subprocess.run([CASTOR, "--version"], capture_output=True, text=True).stdout.strip()
lines = [
    "# castor CPU benchmark, interleaved rounds, %s" % date,
    "",
    "- machine: %s, %d CPUs online, %d threads for everyone" % (model_name, os.cpu_count(), args.threads),
    "- CPU flags: %s" % " ".join(simd),
    "- castor's CPU path: %s (CASTOR_CPU); OpenBLAS kernels: %s (OPENBLAS_CORETYPE)"
    % (cpu or "host", os.environ.get("OPENBLAS_CORETYPE", "auto-detected")),
    "- commit: %s%s; %s; numpy %s%s" % (commit, " + uncommitted changes" if dirty else "", version, np.__version__,
                                         ", torch " + __import__("torch").__version__ if torch_model is not None else ""),
    "- command: `%s%s/usr/bin/python3 bench/cpu/interleave.py --build %s --rounds %d --threads %d`"
    % ("CASTOR_CPU=%s " % cpu if cpu else "",
       "OPENBLAS_CORETYPE=%s " % os.environ["OPENBLAS_CORETYPE"] if "OPENBLAS_CORETYPE" in os.environ else "",
       args.build, args.rounds, args.threads),
    "- each round times every measure on castor, then on its peers right after (medians of %d runs at batch 1, "
    "5 otherwise); castor / best peer is a time ratio (below 1.00x castor is faster), taken per round" % reps(1),
    "",
    "| measure | castor ms (GFLOP/s) | best peer ms (GFLOP/s) | castor / best peer: median | range over rounds |",
    "|---|---|---|---|---|",
]
for lab, model, batch, flops, fns in measures:
    c = statistics.median(times[lab]["castor"])
    peer = max(set(best_peer[lab]), key=best_peer[lab].count)
    p = statistics.median(times[lab][peer])
    lines.append("| %s | %.3f (%.0f) | %s %.3f (%.0f) | %.2fx | %.2fx - %.2fx |" % (
        lab, c, flops / c / 1e6, peer, p, flops / p / 1e6, statistics.median(ratios[lab]), min(ratios[lab]),
        max(ratios[lab])))
lines += ["", "Per round (castor / best peer): " + "; ".join(
    "%s: %s" % (lab, " ".join("%.2f" % v for v in ratios[lab])) for lab, *_ in measures)]
os.makedirs("bench/results", exist_ok=True)
with open(out_path, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
print("wrote " + out_path)
