#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Single conv2d layers on one thread, timed in thread CPU time, so that a
loaded machine (other processes taking turns on the core) changes the
numbers less than wall time: castor's ahead-of-time object of each layer
(`castor build --emit=obj`, single-threaded) linked with cpu_time_main.c,
for one or more builds (before/after a change), and PyTorch's conv2d +
relu (channels_last, oneDNN) with torch.set_num_threads(1) timed with
time.thread_time(). Interleaved rounds: build A, build B, ..., PyTorch,
then again.

    python3 bench/conv/cpu_time.py --build build --layers c128_28,c256_14,c256_7
    python3 bench/conv/cpu_time.py --build build-before --build build --no-torch

The layers and the models are layers.py's (Conv2D 3x3, same, bias, relu,
batch 32). Prints per layer and build the median over rounds of each
round's median time, castor/PyTorch and build/first-build ratios per round,
and the output hash (the same for bit-identical builds). What remains of a
loaded machine: shared L3 and memory bandwidth, and frequency.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layers import LAYERS, selected, torch_ms  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def build_driver(build, cast_path, out_dir, x_elems, y_elems, policy):
    os.makedirs(out_dir, exist_ok=True)
    obj = os.path.join(out_dir, "m.o")
    subprocess.run([os.path.join(build, "castor"), "build", cast_path, "--batch", "32", "--emit=obj", "--policy", policy,
                    "-o", obj], check=True, capture_output=True, text=True)
    hdr = os.path.join(out_dir, "m.h")
    prefix = re.search(r"^int (\w+)_run\(", open(hdr).read(), re.M).group(1)
    exe = os.path.join(out_dir, "run")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", f'-DHDR="{hdr}"', f"-DPFX={prefix}", f"-DXN={x_elems}",
                    f"-DYN={y_elems}", os.path.join(HERE, "cpu_time_main.c"), obj, "-L" + build, "-lcastor_runtime",
                    "-lcastor_util", "-lm", "-lpthread", "-o", exe], check=True)
    return exe


def castor_run(exe, repeat):
    out = subprocess.run([exe, str(repeat)], check=True, capture_output=True, text=True).stdout
    m = re.search(r"min ([0-9.]+) median ([0-9.]+) hash (\w+)", out)
    return float(m.group(2)), m.group(3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append", help="castor build directory (repeat for before/after)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--policy", default="float32", choices=["float32", "mixed_bfloat16"])
    ap.add_argument("--layers", default=",".join(l[0] for l in LAYERS))
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    builds = args.build or ["build"]
    for b in builds:
        if not os.access(os.path.join(b, "castor"), os.X_OK):
            sys.exit(f"cpu_time: no castor in {b} (build it: cmake -S . -B {b} && cmake --build {b} -j2)")
    torch = None
    if not args.no_torch:
        import torch
        torch.set_num_threads(1)
        tdt = torch.float32 if args.policy == "float32" else torch.bfloat16
        print(f"torch {torch.__version__}, 1 thread, {tdt}")
    print(f"castor {args.policy}, builds {builds}, batch 32, {args.rounds} rounds of {args.repeat} runs, thread CPU time")
    print(f"load average before: {os.getloadavg()}")
    tmp = tempfile.mkdtemp(prefix="castor-conv-cpu-")
    for name, hw, c, f, path in selected(args.layers, tmp, args.policy):
        n_x, n_y = 32 * hw * hw * c, 32 * hw * hw * f
        exes = [build_driver(b, path, os.path.join(tmp, f"{name}.{i}"), n_x, n_y, args.policy) for i, b in enumerate(builds)]
        if torch:
            x = torch.randn(32, c, hw, hw).to(tdt).contiguous(memory_format=torch.channels_last)
            w = torch.randn(f, c, 3, 3).to(tdt).contiguous(memory_format=torch.channels_last)
            bias = torch.randn(f).to(tdt)
        flops = 2.0 * 32 * hw * hw * f * 9 * c
        cs = [[] for _ in builds]
        hashes = [set() for _ in builds]
        ts = []
        for _ in range(args.rounds):
            for i, exe in enumerate(exes):
                ms, h = castor_run(exe, args.repeat)
                cs[i].append(ms), hashes[i].add(h)
            if torch:
                ts.append(torch_ms(x, w, bias, args.repeat, clock=time.thread_time))
        line = f"{name:14s} {hw:3d}x{hw:<3d} {c:3d}->{f:3d}"
        for i, b in enumerate(builds):
            med = statistics.median(cs[i])
            line += f" | {b} {med:7.3f} ms ({flops / med / 1e6:6.1f} GFLOP/s) hash {','.join(sorted(hashes[i]))[:8]}"
            if i:
                r = [cs[i][k] / cs[0][k] for k in range(args.rounds)]
                line += f" /{builds[0]} {' '.join(f'{v:.3f}' for v in r)}"
        if torch:
            tmed = statistics.median(ts)
            line += f" | torch {tmed:7.3f} ms ({flops / tmed / 1e6:6.1f})"
            for i, b in enumerate(builds):
                r = [cs[i][k] / ts[k] for k in range(args.rounds)]
                line += f" | {b}/torch {' '.join(f'{v:.2f}' for v in r)} (torch speed x{1 / statistics.median(r):.2f})"
        print(line, flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
