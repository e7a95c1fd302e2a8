#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The transformer's forward: castor against ONNX Runtime and PyTorch, in
interleaved rounds (castor, ORT, PyTorch, castor, ...).

    pip install torch onnx onnxruntime numpy      # the peers, for benchmarks only
    python3 bench/onnx/vit_peers.py --build build --rounds 5 --threads 2 --batches 1,64,256
    python3 bench/onnx/vit_peers.py --build build --policy mixed_bfloat16 ...

--policy mixed_bfloat16 runs castor under that policy and PyTorch under
torch.autocast("cpu", dtype=torch.bfloat16) (its mixed precision: linear
layers and matmuls in bfloat16, softmax and layer norm in float32); ORT
stays float32 (its CPU provider has no bfloat16 kernels for these ops).

The model is tests/onnx/models/vit.opset17.onnx (samples/fashion_vit.cast
in PyTorch, exported by tests/onnx/models/generate.py); the PyTorch peer is
that generator's ViT module built with the generator's seed, so its
weights are the exported ones (checked: its output matches ORT's on the
same input). Each round times

  castor   `castor run MODEL --batch B --repeat R --threads T` (a fresh
           process; the median of its R runs, kernels only, the input in
           place; --batch binds N, static shapes),
  ORT      an InferenceSession (CPU execution provider,
           intra_op_num_threads=T, inter_op_num_threads=1): the median of
           R runs of session.run,
  PyTorch  the module in eval mode under torch.inference_mode(),
           torch.set_num_threads(T): the median of R calls,

and prints the per-round ratios castor/ORT and castor/PyTorch and their
medians (below 1: castor is faster).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "tests", "onnx", "models")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, MODELS)
import generate  # noqa: E402  (the ViT module and its seed)
sys.path.insert(0, HERE)
from ort import castor_ms  # noqa: E402  (castor run --repeat's median, as the ORT bench times it)


def median_ms(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--policy", default="float32", choices=["float32", "mixed_bfloat16"])
    args = ap.parse_args()
    bf16 = args.policy == "mixed_bfloat16"
    model_path = os.path.join(MODELS, "vit.opset17.onnx")
    torch.set_num_threads(args.threads)
    torch.manual_seed(generate.SEEDS["vit"])
    net = generate.ViT().eval()
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    x0 = np.load(os.path.join(MODELS, "vit.x.npy"))
    with torch.inference_mode():
        got = net(torch.from_numpy(x0)).numpy()
    want = sess.run(None, {"x": x0})[0]
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    if err > 1e-5:
        sys.exit(f"vit_peers: the PyTorch module's weights are not the exported model's (normalized error {err:g})")
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, threads {args.threads}, "
          f"{args.rounds} rounds of {args.repeat} runs; PyTorch vs ORT normalized error {err:.2g}; "
          f"castor {args.policy}, PyTorch {'autocast bfloat16' if bf16 else 'float32'}, ORT float32")
    for batch in (int(b) for b in args.batches.split(",")):
        x = np.ascontiguousarray(np.resize(x0, (batch,) + x0.shape[1:]).astype(np.float32))
        xt = torch.from_numpy(x)
        cs, os_, ts, r_ort, r_pt = [], [], [], [], []
        for _ in range(args.rounds):
            c = castor_ms(args.build, model_path, batch, args.repeat, args.threads, args.policy)
            o = median_ms(lambda: sess.run(None, {"x": x}), args.repeat)
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                t = median_ms(lambda: net(xt), args.repeat)
            cs.append(c), os_.append(o), ts.append(t)
            r_ort.append(c / o), r_pt.append(c / t)
        print(f"batch {batch:3d} castor {statistics.median(cs):8.4f} ms | ORT {statistics.median(os_):8.4f} ms | "
              f"PyTorch {statistics.median(ts):8.4f} ms | castor/ORT {' '.join(f'{r:.2f}' for r in r_ort)} "
              f"median {statistics.median(r_ort):.2f} | castor/PyTorch {' '.join(f'{r:.2f}' for r in r_pt)} "
              f"median {statistics.median(r_pt):.2f}")


if __name__ == "__main__":
    main()
