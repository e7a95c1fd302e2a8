#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""castor against ONNX Runtime (CPU execution provider) on the transformers
exports of tests/onnx/models (bert.onnx, gpt2.onnx: 2 layers, hidden 64,
int64 input_ids and attention_mask), in interleaved rounds: castor, ORT,
castor, ORT...

    pip install onnxruntime numpy        # the peer, for benchmarks only
    python3 bench/onnx/transformers.py --build build --rounds 5 --threads 2

Each round times `castor run MODEL --dim sequence=S --batch B --input
ids.npy --input mask.npy --repeat R --threads T` (the median of its R runs,
kernels only) and an ORT session with intra_op_num_threads=T on the same
ids and mask (the median of R runs of session.run). Prints the per-round
ratios castor/ORT and their median; a ratio below 1 means castor is faster.
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "tests", "onnx", "models")


def castor_ms(build, model, batch, seq, ids, mask, repeat, threads, policy):
    out = subprocess.run([os.path.join(build, "castor"), "run", model, "--dim", f"sequence={seq}", "--batch", str(batch),
                          "--input", ids, "--input", mask, "--repeat", str(repeat), "--threads", str(threads),
                          "--policy", policy], capture_output=True, text=True, check=True)
    return float(re.search(r"time: median ([0-9.]+) ms", out.stdout + out.stderr).group(1))


def ort_ms(sess, feed, repeat):
    sess.run(None, feed)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feed)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--models", default="bert,gpt2")
    ap.add_argument("--batches", default="1,16", help="comma-separated batch sizes")
    ap.add_argument("--sequence", type=int, default=128)
    ap.add_argument("--policies", default="float32", help="castor's policies, comma-separated")
    args = ap.parse_args()
    print(f"onnxruntime {ort.__version__}, threads {args.threads}, {args.rounds} rounds of {args.repeat} runs, "
          f"sequence {args.sequence}")
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp()
    for name in args.models.split(","):
        model = os.path.join(MODELS, name + ".onnx")
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        for batch in (int(b) for b in args.batches.split(",")):
            ids = rng.integers(0, 1000, (batch, args.sequence)).astype(np.int64)
            mask = np.ones((batch, args.sequence), np.int64)
            mask[0, args.sequence * 3 // 4:] = 0  # some padding
            pi, pm = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "mask.npy")
            np.save(pi, ids), np.save(pm, mask)
            feed = {"input_ids": ids, "attention_mask": mask}
            for policy in args.policies.split(","):
                ratios, cs, os_ = [], [], []
                for _ in range(args.rounds):
                    c = castor_ms(args.build, model, batch, args.sequence, pi, pm, args.repeat, args.threads, policy)
                    o = ort_ms(sess, feed, args.repeat)
                    cs.append(c), os_.append(o), ratios.append(c / o)
                print(f"{name} batch {batch:3d} castor {policy:15s} {statistics.median(cs):8.4f} ms | ORT float32 "
                      f"{statistics.median(os_):8.4f} ms | castor/ORT per round "
                      f"{' '.join(f'{r:.2f}' for r in ratios)} median {statistics.median(ratios):.2f}", flush=True)


if __name__ == "__main__":
    main()
