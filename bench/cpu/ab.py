# SPDX-License-Identifier: Apache-2.0
"""bench/cpu/ab.py: interleave.py --vs-build: two castor builds, round by
round (see interleave.py's docstring). Each round runs every measure on the
new build (--build), then right after on the old one (--vs-build); the
report gives the median of the per-round ratios new / old and their range.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

MLP_FLOPS = 2 * (784 * 4096 + 4096 * 4096 + 4096 * 10)


def reps(batch):
    return 200 if batch <= 1 else 5


def run(castor, model, batch, repeat, threads):
    out = subprocess.run([castor, "run", model, "--batch", str(batch), "--repeat", str(repeat),
                          "--threads", str(threads)], capture_output=True, text=True)
    t = re.search(r"^time: median ([0-9.]+) ms", out.stdout, re.M)
    c = re.search(r"^compile: ([0-9.]+) ms", out.stdout, re.M)
    if out.returncode or not t or not c:
        sys.exit("ab: %s run %s failed: %s" % (castor, model, out.stderr.strip()))
    return float(t.group(1)), float(c.group(1))


def main(args):
    builds = {"new": os.path.join(args.build, "castor"), "old": os.path.join(args.vs_build, "castor")}
    for b in builds.values():
        if not os.access(b, os.X_OK):
            sys.exit("ab: no %s" % b)
    tmp = tempfile.mkdtemp()
    measures = []  # (label, model, batch, flops); batch None: compile time of the model
    for b in (1, 2048):
        measures.append(("seed MLP f32, batch %d" % b, "samples/mnist_mlp.cast", b, MLP_FLOPS * b))
    for m, k, n in ((4096, 4096, 4096), (8192, 784, 4096), (8192, 4096, 4096), (8192, 4096, 10)):
        path = os.path.join(tmp, "gemm_%d_%d.cast" % (k, n))
        with open(path, "w") as f:
            f.write("model gemm\nx = input(shape=[%d])\ny = dense(x, units=%d, use_bias=false)\noutput y\n" % (k, n))
        measures.append(("f32 GEMM %dx%dx%d" % (m, k, n), path, m, 2 * m * k * n))
    measures.append(("compile samples/mnist_mlp.cast (JIT, ms)", "samples/mnist_mlp.cast", None, 0))

    times = {lab: {"new": [], "old": []} for lab, *_ in measures}
    for r in range(args.rounds):
        for lab, model, batch, _ in measures:
            for which in ("new", "old"):
                if batch is None:  # compile: median of 3 fresh processes
                    v = statistics.median(run(builds[which], model, 1, 1, args.threads)[1] for _ in range(3))
                else:
                    v = run(builds[which], model, batch, reps(batch), args.threads)[0]
                times[lab][which].append(v)
        print("round %d of %d done" % (r + 1, args.rounds), file=sys.stderr, flush=True)

    cpu = os.environ.get("CASTOR_CPU", "")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    out_path = "bench/results/cpu-ab-%s%s.md" % (cpu + "-" if cpu else "", date)
    model_name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    versions = {w: subprocess.run([b, "--version"], capture_output=True, text=True).stdout.strip()
                for w, b in builds.items()}
    lines = [
        "# castor A/B, interleaved rounds, %s" % date,
        "",
        "- machine: %s, %d CPUs online, %d threads" % (model_name, os.cpu_count(), args.threads),
        "- new: %s (%s); old: %s (%s)" % (args.build, versions["new"], args.vs_build, versions["old"]),
        "- command: `%s/usr/bin/python3 bench/cpu/interleave.py --build %s --vs-build %s --rounds %d --threads %d`"
        % ("CASTOR_CPU=%s " % cpu if cpu else "", args.build, args.vs_build, args.rounds, args.threads),
        "- each round runs every measure on new, then right after on old (`castor run --repeat`: medians of %d "
        "runs at batch 1, 5 otherwise; compile: median of 3 processes); new / old is a time ratio per round" % reps(1),
        "",
        "| measure | new ms | old ms | new / old: median | range over rounds |",
        "|---|---|---|---|---|",
    ]
    for lab, *_ in measures:
        n, o = times[lab]["new"], times[lab]["old"]
        ratios = [a / b for a, b in zip(n, o)]
        lines.append("| %s | %.3f | %.3f | %.3fx | %.2fx - %.2fx |" % (
            lab, statistics.median(n), statistics.median(o), statistics.median(ratios), min(ratios), max(ratios)))
    os.makedirs("bench/results", exist_ok=True)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print("wrote " + out_path)
