#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generates tests/onnx/models: small PyTorch models exported to ONNX
with PyTorch's exporter, once at opset_version=17 (the newest that Debian's
ONNX 1.12 test data covers) and once at the exporter's default opset, with
ONNX Runtime's outputs (CPU execution provider, float32) as the reference.

Run once (needs PyPI: torch, onnx, onnxruntime); the files it writes are
committed and the test suite never needs PyPI:

    pip install torch onnx onnxruntime onnxscript
    python3 tests/onnx/models/generate.py

For each model NAME and opset tag T (opset17, default) it writes
NAME.T.onnx, NAME.x.npy (the input: a batch of 5) and NAME.T.ort.npy
(ONNX Runtime's output; NAME.T.ort1.npy, ... for further outputs), and
versions.txt (the exact versions and settings). Arguments name the models
to regenerate (default: all): `python3 tests/onnx/models/generate.py layout`.
"""
import math
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


class MLP(nn.Module):
    """784-64-10 with ReLU and softmax: the sample MLP's shape, smaller."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)


class CNN(nn.Module):
    """Keras's simple MNIST convnet in PyTorch: conv-relu-pool twice, flatten, linear."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3)
        self.c2 = nn.Conv2d(8, 16, 3)
        self.fc = nn.Linear(16 * 5 * 5, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.c2(x)), 2)
        return torch.softmax(self.fc(torch.flatten(x, 1)), dim=-1)


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn_a = nn.BatchNorm2d(c)
        self.b = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn_b = nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn_a(self.a(x)))
        return torch.relu(x + self.bn_b(self.b(y)))


class ResNet(nn.Module):
    """A small ResNet-style network: stem, two residual blocks with batch norm, global pooling."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.blocks = nn.Sequential(ResBlock(16), ResBlock(16))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        x = self.blocks(x)
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3), keepdim=True), 1))


class Layout(nn.Module):
    """The paths of castor's NCHW-as-NHWC import (docs/onnx.md): a Concat
    along the channels, BatchNormalization that the exporter cannot fold
    into a Conv, PRelu's [C, 1, 1] slope and an added [C, 1, 1] constant,
    Softmax over the channels times a channels-last value, AveragePool with
    ceil_mode and count_include_pad, x.view(N, -1) (shape arithmetic) into
    both a Gemm and a MatMul, and a feature map as a second output."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 6, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)
        self.bn = nn.BatchNorm2d(10)
        self.shift = nn.Parameter(torch.randn(10, 1, 1))
        self.prelu = nn.PReLU(10)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)
        self.fc = nn.Linear(10 * 4 * 4, 5)
        self.w2 = nn.Parameter(torch.randn(10 * 4 * 4, 3) * 0.1)

    def forward(self, x):
        y = torch.cat([self.a(x), self.b(x)], dim=1)
        y = self.prelu(self.bn(torch.relu(y))) + self.shift
        y = self.pool(torch.softmax(y, dim=1) * y)
        z = y.view(y.size(0), -1)
        return self.fc(z), z @ self.w2, y


class Attention(nn.Module):
    """Multi-head self-attention written out (nn.MultiheadAttention's
    export folds the batch into the heads, [L, N*H, d]; here the batch
    stays the leading dimension): one Linear for q, k and v, heads split
    by a reshape and a transpose, softmax(q k^T / sqrt(d)) v, heads merged,
    an output Linear."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        n, l, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.reshape(n, l, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1)
        return self.out((a @ v).transpose(1, 2).reshape(n, l, d))


class Block(nn.Module):
    """A pre-norm encoder block: LayerNorm, 4-head self-attention, residual
    add; LayerNorm, a GELU MLP 64 -> 128 -> 64, residual add."""

    def __init__(self, d=64, heads=4, mlp=128):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=1e-3)
        self.attn = Attention(d, heads)
        self.norm2 = nn.LayerNorm(d, eps=1e-3)
        self.mlp1 = nn.Linear(d, mlp)
        self.mlp2 = nn.Linear(mlp, d)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp2(nn.functional.gelu(self.mlp1(self.norm2(x))))


class ViT(nn.Module):
    """samples/fashion_vit.cast in PyTorch: each 28x28 image a sequence of
    its 28 rows, a Linear projection to width 64, a learned position
    embedding, two pre-norm encoder blocks (nn.MultiheadAttention, 4
    heads, attention written out), a final LayerNorm, mean pooling over the sequence, Linear and
    softmax over 10 classes."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(28, 64)
        self.pos = nn.Parameter(torch.randn(28, 64) * 0.1)
        self.blocks = nn.Sequential(Block(), Block())
        self.norm = nn.LayerNorm(64, eps=1e-3)
        self.fc = nn.Linear(64, 10)
        with torch.no_grad():  # logits spread out, as a trained model's are: outputs far from uniform
            self.fc.weight.mul_(8)

    def forward(self, x):
        x = self.proj(x) + self.pos
        x = self.norm(self.blocks(x))
        return torch.softmax(self.fc(x.mean(dim=1)), dim=-1)


MODELS = {
    "mlp": (MLP, (5, 784)),
    "cnn": (CNN, (5, 1, 28, 28)),
    "resnet": (ResNet, (5, 3, 16, 16)),
    "layout": (Layout, (5, 3, 7, 7)),
    "vit": (ViT, (5, 28, 28)),
}
# models seeded on their own (added later: regenerating one leaves the others' files as they are)
SEEDS = {"layout": 1, "vit": 2}


# ---- models as torch.onnx.export writes them today: the dynamo exporter ----
#
# torchvision's own architectures, narrowed so that the files stay small
# (the topology, ops and shape arithmetic are the real ones; only the
# widths shrink), exported with the dynamo exporter's defaults (static
# shapes, batch 1: NAME.dynamo.onnx) and with a dynamic batch
# (NAME.dynbatch.onnx, run by ONNX Runtime at batch 4). tv.x.npy is a
# batch of 4 at 64x64; the static model's reference is on its first row.


def narrow_resnet18():
    """torchvision's ResNet-18 (BasicBlock, [2, 2, 2, 2]) at widths 4-32 instead of 64-512."""
    import torchvision.models.resnet as R

    class NarrowResNet(R.ResNet):
        def __init__(self, widths=(4, 8, 16, 32), num_classes=10):
            nn.Module.__init__(self)
            self._norm_layer = nn.BatchNorm2d
            self.inplanes, self.dilation, self.groups, self.base_width = widths[0], 1, 1, 64
            self.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(R.BasicBlock, widths[0], 2)
            self.layer2 = self._make_layer(R.BasicBlock, widths[1], 2, stride=2)
            self.layer3 = self._make_layer(R.BasicBlock, widths[2], 2, stride=2)
            self.layer4 = self._make_layer(R.BasicBlock, widths[3], 2, stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(widths[3], num_classes)

    return NarrowResNet()


def narrow_mobilenet_v3_small():
    from torchvision.models import mobilenet_v3_small
    return mobilenet_v3_small(width_mult=0.25, num_classes=10)


def narrow_efficientnet_b0():
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf
    inverted, last = _efficientnet_conf("efficientnet_b0", width_mult=0.125, depth_mult=0.34)
    return EfficientNet(inverted, 0.2, last_channel=last, num_classes=10)


def narrow_densenet121():
    """DenseNet-121's blocks (6, 12, 24, 16 layers: its third block joins 24 feature maps) at growth 2."""
    from torchvision.models import DenseNet
    return DenseNet(growth_rate=2, block_config=(6, 12, 24, 16), num_init_features=8, bn_size=2, num_classes=10)


class SegHead(nn.Module):
    """torchvision's FCN head (FCNHead: conv, batch norm, ReLU, dropout, 1x1 conv) on a stride-4 stem, upsampled
    back to the input's size as torchvision's FCN does (F.interpolate, bilinear, align_corners=False), plus a
    nearest-neighbour x4 upsampling of the same logits: ONNX Resize in its two common modes."""

    def __init__(self):
        super().__init__()
        from torchvision.models.segmentation.fcn import FCNHead
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=4, padding=1), nn.ReLU())
        self.head = FCNHead(8, 2)

    def forward(self, x):
        z = self.head(self.stem(x))
        up = nn.functional.interpolate(z, size=x.shape[-2:], mode="bilinear", align_corners=False)
        return up + 0.5 * nn.functional.interpolate(z, scale_factor=4, mode="nearest")


DYNAMO_MODELS = {
    "tv_resnet18": narrow_resnet18,
    "tv_mobilenet_v3_small": narrow_mobilenet_v3_small,
    "tv_efficientnet_b0": narrow_efficientnet_b0,
    "tv_densenet121": narrow_densenet121,
    "tv_fcn_head": SegHead,
}


def randomize_norms(model):
    """Batch norm statistics and affine terms that are not the identity."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)


def export_dynamo(name, make, lines, seed):
    torch.manual_seed(seed)
    model = make().eval()
    randomize_norms(model)
    x = np.random.default_rng(0).standard_normal((4, 3, 64, 64)).astype(np.float32)
    np.save(os.path.join(HERE, "tv.x.npy"), x)  # one input for all of them
    for tag, dyn in (("dynamo", False), ("dynbatch", True)):
        if not dyn and name != "tv_resnet18":  # the defaults' static form once: the files stay small
            continue
        path = os.path.join(HERE, f"{name}.{tag}.onnx")
        xi = x if dyn else x[:1]
        kw = {"dynamic_shapes": ({0: torch.export.Dim("batch")},)} if dyn else {}
        prog = torch.onnx.export(model, (torch.from_numpy(xi),), dynamo=True, input_names=["x"],
                                 output_names=["y"], **kw)
        prog.save(path)
        m = onnx.load(path)
        # the exporter's per-node metadata (source stack traces: 90% of a narrow
        # model's bytes) dropped; the graph, its value_info and weights unchanged
        for n in m.graph.node:
            del n.metadata_props[:]
            n.doc_string = ""
        del m.metadata_props[:]
        onnx.save(m, path)
        opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")][0]
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        np.save(os.path.join(HERE, f"{name}.{tag}.ort.npy"), sess.run(None, {"x": xi})[0])
        ops = sorted({n.op_type for n in m.graph.node})
        lines.append(f"{name}.{tag}.onnx: opset {opset}, ops {' '.join(ops)}")
        print(lines[-1])


def main():
    only = sys.argv[1:]  # model names to regenerate (default: all)
    rng = np.random.default_rng(0)
    lines = [
        f"torch {torch.__version__}",
        f"onnx {onnx.__version__}",
        f"onnxruntime {ort.__version__}",
        "export: torch.onnx.export(model.eval(), x, f, input_names=['x'], output_names=['y' (, 'y1', .. for more outputs)], "
        "dynamic_axes={'x': {0: 'batch'}, 'y': {0: 'batch'}, ..}, dynamo=False, opset_version=17 | default)",
        "reference: onnxruntime.InferenceSession(f, providers=['CPUExecutionProvider']) on NAME.x.npy",
        "tv_*: torch.onnx.export(model.eval(), (x,), dynamo=True, input_names=['x'], output_names=['y']) at batch 1 "
        "(NAME.dynamo) and with dynamic_shapes=({0: Dim('batch')},) at batch 4 (NAME.dynbatch)",
    ]
    for name, (cls, shape) in MODELS.items():
        if only and name not in only:
            continue
        gen = rng
        if name in SEEDS:
            torch.manual_seed(SEEDS[name])
            gen = np.random.default_rng(SEEDS[name])
        model = cls().eval()
        for m in model.modules():  # batch norm statistics that are not the identity
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.2, 0.2)
        x = gen.standard_normal(shape).astype(np.float32)
        np.save(os.path.join(HERE, f"{name}.x.npy"), x)
        for tag, kw in (("opset17", {"opset_version": 17}), ("default", {})):
            path = os.path.join(HERE, f"{name}.{tag}.onnx")
            with torch.no_grad():
                n_out = len(model(torch.from_numpy(x))) if name == "layout" else 1
            outs = ["y"] + [f"y{i}" for i in range(1, n_out)]
            torch.onnx.export(model, torch.from_numpy(x), path, input_names=["x"], output_names=outs,
                              dynamic_axes={"x": {0: "batch"}, **{o: {0: "batch"} for o in outs}}, dynamo=False, **kw)
            m = onnx.load(path)
            opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")][0]
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            ys = sess.run(None, {"x": x})
            for i, y in enumerate(ys):  # NAME.T.ort.npy, then NAME.T.ort1.npy, ... for more outputs
                np.save(os.path.join(HERE, f"{name}.{tag}.ort{i if i else ''}.npy"), y)
            ops = sorted({n.op_type for n in m.graph.node})
            lines.append(f"{name}.{tag}.onnx: opset {opset}, ops {' '.join(ops)}")
            print(lines[-1])
    for i, (name, make) in enumerate(DYNAMO_MODELS.items()):
        if only and name not in only:
            continue
        export_dynamo(name, make, lines, 10 + i)
    path = os.path.join(HERE, "versions.txt")
    if only and os.path.exists(path):  # keep the lines of the models not regenerated
        with open(path) as f:
            old = [l.rstrip("\n") for l in f]
        kept = [l for l in old if ".onnx:" in l and l.split(".")[0] not in only]
        lines = lines[:6] + kept + lines[6:]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
