#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""castor against ONNX Runtime (CPU execution provider) on the exported ONNX
models of tests/onnx/models, in interleaved rounds: castor, ORT, castor, ORT...

    pip install onnxruntime numpy        # the peer, for benchmarks only
    python3 bench/onnx/ort.py --build build --rounds 5 --threads 2

Each round times `castor run MODEL --batch B --repeat R --threads T` (the
median of its R runs, kernels only: the input is already in place) and an
ORT session with intra_op_num_threads=T on the same batch (the median of R
runs of session.run). Prints the per-round ratios castor/ORT and their
median; a ratio below 1 means castor is faster.
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "tests", "onnx", "models")


def castor_ms(build, model, batch, repeat, threads, policy):
    out = subprocess.run([os.path.join(build, "castor"), "run", model, "--batch", str(batch), "--repeat", str(repeat),
                          "--threads", str(threads), "--policy", policy], capture_output=True, text=True, check=True)
    return float(re.search(r"time: median ([0-9.]+) ms", out.stdout + out.stderr).group(1))


def ort_ms(sess, x, repeat):
    name = sess.get_inputs()[0].name
    sess.run(None, {name: x})
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--models", default="mlp.opset17,cnn.opset17,resnet.opset17")
    ap.add_argument("--batches", default="1,64", help="comma-separated batch sizes")
    ap.add_argument("--policies", default="float32,mixed_bfloat16", help="castor's policies, comma-separated")
    args = ap.parse_args()
    print(f"onnxruntime {ort.__version__}, threads {args.threads}, {args.rounds} rounds of {args.repeat} runs")
    for name in args.models.split(","):
        model = os.path.join(MODELS, name + ".onnx")
        x0 = np.load(os.path.join(MODELS, name.split(".")[0] + ".x.npy"))
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        for batch in (int(b) for b in args.batches.split(",")):
            x = np.ascontiguousarray(np.resize(x0, (batch,) + x0.shape[1:]).astype(np.float32))
            for policy in args.policies.split(","):
                ratios, cs, os_ = [], [], []
                for _ in range(args.rounds):
                    c = castor_ms(args.build, model, batch, args.repeat, args.threads, policy)
                    o = ort_ms(sess, x, args.repeat)
                    cs.append(c), os_.append(o), ratios.append(c / o)
                print(f"{name} batch {batch:3d} castor {policy:15s} {statistics.median(cs):8.4f} ms | ORT float32 "
                      f"{statistics.median(os_):8.4f} ms | castor/ORT per round "
                      f"{' '.join(f'{r:.2f}' for r in ratios)} median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
