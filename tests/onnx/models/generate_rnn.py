#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generates tests/onnx/models/rnn_*: PyTorch's nn.LSTM and nn.GRU
(2 layers, bidirectional, batch_first) exported to ONNX by PyTorch's
TorchScript exporter at opset 17 with static shapes (a batch of 5, 9
steps), with ONNX Runtime's outputs (CPU, float32) as the reference
(issue 39). Static shapes because the exporter writes LSTM/GRU with
layout 0 (sequence first) and transposes around them, which castor
cannot do over a symbolic batch.

Run once (needs PyPI: torch, onnx, onnxruntime); the files are committed
and the test suite never needs PyPI:

    /tmp/tvenv/bin/python tests/onnx/models/generate_rnn.py

Writes NAME.static.onnx, NAME.x.npy (the input [5, 9, 12]),
NAME.static.ort.npy (the sequence output [5, 9, 32]), NAME.static.ort1.npy
(h_n [4, 5, 16]) and, for the LSTM, NAME.static.ort2.npy (c_n); the versions
to rnn_versions.txt.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


class Seq(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(input_size=12, hidden_size=16, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x):
        return self.rnn(x)


def flat(out):
    y, st = out
    return (y,) + (tuple(st) if isinstance(st, tuple) else (st,))


class Flat(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return flat(self.m(x))


def main():
    lines = [f"torch {torch.__version__}", f"onnx {onnx.__version__}", f"onnxruntime {ort.__version__}",
             "export: torch.onnx.export(model.eval(), x, f, input_names=['x'], output_names=['y', 'y1'(, 'y2')], "
             "dynamo=False, opset_version=17), static shapes"]
    for i, (name, cell) in enumerate((("rnn_lstm", nn.LSTM), ("rnn_gru", nn.GRU))):
        torch.manual_seed(20 + i)
        model = Flat(Seq(cell)).eval()
        x = np.random.default_rng(20 + i).standard_normal((5, 9, 12)).astype(np.float32)
        np.save(os.path.join(HERE, f"{name}.x.npy"), x)
        path = os.path.join(HERE, f"{name}.static.onnx")
        with torch.no_grad():
            n_out = len(model(torch.from_numpy(x)))
        outs = ["y"] + [f"y{k}" for k in range(1, n_out)]
        torch.onnx.export(model, torch.from_numpy(x), path, input_names=["x"], output_names=outs, dynamo=False,
                          opset_version=17)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        for k, y in enumerate(sess.run(None, {"x": x})):
            np.save(os.path.join(HERE, f"{name}.static.ort{k if k else ''}.npy"), y)
        m = onnx.load(path)
        lines.append(f"{name}.static.onnx: ops {' '.join(sorted({n.op_type for n in m.graph.node}))}")
        print(lines[-1])
    with open(os.path.join(HERE, "rnn_versions.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
