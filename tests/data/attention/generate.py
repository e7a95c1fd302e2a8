#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Keras 3 goldens for castor's multi_head_attention and
global_average_pooling1d (.cast layers): run by hand, never by CI or the
build; the outputs are committed.

    KERAS_BACKEND=jax python3 tests/data/attention/generate.py

Writes, beside this file: attention.safetensors (the weights under the
.cast names: Keras's variable paths with '.' for '/'), in<i>.npy (seeded
inputs, batch 4) and <policy>.out<i>.npy (what model.predict returns under
each global dtype policy, as float32). attention.cast is the same model in
the .cast language."""
import json
import os
import struct

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
from keras import layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = ["float32", "mixed_float16", "mixed_bfloat16"]


def build(policy):
    keras.config.set_dtype_policy(policy)
    q = keras.Input((5, 8), name="q")
    v = keras.Input((7, 6), name="v")
    k = keras.Input((7, 4), name="k")
    # Keras 3.15 on JAX computes MultiHeadAttention through
    # ops.dot_product_attention by default (scores in float32, scaled after
    # the product), which refuses value_dim != key_dim and, on the CPU, a
    # float16 product with float32 results ("F16_F16_F32 not supported by
    # dot_general"); return_attention_scores=True takes its explicit path
    # (query scaled, einsum, Softmax, einsum), the formula castor lowers to
    a, _ = layers.MultiHeadAttention(num_heads=2, key_dim=4, name="self_attn")(
        q, q, return_attention_scores=True)
    b, _ = layers.MultiHeadAttention(num_heads=3, key_dim=2, value_dim=5, name="cross_attn")(
        a, v, k, return_attention_scores=True)
    c, _ = layers.MultiHeadAttention(num_heads=2, key_dim=3, use_bias=False, name="no_bias")(
        b, a, return_attention_scores=True)
    p = layers.GlobalAveragePooling1D(name="pool")(c)
    m = keras.Model([q, v, k], [c, p])
    keras.config.set_dtype_policy("float32")
    return m


def safetensors(path, tensors):
    header, data = {}, b""
    for key, arr in tensors:
        raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[key] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def build_masked(policy):
    """attention masks: Keras's use_causal_mask and attention_mask (a float
    input, cast to bool: nonzero attends), alone and together, on query
    lengths 5, 2 and 1 against value lengths 5 and 7."""
    keras.config.set_dtype_policy(policy)
    q = keras.Input((5, 8), name="q")
    v = keras.Input((7, 6), name="v")
    m = keras.Input((5, 7), name="m")
    q2 = keras.Input((2, 8), name="q2")
    q1 = keras.Input((1, 8), name="q1")
    a, _ = layers.MultiHeadAttention(num_heads=2, key_dim=4, name="causal")(
        q, q, use_causal_mask=True, return_attention_scores=True)
    b, _ = layers.MultiHeadAttention(num_heads=3, key_dim=2, value_dim=5, name="masked")(
        a, v, attention_mask=m, return_attention_scores=True)
    c, _ = layers.MultiHeadAttention(num_heads=2, key_dim=3, name="both")(
        b, v, attention_mask=m, use_causal_mask=True, return_attention_scores=True)
    d, _ = layers.MultiHeadAttention(num_heads=2, key_dim=3, name="causal2")(
        q2, v, use_causal_mask=True, return_attention_scores=True)
    e, _ = layers.MultiHeadAttention(num_heads=1, key_dim=2, name="causal1")(
        q1, v, use_causal_mask=True, return_attention_scores=True)
    model = keras.Model([q, v, m, q2, q1], [c, d, e])
    keras.config.set_dtype_policy("float32")
    return model


def main_masked():
    rng = np.random.default_rng(2224)
    ref = build_masked("float32")
    weights = [rng.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in ref.weights]
    names = [w.path.replace("/", ".") for w in ref.weights]
    safetensors(os.path.join(HERE, "masked.safetensors"), list(zip(names, weights)))
    ins = [rng.uniform(-1, 1, (4,) + tuple(t.shape[1:])).astype(np.float32) for t in ref.inputs]
    mask = (rng.uniform(0, 1, (4, 5, 7)) < 0.7).astype(np.float32)
    mask[1, 2, :] = 0  # a query row masked whole: Keras's Softmax gives zeros
    mask[3, :, 0] = 0
    ins[2] = mask
    for i, x in enumerate(ins):
        np.save(os.path.join(HERE, "masked.in%d.npy" % i), x)
    for policy in POLICIES:
        m = build_masked(policy)
        m.set_weights(weights)
        outs = m.predict(ins, verbose=0)
        for i, o in enumerate(outs):
            np.save(os.path.join(HERE, "%s.masked.out%d.npy" % (policy, i)), np.asarray(o, dtype=np.float32))
    print("weights:", ", ".join("%s %s" % (n, list(w.shape)) for n, w in zip(names, weights)))
    print("keras", keras.__version__)


def main():
    import sys
    if sys.argv[1:] == ["masked"]:
        return main_masked()
    rng = np.random.default_rng(22)
    ref = build("float32")
    weights = [rng.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in ref.weights]
    names = [w.path.replace("/", ".") for w in ref.weights]
    safetensors(os.path.join(HERE, "attention.safetensors"), list(zip(names, weights)))
    ins = [rng.uniform(-1, 1, (4,) + tuple(t.shape[1:])).astype(np.float32) for t in ref.inputs]
    for i, x in enumerate(ins):
        np.save(os.path.join(HERE, "in%d.npy" % i), x)
    for policy in POLICIES:
        m = build(policy)
        m.set_weights(weights)
        outs = m.predict(ins, verbose=0)
        for i, o in enumerate(outs):
            np.save(os.path.join(HERE, "%s.out%d.npy" % (policy, i)), np.asarray(o, dtype=np.float32))
    print("weights:", ", ".join("%s %s" % (n, list(w.shape)) for n, w in zip(names, weights)))
    print("keras", keras.__version__)


if __name__ == "__main__":
    main()
