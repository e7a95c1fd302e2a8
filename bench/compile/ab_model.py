# SPDX-License-Identifier: Apache-2.0
"""bench/compile/ab_model.py: one model's JIT compile time and run time on two
castor builds, interleaved run by run (from the repository root):

    /usr/bin/python3 bench/compile/ab_model.py OLD_CASTOR NEW_CASTOR MODEL \\
        [--policies float32,mixed_bfloat16] [--rounds 5] [--repeat 20] [--batch B] [--fifo] [--out FILE.md]

Each round runs, for every policy, `castor run MODEL --policy P --repeat R`
on OLD and right after on NEW (the order swapped every other round, so that
neither build always runs second), and reads castor's own lines: `compile:`
(wall ms of castor_compile and the CPU ms of every thread in it) and `time:`
(median ms of R runs after a warm-up). The table has, per build and policy,
the median over rounds and the range, and NEW / OLD of the medians; the load
average (1 min) is recorded before every round. Needs only the standard
library. Writes FILE.md when --out is given, and prints the report.

--fifo runs each castor under `chrt -f 50` (root or CAP_SYS_NICE), as
bench/compile/policies.py does: on a machine that is never idle its threads
run ahead of every normal process, which gives the wall times an idle
machine would; runs are 0.5 s apart so that the others get the CPUs back.
Without it, on a busy machine, the CPU times are the measure of the work.
"""
import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time

COMPILE = re.compile(r"^compile: ([0-9.]+) ms \(cpu ([0-9.]+) ms\)", re.M)
RUN = re.compile(r"^time: median ([0-9.]+) ms", re.M)


def run_once(castor, model, policy, repeat, batch, fifo):
    cmd = (["chrt", "-f", "50"] if fifo else []) + [castor, "run", model, "--policy", policy, "--repeat", str(repeat)]
    if batch:  # static shapes of that batch; without, the model's (N symbolic, run with 1 row)
        cmd += ["--batch", str(batch)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    c, t = COMPILE.search(r.stdout), RUN.search(r.stdout)
    if r.returncode != 0 or not c or not t:
        sys.exit("ab_model: %s failed (status %d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    return float(c.group(1)), float(c.group(2)), float(t.group(1))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fmt(v):
    return "%.4g [%.4g-%.4g]" % (statistics.median(v), min(v), max(v))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("model")
    ap.add_argument("--policies", default="float32,mixed_bfloat16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--fifo", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    policies = a.policies.split(",")
    res = {(b, p): [] for b in ("old", "new") for p in policies}
    loads = []
    for r in range(a.rounds):
        loads.append(os.getloadavg()[0])
        for p in policies:
            order = [("old", a.old), ("new", a.new)]
            if r % 2:
                order.reverse()
            for name, castor in order:
                res[(name, p)].append(run_once(castor, a.model, p, a.repeat, a.batch, a.fifo))
                time.sleep(0.5)
    lines = [
        "## %s%s: compile and run, old vs new, interleaved" % (os.path.basename(a.model),
                                                             ", --batch %d" % a.batch if a.batch else ""),
        "",
        "- date: %s; machine: %s, %d CPUs; load average (1 min) before each round: %s"
        % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cpu_model(), os.cpu_count(),
           ", ".join("%.1f" % l for l in loads)),
        "- command: `/usr/bin/python3 bench/compile/ab_model.py %s %s %s --policies %s --rounds %d --repeat %d%s%s`"
        % (a.old, a.new, a.model, a.policies, a.rounds, a.repeat, " --batch %d" % a.batch if a.batch else "",
           " --fifo" if a.fifo else ""),
        "- cells: median over %d rounds [min-max], ms; compile = `castor_compile` (wall, and CPU of every "
        "thread); run = median of %d runs (`castor run --repeat`)" % (a.rounds, a.repeat),
        "",
        "| policy | measure | old | new | new / old |",
        "|---|---|---:|---:|---:|",
    ]
    for p in policies:
        for i, what in enumerate(("compile wall", "compile CPU", "run")):
            o = [x[i] for x in res[("old", p)]]
            n = [x[i] for x in res[("new", p)]]
            lines.append("| %s | %s | %s | %s | %.2f |" % (p, what, fmt(o), fmt(n),
                                                           statistics.median(n) / statistics.median(o)))
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
