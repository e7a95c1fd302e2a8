# SPDX-License-Identifier: Apache-2.0
"""profile.py CASTOR SRCDIR TMPDIR: castor run --profile, --profile-json and
the AOT executable's --benchmark on the CNN sample (samples/fashion_cnn.cast).

- the table's kernel shares and layer shares each sum to the kernels' share
  of the measured run time, which is at least 95% (what is left is the
  runtime's own work between launches);
- every kernel of the program is a row, and every layer a kernel names;
- the trace is valid JSON in the Chrome trace format (traceEvents of ph "X"
  with name, ts, dur, pid, tid; ts and dur in microseconds), one event per
  launch and run, each launch inside its run, and the kernels' durations
  sum to at least 95% of the runs';
- bad uses are errors (--profile on dump, an unwritable --profile-json);
- the AOT executable's --benchmark N prints N runs' min <= median, and
  leaves its outputs bit-identical;
- castor summary / dump --summary print the reviewed layer table.
Only the standard library: json, re, subprocess.
"""
import json
import os
import re
import subprocess
import sys

castor, src, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(tmp, exist_ok=True)
model = os.path.join(src, "samples", "fashion_cnn.cast")
fails = []


def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def run(*args, ok=True):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=300)
    if ok and p.returncode != 0:
        print(p.stdout + p.stderr, file=sys.stderr)
        raise SystemExit("FAIL: %s exited %d" % (" ".join(args), p.returncode))
    return p


RUNS = 20
trace_path = os.path.join(tmp, "trace.json")
p = run(castor, "run", model, "--batch", "16", "--profile", "--repeat", str(RUNS), "--profile-json", trace_path,
        "--threads", "2")
out = p.stdout
head = re.search(r"profile: (\d+) runs of 'fashion_cnn' \(static shapes\) on 2 threads: ([0-9.]+) ms a run "
                 r"\(measured around each run\); kernels ([0-9.]+) ms \(([0-9.]+)%\), (\d+) launches", out)
if not head:
    raise SystemExit("FAIL: no profile header in:\n" + out)
runs, run_ms, kern_ms, kern_share, n_launches = (int(head[1]), float(head[2]), float(head[3]), float(head[4]),
                                                  int(head[5]))
if runs != RUNS:
    fail("%d runs profiled, asked %d" % (runs, RUNS))
if not 95.0 <= kern_share <= 100.0:
    fail("kernels take %.1f%% of the measured run time; expected 95-100%%" % kern_share)
if abs(kern_ms / run_ms * 100 - kern_share) > 0.2:
    fail("header share %.1f%% is not %.4f / %.4f ms" % (kern_share, kern_ms, run_ms))

tables = out.split("\n\n")
kernel_rows = [l for l in tables[1].splitlines()[1:]]
layer_rows = [l for l in tables[2].splitlines()[1:]]
# a kernel's name may carry its algorithm, "k2.conv2d_1.conv [winograd]"
row = re.compile(r"^(\S+)(?: \[[a-z]+\])?\s+(\S+)\s+([0-9.]+)\s+([0-9.]+)%\s+(\S+)\s+([0-9.]+ [kMG]?B)$")
kernels, layers = [], []
for lines, into in ((kernel_rows, kernels), (layer_rows, layers)):
    for l in lines:
        m = row.match(l)
        if not m:
            fail("not a table row: %r" % l)
            continue
        into.append((m[1], m[2], float(m[3]), float(m[4]), m[5], m[6]))
if len(kernels) != n_launches:
    fail("%d kernel rows for %d launches" % (len(kernels), n_launches))
want_layers = ["conv2d", "max_pooling2d", "conv2d_1", "max_pooling2d_1", "dropout", "dense"]
if [l[0] for l in layers] != want_layers:
    fail("layers %s, expected %s" % ([l[0] for l in layers], want_layers))
for what, rows in (("kernel", kernels), ("layer", layers)):
    share = sum(r[3] for r in rows)
    # each share is rounded to 0.1%
    if abs(share - kern_share) > 0.05 * len(rows) + 0.1:
        fail("%s shares sum to %.1f%%, the kernels' share is %.1f%%" % (what, share, kern_share))
    ms = sum(r[2] for r in rows)
    if abs(ms - kern_ms) > 0.0001 * len(rows) + 0.0001:
        fail("%s times sum to %.4f ms, the kernels' time is %.4f ms" % (what, ms, kern_ms))
# the convolutions and the dense layer are GEMMs: GFLOP/s; pooling is not
for name, layer, _, _, gflops, _ in kernels:
    if (layer in ("conv2d", "conv2d_1", "dense")) != (gflops != "-"):
        fail("kernel %s of layer %s: GFLOP/s %s" % (name, layer, gflops))

with open(trace_path) as f:
    trace = json.load(f)
events = trace["traceEvents"]
xs = [e for e in events if e.get("ph") == "X"]
for e in xs:
    for key in ("name", "ts", "dur", "pid", "tid"):
        if key not in e:
            fail("trace event without %s: %s" % (key, e))
    if not (isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0):
        fail("bad ts/dur: %s" % e)
run_events = [e for e in xs if e.get("cat") == "run"]
launch_events = [e for e in xs if e.get("cat") != "run"]
if len(run_events) != RUNS or len(launch_events) != RUNS * n_launches:
    fail("trace has %d runs and %d launches; expected %d and %d" % (len(run_events), len(launch_events), RUNS,
                                                                   RUNS * n_launches))
for i, r in enumerate(run_events):
    inside = [e for e in launch_events if r["ts"] <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 0.002]
    if len(inside) != n_launches:
        fail("run %d holds %d launches, expected %d" % (i, len(inside), n_launches))
k_us, r_us = sum(e["dur"] for e in launch_events), sum(e["dur"] for e in run_events)
if k_us < 0.95 * r_us:
    fail("trace: kernels %.1f us of the runs' %.1f us (< 95%%)" % (k_us, r_us))
if {e["args"]["layer"] for e in launch_events} != set(want_layers):
    fail("trace layers %s" % {e["args"]["layer"] for e in launch_events})

# bad uses
p = run(castor, "dump", model, "--profile", ok=False)
if p.returncode != 1 or "--profile and --profile-json are options of castor run" not in p.stderr:
    fail("dump --profile: %d %r" % (p.returncode, p.stderr))
p = run(castor, "run", model, "--profile-json", tmp, ok=False)
if p.returncode != 1 or "error" not in p.stderr:
    fail("--profile-json DIR: %d %r" % (p.returncode, p.stderr))
p = run(castor, "run", model, "--profile-json", ok=False)
if p.returncode != 1 or "--profile-json needs a file" not in p.stderr:
    fail("--profile-json without a file: %d %r" % (p.returncode, p.stderr))

# the AOT executable's --benchmark
exe = os.path.join(tmp, "fashion_cnn")
run(castor, "build", model, "-o", exe)
a = run(exe, "--batch", "4", "--output", os.path.join(tmp, "a.npy"))
b = run(exe, "--batch", "4", "--benchmark", "7", "--output", os.path.join(tmp, "b.npy"))
m = re.search(r"^benchmark: 7 runs at batch 4: min ([0-9.]+) ms, median ([0-9.]+) ms$", b.stdout, re.M)
if not m or not 0 < float(m[1]) <= float(m[2]):
    fail("--benchmark 7 printed: %r" % b.stdout)
if not b.stdout.startswith(a.stdout):
    fail("--benchmark changed the summary: %r vs %r" % (a.stdout, b.stdout))
with open(os.path.join(tmp, "a.npy"), "rb") as fa, open(os.path.join(tmp, "b.npy"), "rb") as fb:
    if fa.read() != fb.read():
        fail("--benchmark changed the output file")
for bad in ("0", "x", "-3"):
    p = run(exe, "--benchmark", bad, ok=False)
    want = "fashion_cnn: error: --benchmark needs a number of runs from 1 to 1000000, got '%s'\n" % bad
    if p.returncode != 1 or p.stderr != want:
        fail("--benchmark %s: %d %r" % (bad, p.returncode, p.stderr))

# castor summary (and dump --summary): the layers of the CNN under
# mixed_float16, against the reviewed text (params as in the sample's
# header: 34,826; 16-bit weights half their float32 bytes)
with open(os.path.join(src, "tests", "profile", "fashion_cnn_mixed_float16.summary")) as f:
    want = f.read()
for cmd in (["summary", model], ["dump", "--summary", model]):
    p = run(castor, *cmd, "--policy", "mixed_float16")
    if p.stdout != want:
        fail("castor %s:\n%s\nexpected:\n%s" % (" ".join(cmd), p.stdout, want))
p = run(castor, "dump", "--summary", "--train", model, ok=False)
if p.returncode != 1 or "--summary and --train exclude each other" not in p.stderr:
    fail("dump --summary --train: %d %r" % (p.returncode, p.stderr))
p = run(castor, "run", "--summary", model, ok=False)
if p.returncode != 1 or "--summary is an option of castor dump" not in p.stderr:
    fail("run --summary: %d %r" % (p.returncode, p.stderr))

if fails:
    raise SystemExit("%d failure(s)" % len(fails))
print("profile: %d kernels, %.1f%% of %.4f ms a run in kernels; trace of %d events; benchmark ok" %
      (n_launches, kern_share, run_ms, len(events)))
