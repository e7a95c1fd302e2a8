#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generates tests/onnx/models/train_lstm.*: a PyTorch model (nn.LSTM, its
last step through nn.Linear, the logits times a constant per class plus a
constant 0.5) exported to ONNX by PyTorch's TorchScript exporter at opset
17 with static shapes (a batch of 4, 5 steps of 3 features), and six steps
of PyTorch's plain SGD (lr 0.5, CrossEntropyLoss over logits, mean over
the batch) on it in order: the loss of each step's forward pass, before
its update.

The exporter writes the LSTM's zero initial state as a Constant node
expanded to [1, 4, 8], and the class scale and 0.5 as Constant nodes:
literals, which PyTorch does not train. A castor that took them for
weights would train them too (its losses leave PyTorch's from step 2) or
refuse the LSTM ("its initial state depends on a weight").
check_onnx_train compares castor_compile_train's losses with these.

Run once (needs PyPI: torch, onnx); the files are committed and the test
suite never needs PyPI:

    /tmp/tvenv/bin/python tests/onnx/models/generate_train.py

Writes train_lstm.onnx, train_lstm.x.npy (f32 [24, 5, 3]: six batches),
train_lstm.y.npy (i32 [24]), train_lstm.loss.npy (f32 [6]),
train_lstm.trained.npy (the trained module's logits on the first batch,
f32 [4, 3]: castor's saved weights loaded back with --weights give them);
the versions to train_versions.txt.
"""
import os

import numpy as np
import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, STEPS, T, F, H, CLASSES = 4, 6, 5, 3, 8, 3


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(F, H, batch_first=True)
        self.fc = torch.nn.Linear(H, CLASSES)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1]) * torch.tensor([1.5, -2.0, 3.0]) + 0.5


def main():
    torch.manual_seed(39)
    m = Model()
    path = os.path.join(HERE, "train_lstm.onnx")
    torch.onnx.export(m.eval(), (torch.zeros(BATCH, T, F),), path, input_names=["x"], output_names=["y"],
                      dynamo=False, opset_version=17)
    rng = np.random.default_rng(39)
    x = rng.standard_normal((BATCH * STEPS, T, F)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH * STEPS).astype(np.int32)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    lossf = torch.nn.CrossEntropyLoss()
    m.train()
    losses = []
    for s in range(STEPS):
        xb = torch.from_numpy(x[s * BATCH:(s + 1) * BATCH])
        yb = torch.from_numpy(y[s * BATCH:(s + 1) * BATCH]).long()
        opt.zero_grad()
        loss = lossf(m(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.save(os.path.join(HERE, "train_lstm.x.npy"), x)
    np.save(os.path.join(HERE, "train_lstm.y.npy"), y)
    np.save(os.path.join(HERE, "train_lstm.loss.npy"), np.array(losses, np.float32))
    with torch.no_grad():  # the trained module's logits on the first batch
        np.save(os.path.join(HERE, "train_lstm.trained.npy"), m.eval()(torch.from_numpy(x[:BATCH])).numpy())
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    with open(os.path.join(HERE, "train_versions.txt"), "w") as f:
        f.write(f"torch {torch.__version__}\nonnx {onnx.__version__}\n")
        f.write("export: torch.onnx.export(model.eval(), x, f, input_names=['x'], output_names=['y'], dynamo=False, "
                "opset_version=17), static shapes\n")
        f.write(f"train_lstm.onnx: ops {' '.join(ops)}\n")
        f.write(f"losses: {' '.join(f'{v:.6f}' for v in losses)}\n")


if __name__ == "__main__":
    main()
