#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Recurrent layers' forward: castor against ONNX Runtime and PyTorch, in
interleaved rounds (castor, ORT, PyTorch, castor, ...).

    /tmp/tvenv/bin/python bench/onnx/rnn_peers.py --build build --rounds 5 --threads 2 --batches 1,64

The models (issue 39's sizes): a sequence of 28 steps of 28 features read
by nn.LSTM(28, 128) or nn.GRU(28, 128) (batch_first), its last step into
nn.Linear(128, 10); built with a fixed seed and exported here to ONNX
(opset 17, TorchScript exporter, a dynamic batch) in a temporary folder,
which castor reads through its ONNX frontend (LSTM/GRU lowered to its
lstm/gru scans) and ORT runs. Each round times

  castor   `castor run MODEL --batch B --repeat R --threads T` (a fresh
           process; the median of its R runs, kernels only),
  ORT      an InferenceSession (CPU execution provider,
           intra_op_num_threads=T, inter_op_num_threads=1): the median of
           R runs of session.run,
  PyTorch  the module in eval mode under torch.inference_mode(),
           torch.set_num_threads(T): the median of R calls,

and prints the per-round ratios castor/ORT and castor/PyTorch and their
medians (below 1: castor is faster). The three outputs are compared first
(castor's through `castor run --input`), so a wrong model is never timed.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
from ort import castor_ms  # noqa: E402


class Seq(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(28, 128, batch_first=True)
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y[:, -1])


def median_ms(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def castor_output(build, model, x, tmp):
    xin, yout = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    np.save(xin, x)
    subprocess.run([os.path.join(build, "castor"), "run", model, "--batch", str(x.shape[0]), "--input", xin,
                    "--output", yout], check=True, capture_output=True)
    return np.load(yout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--cells", default="lstm,gru")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, threads {args.threads}, "
          f"{args.rounds} rounds of {args.repeat} runs, sequence 28 x 28 features, 128 units, float32")
    with tempfile.TemporaryDirectory() as tmp:
        for cell in args.cells.split(","):
            torch.manual_seed(39)
            net = Seq(cell).eval()
            path = os.path.join(tmp, f"{cell}.onnx")
            x0 = np.random.default_rng(39).standard_normal((4, 28, 28)).astype(np.float32)
            torch.onnx.export(net, (torch.from_numpy(x0),), path, opset_version=17, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "batch"}}, dynamo=False)
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            with torch.inference_mode():
                want = net(torch.from_numpy(x0)).numpy()
            for name, got in (("ORT", sess.run(None, {"x": x0})[0]), ("castor", castor_output(args.build, path, x0, tmp))):
                err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
                if err > 1e-5:
                    sys.exit(f"rnn_peers: {cell}: {name}'s output differs from PyTorch's (normalized error {err:g})")
            for batch in (int(b) for b in args.batches.split(",")):
                x = np.ascontiguousarray(np.resize(x0, (batch, 28, 28)).astype(np.float32))
                xt = torch.from_numpy(x)
                cs, os_, ts, r_ort, r_pt = [], [], [], [], []
                for _ in range(args.rounds):
                    c = castor_ms(args.build, path, batch, args.repeat, args.threads, "float32")
                    o = median_ms(lambda: sess.run(None, {"x": x}), args.repeat)
                    with torch.inference_mode():
                        t = median_ms(lambda: net(xt), args.repeat)
                    cs.append(c), os_.append(o), ts.append(t)
                    r_ort.append(c / o), r_pt.append(c / t)
                print(f"{cell} batch {batch:3d} castor {statistics.median(cs):8.4f} ms | ORT {statistics.median(os_):8.4f} ms"
                      f" | PyTorch {statistics.median(ts):8.4f} ms | castor/ORT {' '.join(f'{r:.2f}' for r in r_ort)} "
                      f"median {statistics.median(r_ort):.2f} | castor/PyTorch {' '.join(f'{r:.2f}' for r in r_pt)} "
                      f"median {statistics.median(r_pt):.2f}", flush=True)


if __name__ == "__main__":
    main()
