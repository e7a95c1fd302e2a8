#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/train/init_weights.py: the initial weights as safetensors, drawn
once and loaded by every framework, so castor starts from the same point as
torch_peer.py and keras_peer.py.

    init_weights.py --units U --seed S --out FILE.safetensors          # the MLP
    init_weights.py --model fashion_cnn --seed S --out FILE.safetensors
    init_weights.py --model fashion_vit --seed S --out FILE.safetensors
    init_weights.py --model fashion_lstm --seed S --out FILE.safetensors

The MLP: Glorot-uniform kernels drawn by common.glorot_uniform from
np.random.default_rng(seed) in layer order, zero biases, the keys of
samples/mnist_mlp*.cast (dense_1, dense_2, dense_logits): the draw
torch_peer.py and keras_peer.py make themselves for it.

fashion_cnn and fashion_vit: the keys and shapes of samples/fashion_cnn.cast
and samples/fashion_vit.cast (Keras's weight names: `castor train --save`
writes the same keys), every kernel and the position embeddings
Glorot-uniform with Keras's fans (common.keras_fans: a convolution's HWIO
kernel and MultiHeadAttention's [D, heads, key_dim] kernels count their
leading dimensions in both fans), in the order below, from
np.random.default_rng(seed); biases and LayerNormalization's beta zero,
gamma one (Keras's defaults). The peers load this file with --init.

fashion_lstm: Keras's LSTM initializers, the ones castor's own init draws
too (with its own generator): the input kernel Glorot-uniform, the
recurrent kernel orthogonal (common.orthogonal), the bias
unit_forget_bias (ones for the forget gate's units, zeros elsewhere; the
gates in Keras's order i, f, c, o); the classifier Glorot-uniform with a
zero bias.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

write_safetensors = common.write_safetensors  # kept for callers of the old name


def spec(model):
    """[(key, shape, init)] in draw order; init is glorot, orthogonal,
    unit_forget_bias, zeros or ones."""
    if model == "fashion_cnn":
        return [("conv2d.kernel", (3, 3, 1, 32), "glorot"), ("conv2d.bias", (32,), "zeros"),
                ("conv2d_1.kernel", (3, 3, 32, 64), "glorot"), ("conv2d_1.bias", (64,), "zeros"),
                ("dense.kernel", (1600, 10), "glorot"), ("dense.bias", (10,), "zeros")]
    if model == "fashion_vit":
        d, heads, kd, mlp, t = 64, 4, 16, 128, 28
        s = [("patch_projection.kernel", (28, d), "glorot"), ("patch_projection.bias", (d,), "zeros"),
             ("position.embeddings", (t, d), "glorot")]
        for b in ("block1", "block2"):
            s += [(f"{b}_norm1.gamma", (d,), "ones"), (f"{b}_norm1.beta", (d,), "zeros")]
            for p in ("query", "key", "value"):
                s += [(f"{b}_attention.{p}.kernel", (d, heads, kd), "glorot"),
                      (f"{b}_attention.{p}.bias", (heads, kd), "zeros")]
            s += [(f"{b}_attention.attention_output.kernel", (heads, kd, d), "glorot"),
                  (f"{b}_attention.attention_output.bias", (d,), "zeros"),
                  (f"{b}_norm2.gamma", (d,), "ones"), (f"{b}_norm2.beta", (d,), "zeros"),
                  (f"{b}_mlp1.kernel", (d, mlp), "glorot"), (f"{b}_mlp1.bias", (mlp,), "zeros"),
                  (f"{b}_mlp2.kernel", (mlp, d), "glorot"), (f"{b}_mlp2.bias", (d,), "zeros")]
        s += [("final_norm.gamma", (d,), "ones"), ("final_norm.beta", (d,), "zeros"),
              ("classifier.kernel", (d, 10), "glorot"), ("classifier.bias", (10,), "zeros")]
        return s
    if model == "fashion_lstm":
        return [("lstm.kernel", (28, 256), "glorot"), ("lstm.recurrent_kernel", (64, 256), "orthogonal"),
                ("lstm.bias", (256,), "unit_forget_bias"),
                ("classifier.kernel", (64, 10), "glorot"), ("classifier.bias", (10,), "zeros")]
    raise ValueError(model)


def draw(model, seed, units=None):
    rng = np.random.default_rng(seed)
    t = {}
    if model == "mlp":
        dims = [784, units, units, 10]
        for name, fi, fo in zip(["dense_1", "dense_2", "dense_logits"], dims[:-1], dims[1:]):
            t[name + ".kernel"] = common.glorot_uniform(rng, fi, fo)
            t[name + ".bias"] = np.zeros(fo, np.float32)
        return t
    for key, shape, init in spec(model):
        if init == "glorot":
            t[key] = common.glorot_uniform_shape(rng, shape)
        elif init == "orthogonal":
            t[key] = common.orthogonal(rng, shape)
        elif init == "unit_forget_bias":  # [i, f, c, o] gates of shape[0] // 4 units
            u = shape[0] // 4
            t[key] = np.concatenate([np.zeros(u), np.ones(u), np.zeros(2 * u)]).astype(np.float32)
        else:
            t[key] = (np.ones if init == "ones" else np.zeros)(shape, np.float32)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "fashion_cnn", "fashion_vit", "fashion_lstm"])
    ap.add_argument("--units", type=int, help="the MLP's hidden width (required for mlp)")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.model == "mlp" and not a.units:
        ap.error("--units is required for the mlp")
    common.write_safetensors(a.out, draw(a.model, a.seed, a.units))


if __name__ == "__main__":
    main()
