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

    /tmp/tvenv/bin/python tests/onnx/models/generate_rnn.py seqlens

writes the sequence_lens models instead (rnn_seqlens_{lstm,gru,rnn}):
ONNX's LSTM, GRU (linear_before_reset=1, as PyTorch writes it) and RNN,
bidirectional, built with onnx.helper at opset 14, sequence_lens a graph
input (int32 [5]); X [6, 5, 4] (layout 0: ONNX Runtime has no other),
hidden 3, biases, the LSTM with initial_h and initial_c. Files:
NAME.onnx, NAME.x.npy, NAME.sl.npy (lengths 1, 6, 3, 0, 4: one step,
the whole sequence, none), rnn_seqlens.sl_over.npy and .sl_neg.npy (a
length of 7 and one of -1: onnx_seqlens_cli.sh), NAME.ort.npy (Y), NAME.ort1.npy (Y_h) and,
for the LSTM, NAME.ort2.npy (Y_c); rnn_seqlens_rnn1.*: the RNN with layout 1
over a symbolic batch (ONNX Runtime has layout 0 only: its outputs
transposed are the reference); the versions to rnn_seqlens_versions.txt.
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


def seqlens():
    from onnx import helper, numpy_helper, TensorProto
    t_len, n, d, h = 6, 5, 4, 3
    sl = np.array([1, 6, 3, 0, 4], np.int32)
    lines = [f"onnx {onnx.__version__}", f"onnxruntime {ort.__version__}",
             "built with onnx.helper (opset 14); sequence_lens a graph input"]
    for i, (name, op, gates) in enumerate((("rnn_seqlens_lstm", "LSTM", 4), ("rnn_seqlens_gru", "GRU", 3),
                                           ("rnn_seqlens_rnn", "RNN", 1))):
        rng = np.random.default_rng(40 + i)
        layout = 0  # ONNX Runtime computes layout 0 only
        xs = (n, t_len, d) if layout else (t_len, n, d)
        x = rng.standard_normal(xs).astype(np.float32)
        inits = {"W": rng.standard_normal((2, gates * h, d)).astype(np.float32) * 0.5,
                 "R": rng.standard_normal((2, gates * h, h)).astype(np.float32) * 0.5,
                 "B": rng.standard_normal((2, 2 * gates * h)).astype(np.float32) * 0.5}
        ins = ["x", "W", "R", "B", "sl"]
        outs = ["y", "y_h"]
        if op == "LSTM":
            inits["h0"] = rng.standard_normal((2, n, h)).astype(np.float32)
            inits["c0"] = rng.standard_normal((2, n, h)).astype(np.float32)
            ins += ["h0", "c0"]
            outs.append("y_c")
        attrs = {"hidden_size": h, "direction": "bidirectional"}
        if layout:
            attrs["layout"] = 1
        if op == "GRU":
            attrs["linear_before_reset"] = 1
        node = helper.make_node(op, ins, outs, name=f"/{op.lower()}", **attrs)
        graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs)),
                                                 helper.make_tensor_value_info("sl", TensorProto.INT32, [n])],
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, [None] * (4 if o == "y" else 3)) for o in outs],
                                  [numpy_helper.from_array(v, k) for k, v in inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
        onnx.checker.check_model(model)
        path = os.path.join(HERE, f"{name}.onnx")
        onnx.save(model, path)
        np.save(os.path.join(HERE, f"{name}.x.npy"), x)
        np.save(os.path.join(HERE, f"{name}.sl.npy"), sl)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        for k, y in enumerate(sess.run(None, {"x": x, "sl": sl})):
            np.save(os.path.join(HERE, f"{name}.ort{k if k else ''}.npy"), y)
        lines.append(f"{name}.onnx: {op} {attrs}")
        if op == "RNN":  # layout 1 over a symbolic batch: ONNX Runtime's layout-0 outputs, transposed
            node.attribute.append(helper.make_attribute("layout", 1))
            graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", t_len, d]))
            graph.input[1].CopyFrom(helper.make_tensor_value_info("sl", TensorProto.INT32, ["batch"]))
            graph.node[0].CopyFrom(node)
            model1 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
            onnx.checker.check_model(model1)
            onnx.save(model1, os.path.join(HERE, "rnn_seqlens_rnn1.onnx"))
            np.save(os.path.join(HERE, "rnn_seqlens_rnn1.x.npy"), np.ascontiguousarray(x.transpose(1, 0, 2)))
            np.save(os.path.join(HERE, "rnn_seqlens_rnn1.sl.npy"), sl)
            y, y_h = sess.run(None, {"x": x, "sl": sl})
            np.save(os.path.join(HERE, "rnn_seqlens_rnn1.ort.npy"), np.ascontiguousarray(y.transpose(2, 0, 1, 3)))
            np.save(os.path.join(HERE, "rnn_seqlens_rnn1.ort1.npy"), np.ascontiguousarray(y_h.transpose(1, 0, 2)))
            lines.append("rnn_seqlens_rnn1.onnx: the RNN with layout 1, X [batch, 6, 4] and sequence_lens [batch] "
                         "symbolic; its reference ONNX Runtime's layout-0 outputs transposed (ORT computes layout 0 "
                         "only)")
        if op == "LSTM":  # bad lengths for onnx_seqlens_cli.sh: one beyond the sequence, one below 0
            bad = sl.copy()
            bad[1] = t_len + 1
            np.save(os.path.join(HERE, "rnn_seqlens.sl_over.npy"), bad)
            bad = sl.copy()
            bad[3] = -1
            np.save(os.path.join(HERE, "rnn_seqlens.sl_neg.npy"), bad)
        print(lines[-1])
    with open(os.path.join(HERE, "rnn_seqlens_versions.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    if sys.argv[1:] == ["seqlens"]:
        return seqlens()
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
