# SPDX-License-Identifier: Apache-2.0
"""bench/compile/policies.py: the JIT compile time of samples/mnist_mlp.cast
under every dtype policy, for one or more builds, interleaved run by run
(from the repository root):

    /usr/bin/python3 bench/compile/policies.py [--runs 5] BUILD_DIR...

Each run takes `castor run samples/mnist_mlp.cast --policy P --repeat 1
--stats` for every policy and build in turn and reads its `compile:` line
(wall ms, and the process's CPU ms during the compile); the report gives the
median over runs of each, per policy and build, and the load average, since
a busy machine stretches the wall time but not the CPU time. The target
(issue 25): every policy within 150 ms wall. Writes
bench/results/compile-policies-DATE.md, or --out.

--fifo runs each castor under `chrt -f 50` (root or CAP_SYS_NICE): its
threads then run before every normal process, so a shared, busy machine
gives the wall time of an idle one (page faults and the kernel's work
included; the kernel's real-time throttling still leaves others 5% of each
second). Runs are 0.5 s apart then, so the others get the CPUs back.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=5)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--fifo", action="store_true")
ap.add_argument("--out")
ap.add_argument("builds", nargs="+")
args = ap.parse_args()
POLICIES = ["float32", "mixed_bfloat16", "mixed_float16", "bfloat16", "float16"]
res = {(b, p): [] for b in args.builds for p in POLICIES}
loads = []
for r in range(args.runs):
    for p in POLICIES:
        for b in args.builds:
            cmd = (["chrt", "-f", "50"] if args.fifo else []) + [
                os.path.join(b, "castor"), "run", "samples/mnist_mlp.cast", "--policy", p, "--repeat", "1",
                "--stats", "--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            m = re.search(r"^compile: ([0-9.]+) ms \(cpu ([0-9.]+) ms\)", out.stdout + out.stderr, re.M)
            if out.returncode or not m:
                sys.exit("policies: %s failed: %s" % (" ".join(cmd), out.stderr.strip()))
            res[(b, p)].append((float(m.group(1)), float(m.group(2))))
            if args.fifo:
                time.sleep(0.5)
    loads.append(open("/proc/loadavg").read().split()[0])
    print("run %d of %d done" % (r + 1, args.runs), file=sys.stderr, flush=True)

date = time.strftime("%Y-%m-%d", time.gmtime())
model_name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
lines = ["# castor compile time of samples/mnist_mlp.cast per policy, %s" % date, "",
         "- machine: %s, %d CPUs online; load average (1 min) after each run: %s" % (
             model_name, os.cpu_count(), " ".join(loads)),
         "- commit: %s; builds: %s" % (commit, ", ".join(args.builds)),
         "- command: `/usr/bin/python3 bench/compile/policies.py --runs %d%s %s`" % (
             args.runs, " --fifo" if args.fifo else "", " ".join(args.builds)),
         "- `compile:` line of `castor run --repeat 1 --stats --threads %d`, median of %d interleaved runs: "
         "wall ms (CPU ms of the process)" % (args.threads, args.runs), "",
         "| policy | " + " | ".join(args.builds) + " |", "|---|" + "---|" * len(args.builds)]
for p in POLICIES:
    cells = []
    for b in args.builds:
        v = res[(b, p)]
        cells.append("%.1f (%.1f)" % (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)))
    lines.append("| %s | %s |" % (p, " | ".join(cells)))
os.makedirs("bench/results", exist_ok=True)
out = args.out or "bench/results/compile-policies-%s.md" % date
with open(out, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
print("wrote " + out)
