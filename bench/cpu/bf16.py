# SPDX-License-Identifier: Apache-2.0
"""bench/cpu/bf16.py: the AVX512-BF16 GEMM family (codegen/cpu/gemm/) against
castor's own f32 GEMM and against PyTorch bf16, in interleaved rounds (from
the repository root):

    python3 bench/cpu/bf16.py --build build --old-build ../main/build [--rounds 3] [--threads 2]

(the peer is the PyTorch of that python3: the pyenv one has torch 2.x from
PyPI; Debian's /usr/bin/python3 has python3-torch 1.13)

Every round times, one right after the other:

  - GEMM 4096^3: castor under bfloat16 (bf16 x bf16 -> f32 sums on
    vdpbf16ps) and under float32 (f32 FMAs), and PyTorch's bf16 matmul;
  - the seed MLP (samples/mnist_mlp.cast) forward under mixed_bfloat16 at
    batch 2048 and 8192 against PyTorch bf16: the faster of
    torch.autocast(bfloat16) around the f32 module and the module converted
    to bfloat16, in inference mode;
  - the seed MLP at batch 1 under mixed_bfloat16, this build against
    --old-build (the FMA family before this change: "no slower than today");
  - the seed MLP training step under mixed_bfloat16 at batch 8192 (RMSprop,
    sparse categorical cross-entropy on float32 probabilities): `castor
    train` (the last epoch's time per sample, which excludes the compile)
    against PyTorch with autocast(bfloat16) around the forward pass, f32
    weights and optimizer, the step timed from the forward to the update;
    also in CPU time of all threads (castor: a 3-epoch run's less a 1-epoch
    run's, per step; torch: time.process_time per step), which a loaded
    machine disturbs less than wall time.

    python3 bench/cpu/bf16.py --only train,mlp8192 --out FILE   # a subset

castor runs as `castor run --repeat R` in a fresh process per measure, so
its compile is not timed. Ratios are castor / peer times per round; the
report gives their median and range. Writes bench/results/cpu-bf16-DATE.md.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--old-build", help="castor before this change, for batch 1 (else this build at x86-64-v4)")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--train-steps", type=int, default=4)
ap.add_argument("--only", help="comma-separated measures to run (gemm,mlp2048,mlp8192,mlp1,train; default all)")
ap.add_argument("--out", help="the report's path (default bench/results/cpu-bf16-DATE.md)")
args = ap.parse_args()
for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "CASTOR_NUM_THREADS"):
    os.environ[v] = str(args.threads)
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import peers  # noqa: E402

torch.set_num_threads(args.threads)
CASTOR = os.path.join(args.build, "castor")
OLD = os.path.join(args.old_build, "castor") if args.old_build else None
MODEL = "samples/mnist_mlp.cast"
tmp = tempfile.mkdtemp()


def castor_ms(castor, model, batch, policy, reps, env=None):
    cmd = [castor, "run", model, "--batch", str(batch), "--repeat", str(reps), "--threads", str(args.threads),
           "--policy", policy]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    m = re.search(r"^time: median ([0-9.]+) ms", out.stdout, re.M)
    if out.returncode or not m:
        sys.exit("bf16: %s failed: %s" % (" ".join(cmd), out.stderr.strip()))
    return float(m.group(1))


gemm = os.path.join(tmp, "gemm4096.cast")
with open(gemm, "w") as f:
    f.write("model gemm\nx = input(shape=[4096])\ny = dense(x, units=4096, use_bias=false)\noutput y\n")
ta = torch.randn(4096, 4096).bfloat16()
tb = torch.randn(4096, 4096).bfloat16()

ws = peers.weights()
f32_module = peers.torch_mlp(ws, args.threads)
bf16_module = peers.torch_mlp(ws, args.threads).bfloat16()


def torch_mlp_ms(batch):
    x = torch.from_numpy(peers.mlp_input(batch))
    xb = x.bfloat16()
    with torch.inference_mode():
        def autocast():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return f32_module(x)
        a = peers.median_ms(autocast, 5)
        b = peers.median_ms(lambda: bf16_module(xb), 5)
    return min(a, b), "autocast" if a <= b else "bf16 module"


def torch_mlp_cpu_ms(batch, how):
    """CPU ms (every thread) of one forward pass, in the faster of the two ways (median of 5)."""
    x = torch.from_numpy(peers.mlp_input(batch))
    xb = x.bfloat16()
    cpus = []
    with torch.inference_mode():
        for _ in range(6):
            c0 = time.process_time()
            if how == "autocast":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    f32_module(x)
            else:
                bf16_module(xb)
            cpus.append((time.process_time() - c0) * 1e3)
    return statistics.median(cpus[1:])


# training data: random features in [0, 1) and labels, 4 steps of 8192 a pass
TRAIN_B = 8192
n_train = TRAIN_B * args.train_steps
rng = np.random.default_rng(0)
xtr = rng.uniform(0, 1, (n_train, 784)).astype(np.float32)
ytr = rng.integers(0, 10, n_train).astype(np.int64)
np.save(os.path.join(tmp, "x.npy"), xtr)
np.save(os.path.join(tmp, "y.npy"), ytr)


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def castor_train(epochs):
    """One `castor train` run: (its last epoch's ms per step, the process's CPU seconds)."""
    cmd = [CASTOR, "train", MODEL, "--x", os.path.join(tmp, "x.npy"), "--y", os.path.join(tmp, "y.npy"),
           "--batch-size", str(TRAIN_B), "--epochs", str(epochs), "--policy", "mixed_bfloat16", "--threads",
           str(args.threads), "--no-shuffle"]
    c0 = children_cpu_s()
    out = subprocess.run(cmd, capture_output=True, text=True)
    cpu = children_cpu_s() - c0
    us = re.findall(r"Epoch \d+/\d+ - [0-9.]+s ([0-9.]+)us/sample", out.stdout)
    if out.returncode or not us:
        sys.exit("bf16: %s failed: %s" % (" ".join(cmd), out.stderr.strip()))
    return float(us[-1]) * TRAIN_B / 1000.0, cpu


def castor_train_ms():
    """The second epoch's wall ms per step, and the CPU ms per step of all
    threads: the CPU time of a 3-epoch run less a 1-epoch run's, over the
    steps of 2 epochs (compile, data loading and the first epoch cancel)."""
    wall, cpu3 = castor_train(3)
    _, cpu1 = castor_train(1)
    return wall, (cpu3 - cpu1) * 1e3 / (2 * args.train_steps)


def torch_train_ms():
    """The median wall ms of the second pass's steps, and their CPU ms
    (time.process_time: every thread of the process)."""
    model = peers.torch_mlp(ws, args.threads).train()
    model[-1] = torch.nn.Identity()  # softmax in f32 below, as Keras's loss on probabilities
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.9, eps=1e-7)
    xs = torch.from_numpy(xtr)
    ys = torch.from_numpy(ytr)
    times, cpus = [], []
    for ep in range(2):
        for s in range(args.train_steps):
            x, y = xs[s * TRAIN_B:(s + 1) * TRAIN_B], ys[s * TRAIN_B:(s + 1) * TRAIN_B]
            t0, c0 = time.perf_counter(), time.process_time()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                z = model(x)
            p = torch.softmax(z.float(), dim=1)
            p = p / p.sum(dim=1, keepdim=True)
            loss = -torch.log(p.clamp(1e-7, 1 - 1e-7).gather(1, y[:, None])).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if ep == 1:
                times.append((time.perf_counter() - t0) * 1e3)
                cpus.append((time.process_time() - c0) * 1e3)
    return statistics.median(times), statistics.median(cpus)


load0 = open("/proc/loadavg").read().split()[:3]
measures = ["gemm", "mlp2048", "mlp8192", "mlp1", "train"]
if args.only:
    bad = [m for m in args.only.split(",") if m not in measures]
    if bad:
        sys.exit("bf16: --only: unknown measure(s) %s (known: %s)" % (",".join(bad), ",".join(measures)))
    measures = [m for m in measures if m in args.only.split(",")]
res = {m: [] for m in measures}
cpu_mlp = {}  # batch -> per round: (castor CPU ms per run, torch CPU ms per run)
cpu_train = []  # per round: (castor CPU ms per step, torch CPU ms per step)  # per round: (castor ms, peer ms, peer name)
for r in range(args.rounds):
    if "gemm" in measures:
        bf = castor_ms(CASTOR, gemm, 4096, "bfloat16", 3)
        f32 = castor_ms(CASTOR, gemm, 4096, "float32", 3)
        tt = peers.median_ms(lambda: torch.mm(ta, tb), 3)
        res["gemm"].append((bf, f32, "castor float32", tt))
    for b in (2048, 8192):
        if "mlp%d" % b not in measures:
            continue
        c0 = children_cpu_s()
        c = castor_ms(CASTOR, MODEL, b, "mixed_bfloat16", 5)
        c1 = children_cpu_s()
        castor_ms(CASTOR, MODEL, b, "mixed_bfloat16", 1)
        c_cpu = ((c1 - c0) - (children_cpu_s() - c1)) * 1e3 / 4  # 6 runs less 2: per run
        t, how = torch_mlp_ms(b)
        res["mlp%d" % b].append((c, t, "torch bf16 (%s)" % how))
        cpu_mlp.setdefault(b, []).append((c_cpu, torch_mlp_cpu_ms(b, how)))
    if "mlp1" in measures:
        c = castor_ms(CASTOR, MODEL, 1, "mixed_bfloat16", 200)
        if OLD:
            o = castor_ms(OLD, MODEL, 1, "mixed_bfloat16", 200)
            res["mlp1"].append((c, o, "castor before this change (FMA family)"))
        else:  # this build held to the FMA family (x86-64-v4: AVX-512 without BF16)
            o = castor_ms(CASTOR, MODEL, 1, "mixed_bfloat16", 200, {"CASTOR_CPU": "x86-64-v4"})
            res["mlp1"].append((c, o, "castor, CASTOR_CPU=x86-64-v4 (FMA family)"))
    if "train" in measures:
        c, c_cpu = castor_train_ms()
        t, t_cpu = torch_train_ms()
        res["train"].append((c, t, "torch autocast bf16"))
        cpu_train.append((c_cpu, t_cpu))
    print("round %d of %d: %s" % (r + 1, args.rounds, {m: res[m][-1] for m in measures if res[m]}), file=sys.stderr,
          flush=True)

date = time.strftime("%Y-%m-%d", time.gmtime())
model_name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
simd = [f for f in flags if f in ("avx", "avx2", "fma", "f16c") or f.startswith("avx512") or f.startswith("amx")]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "diff", "--quiet"]).returncode != 0
path = subprocess.run([CASTOR, "run", MODEL, "--batch", "1", "--repeat", "1", "--stats"], capture_output=True,
                      text=True)
load = open("/proc/loadavg").read().split()[:3]
lines = [
    "# castor bf16 GEMM family (AVX512-BF16) benchmark, interleaved rounds, %s" % date,
    "",
    "- machine: %s, %d CPUs online, %d threads for everyone; load average at the end %s" % (
        model_name, os.cpu_count(), args.threads, " ".join(load)),
    "- CPU flags: %s" % " ".join(simd),
    "- commit: %s%s; torch %s (mkldnn %s, CPU capability %s)" % (
        commit, " + uncommitted changes" if dirty else "", torch.__version__, torch.backends.mkldnn.is_available(),
        getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "?")()),
    "- command: `%s bench/cpu/bf16.py --build %s%s --rounds %d --threads %d%s`" % (
        sys.executable, args.build, " --old-build " + args.old_build if args.old_build else "", args.rounds,
        args.threads, " --only " + args.only if args.only else ""),
    "- castor: `castor run MODEL --batch B --repeat R --policy P` (median of R: 3 for the GEMM, 5 for the MLP, "
    "200 at batch 1); torch: median of 5 (3 for the GEMM); the train step: castor's last epoch of 3, torch's median "
    "step of its second pass; its CPU time: castor's 3-epoch run less a 1-epoch run, per step",
    "- load average when the rounds started: %s" % " ".join(load0),
    "",
    "| measure | castor ms | other ms | other | castor / other: median | range |",
    "|---|---|---|---|---|---|",
]
labels = {"gemm": "GEMM 4096^3, castor bfloat16 (vdpbf16ps)", "mlp2048": "seed MLP mixed_bfloat16, batch 2048",
          "mlp8192": "seed MLP mixed_bfloat16, batch 8192", "mlp1": "seed MLP mixed_bfloat16, batch 1",
          "train": "seed MLP training step mixed_bfloat16, batch 8192"}
for m in measures:
    rows = res[m]
    if not rows:
        continue
    c = statistics.median(x[0] for x in rows)
    o = statistics.median(x[1] for x in rows)
    ratios = [x[0] / x[1] for x in rows]
    lines.append("| %s | %.3f | %.3f | %s | %.2fx | %.2fx - %.2fx |" % (
        labels[m], c, o, rows[0][2], statistics.median(ratios), min(ratios), max(ratios)))
if res.get("gemm"):
    g = res["gemm"]
    fl = 2 * 4096 ** 3
    lines += ["", "GEMM 4096^3: castor bf16 %.0f GFLOP/s, castor f32 %.0f GFLOP/s (bf16 speed-up %.2fx, per-round: %s); "
              "torch bf16 matmul %.0f GFLOP/s" % (
                  fl / statistics.median(x[0] for x in g) / 1e6, fl / statistics.median(x[1] for x in g) / 1e6,
                  statistics.median(x[1] / x[0] for x in g), " ".join("%.2f" % (x[1] / x[0]) for x in g),
                  fl / statistics.median(x[3] for x in g) / 1e6)]
for b, rows in sorted(cpu_mlp.items()):
    r = [c / t for c, t in rows]
    lines += ["", "MLP forward, batch %d, in CPU time (all threads): castor %.0f ms (a 6-run process less a 2-run one, "
              "per run), torch %.0f ms (medians); castor / torch %.2fx (per round: %s)" % (
                  b, statistics.median(c for c, _ in rows), statistics.median(t for _, t in rows),
                  statistics.median(r), " ".join("%.2f" % x for x in r))]
if cpu_train:
    r = [c / t for c, t in cpu_train]
    lines += ["", "Training step in CPU time (all threads; less sensitive to a loaded machine than wall time): castor "
              "%.0f ms, torch %.0f ms per step (medians); castor / torch %.2fx (per round: %s)" % (
                  statistics.median(c for c, _ in cpu_train), statistics.median(t for _, t in cpu_train),
                  statistics.median(r), " ".join("%.2f" % x for x in r))]
os.makedirs("bench/results", exist_ok=True)
out = args.out or "bench/results/cpu-bf16-%s.md" % date
with open(out, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
print("wrote " + out)
