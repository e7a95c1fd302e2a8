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

With --train, a training step instead (issue 39: one SGD step, batch 64,
of the LSTM(128) over 28 steps of 28 features and its Dense(10) head,
sparse categorical cross-entropy from logits, learning rate 0.01):

  castor   `castor train` of the same layers in .cast (lstm, dense) on
           --repeat batches of random data, --epochs 3 without shuffling:
           the median over epochs 2-3 of its us/sample times the batch
           (the whole step: batching, forward, loss, backward, update);
  PyTorch  nn.LSTM + nn.Linear, CrossEntropyLoss, torch.optim.SGD: the
           median of --repeat steps (zero_grad, forward, loss, backward,
           step) on the same data.
"""
import argparse
import os
import re
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


CAST_TRAIN = """model rnn_train
x = input(shape=[28, 28])
h = {cell}(x, units=128, name=rnn)
y = dense(h, units=10, name=head)
output y
"""


def castor_train_ms(build, tmp, cell, batch, steps, threads):
    model, xs, ys = (os.path.join(tmp, n) for n in (f"{cell}_train.cast", "tx.npy", "ty.npy"))
    with open(model, "w") as f:
        f.write(CAST_TRAIN.format(cell=cell))
    out = subprocess.run([os.path.join(build, "castor"), "train", model, "--x", xs, "--y", ys, "--batch-size", str(batch),
                          "--optimizer", "sgd", "--learning-rate", "0.01", "--from-logits", "--no-shuffle",
                          "--epochs", "3", "--threads", str(threads)], capture_output=True, text=True, check=True)
    per_sample = [float(u) for u in re.findall(r"Epoch [0-9]+/3 - [0-9.]+s ([0-9.]+)us/sample", out.stdout + out.stderr)]
    if len(per_sample) != 3:
        sys.exit(f"rnn_peers: castor train printed no epoch times:\n{out.stdout}{out.stderr}")
    return statistics.median(per_sample[1:]) * batch / 1e3


def train(args):
    batch, steps = 64, args.repeat
    rng = np.random.default_rng(39)
    x = rng.standard_normal((batch * steps, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, batch * steps).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "tx.npy"), x), np.save(os.path.join(tmp, "ty.npy"), y)
        for cell in args.cells.split(","):
            torch.manual_seed(39)
            net = Seq(cell)
            opt = torch.optim.SGD(net.parameters(), lr=0.01)
            loss_fn = torch.nn.CrossEntropyLoss()
            xt, yt = torch.from_numpy(x), torch.from_numpy(y)
            at = [0]

            def step():
                i = at[0] % steps
                at[0] += 1
                opt.zero_grad()
                loss_fn(net(xt[i * batch:(i + 1) * batch]), yt[i * batch:(i + 1) * batch]).backward()
                opt.step()
            cs, ts, r = [], [], []
            for _ in range(args.rounds):
                c = castor_train_ms(args.build, tmp, cell, batch, steps, args.threads)
                t = median_ms(step, steps)
                cs.append(c), ts.append(t), r.append(c / t)
            print(f"{cell} train step batch {batch} castor {statistics.median(cs):8.3f} ms | PyTorch {statistics.median(ts):8.3f} ms"
                  f" | castor/PyTorch {' '.join(f'{v:.2f}' for v in r)} median {statistics.median(r):.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--cells", default="lstm,gru")
    ap.add_argument("--train", action="store_true", help="a training step (SGD, batch 64) against PyTorch's")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, threads {args.threads}, "
          f"{args.rounds} rounds of {args.repeat} runs, sequence 28 x 28 features, 128 units, float32")
    if args.train:
        return train(args)
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
