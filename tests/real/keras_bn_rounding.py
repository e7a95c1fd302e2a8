#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""keras_bn_rounding.py: is each side's Conv2D/DepthwiseConv2D + BatchNormalization result the correctly
rounded bfloat16 of that layer's exact value, given the layer's own input on that side?

Reads a mixed_bfloat16 .keras model and the per-layer outputs `keras_layers.py probe` saved (castor's
and Keras's .npz); for every batch norm after a convolution whose input was probed, computes in float64
conv(bf16(input), bf16(kernel)) (+ bf16 bias) and Keras's (x - mean) / sqrt(var + eps) * gamma + beta,
rounds it to bfloat16 and counts the elements where each side's result differs from it. Two correct
computations that differ only in their f32 sum order miss a few elements each (values within a few f32
ulps of a bf16 midpoint); a rounding point modelled differently (a 16-bit intermediate rounded or not)
shows as many misses on one side. A probed input that is not bfloat16 on castor's side (an op the
infer rule computes in float32 where it is a model output, difference (b) of docs/keras.md) is not what
castor's convolution reads: such layers are listed and left out of the totals.

  /tmp/kvenv/bin/python tests/real/keras_bn_rounding.py MODEL.keras DIR/castor.npz DIR/jax.npz
Not part of ctest: it needs Keras from PyPI.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402


def bf16(a):
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def source(layer):
    return layer._inbound_nodes[0].input_tensors[0]._keras_history.operation


def exact(conv, bn, x, shape):
    """float64 conv (+bias) + batch norm of X (already bf16 values), 'same'/'valid' as TF pads."""
    kind, cfg = type(conv).__name__, conv.get_config()
    k = bf16(conv.kernel.value).astype(np.float64)
    kh, kw = k.shape[:2]
    s = cfg["strides"][0]
    h, w = x.shape[1:3]
    ho, wo = shape[1:3]
    if cfg["padding"] == "same":
        ph, pw = max((ho - 1) * s + kh - h, 0), max((wo - 1) * s + kw - w, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    y = 0.0
    for i in range(kh):
        for j in range(kw):
            t = x[:, i:i + s * ho:s, j:j + s * wo:s, :]
            y = y + (np.einsum("nhwc,cd->nhwd", t, k[i, j]) if kind == "Conv2D" else t * k[i, j, :, 0])
    if cfg.get("use_bias"):
        y = y + bf16(conv.bias.value).astype(np.float64)
    g, b, mu, var = (np.asarray(v.value, dtype=np.float64)
                     for v in (bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance))
    return (y - mu) / np.sqrt(var + bn.get_config()["epsilon"]) * g + b


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model = keras.saving.load_model(sys.argv[1])
    sides = {"castor": np.load(sys.argv[2]), "keras": np.load(sys.argv[3])}
    total = {side: [0, 0] for side in sides}
    for bn in model.layers:
        if type(bn).__name__ != "BatchNormalization" or bn.name not in sides["castor"].files:
            continue
        conv = source(bn)
        if type(conv).__name__ not in ("Conv2D", "DepthwiseConv2D"):
            continue
        src = source(conv).name
        if src not in sides["castor"].files:
            continue
        xc = sides["castor"][src]
        skip = not np.array_equal(xc, bf16(xc))
        line = f"{bn.name:28s} {type(conv).__name__:16s}"
        for side, d in sides.items():
            want = bf16(exact(conv, bn, bf16(d[src]).astype(np.float64), d[bn.name].shape))
            miss = int((want != d[bn.name]).sum())
            line += f" {side} misses {miss:5d}"
            if not skip:
                total[side][0] += want.size
                total[side][1] += miss
        print(line + f" of {d[bn.name].size}" + (f"  (left out: castor's probed {src} is float32)" if skip else ""))
    for side, (n, miss) in total.items():
        print(f"{side}: {miss} of {n} conv + batch norm results are not the correctly rounded bfloat16 "
              f"of their own input ({miss / max(n, 1):.1e})")


if __name__ == "__main__":
    sys.exit(main())
