#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Single conv2d layers, castor against PyTorch (channels_last, oneDNN), in
interleaved rounds: castor, PyTorch, castor, PyTorch...

    python3 bench/conv/layers.py --build build --rounds 5 --threads 2
    python3 bench/conv/layers.py --policy mixed_bfloat16   # against PyTorch bf16

Each layer is Keras's Conv2D 3x3, padding same, stride 1, bias, relu, on a
batch of 32 NHWC images (the issue's shapes: 32 to 256 channels, 56x56 to
7x7, and first layers with 1 or 3 input channels). A round times `castor run
LAYER.cast --batch 32 --repeat R --threads T` (the median of its R runs,
kernels only) and then PyTorch's conv2d + relu on a channels_last float32
(or bfloat16) input and weight with torch.set_num_threads(T) (the median of
R calls after one warm-up). Prints per-round ratios castor/PyTorch (time;
below 1 castor is faster), their median, castor's GFLOP/s, and the load
average before and after.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

# (name, H=W, C in, F out)
LAYERS = [
    ("first_c1_56", 56, 1, 32),
    ("first_c3_56", 56, 3, 32),
    ("first_c3_112", 112, 3, 32),
    ("c32_56", 56, 32, 32),
    ("c64_56", 56, 64, 64),
    ("c128_28", 28, 128, 128),
    ("c256_14", 14, 256, 256),
    ("c256_7", 7, 256, 256),
]


def cast_text(name, hw, c, f, policy):
    return (f"model {name}\npolicy {policy}\n"
            f"x = input(shape=[{hw}, {hw}, {c}])\n"
            f"y = conv2d(x, filters={f}, kernel_size=3, padding=same, activation=relu, name=conv)\n"
            "output y\n")


def selected(names, tmp, policy):
    """The LAYERS rows named in the comma-separated names, in LAYERS's
    order, each with its .cast model written under tmp; an unknown name is
    an error."""
    want = names.split(",")
    unknown = [n for n in want if n not in {l[0] for l in LAYERS}]
    if unknown:
        sys.exit(f"{os.path.basename(sys.argv[0])}: unknown layer {', '.join(unknown)} "
                 f"(the layers: {', '.join(l[0] for l in LAYERS)})")
    rows = []
    for name, hw, c, f in LAYERS:
        if name in want:
            path = os.path.join(tmp, name + ".cast")
            with open(path, "w") as fh:
                fh.write(cast_text(name, hw, c, f, policy))
            rows.append((name, hw, c, f, path))
    return rows


def castor_ms(build, path, batch, repeat, threads, policy):
    out = subprocess.run([os.path.join(build, "castor"), "run", path, "--batch", str(batch), "--repeat", str(repeat),
                          "--threads", str(threads), "--policy", policy], capture_output=True, text=True, check=True)
    return float(re.search(r"time: median ([0-9.]+) ms", out.stdout + out.stderr).group(1))


def torch_ms(x, w, b, repeat, clock=time.perf_counter):
    """PyTorch's conv2d + relu: the median of repeat runs on clock (wall
    time; cpu_time.py passes time.thread_time)."""
    with torch.no_grad():
        torch.relu(torch.nn.functional.conv2d(x, w, b, padding=1))
        ts = []
        for _ in range(repeat):
            t0 = clock()
            torch.relu(torch.nn.functional.conv2d(x, w, b, padding=1))
            ts.append((clock() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--policy", default="float32", choices=["float32", "mixed_bfloat16"])
    ap.add_argument("--layers", default=",".join(l[0] for l in LAYERS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tdt = torch.float32 if args.policy == "float32" else torch.bfloat16
    print(f"torch {torch.__version__}, mkldnn {torch.backends.mkldnn.is_available()}, threads {args.threads}, "
          f"batch {args.batch}, castor {args.policy} vs torch {tdt}, {args.rounds} rounds of {args.repeat} runs")
    print(f"load average before: {os.getloadavg()}")
    tmp = tempfile.mkdtemp(prefix="castor-conv-bench-")
    for name, hw, c, f, path in selected(args.layers, tmp, args.policy):
        x = torch.randn(args.batch, c, hw, hw).to(tdt).contiguous(memory_format=torch.channels_last)
        w = torch.randn(f, c, 3, 3).to(tdt).contiguous(memory_format=torch.channels_last)
        b = torch.randn(f).to(tdt)
        flops = 2.0 * args.batch * hw * hw * f * 9 * c
        ratios, cs, ts = [], [], []
        for _ in range(args.rounds):
            cm = castor_ms(args.build, path, args.batch, args.repeat, args.threads, args.policy)
            tm = torch_ms(x, w, b, args.repeat)
            cs.append(cm), ts.append(tm), ratios.append(cm / tm)
        cmed, tmed = statistics.median(cs), statistics.median(ts)
        print(f"{name:14s} {hw:3d}x{hw:<3d} {c:3d}->{f:3d} castor {cmed:8.3f} ms ({flops / cmed / 1e6:6.1f} GFLOP/s) | "
              f"torch {tmed:8.3f} ms ({flops / tmed / 1e6:6.1f}) | castor/torch "
              f"{' '.join(f'{r:.2f}' for r in ratios)} median {statistics.median(ratios):.2f} "
              f"(torch speed x{1 / statistics.median(ratios):.2f})", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
