#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Goldens of the transformer sample (samples/fashion_vit.cast) from real
Keras 3 (JAX backend), for tests/unit/check_keras_vit.c (issue 22).
Run by hand, never by CI or the build (it needs Keras and JAX):

    KERAS_BACKEND=jax python3 tests/golden/train/vit/generate_vit.py

vit() is the sample written in Keras, with the sample's layer names, so the
weights' keys match castor's (<layer>.kernel, <layer>.query.kernel, ...:
Keras's variable paths with '.' for '/'). KerasHub's PositionEmbedding is
reproduced as a layer holding `embeddings` [sequence_length, width] whose
first T rows are broadcast to its input's shape (the sample then adds them
to the projection, as KerasHub's examples do). MultiHeadAttention is called
with return_attention_scores=True: Keras 3.15 on JAX then takes its
explicit path (query scaled, einsum, Softmax, einsum), the formula castor
lowers to; its default ops.dot_product_attention refuses float16 on the
CPU. No dropout (the sample has none).

Writes, beside this script:
- init.safetensors: the initial weights, shared by every case: Keras's own
  initializers under keras.utils.set_random_seed(22), then the biases, the
  LayerNormalization betas and gammas and the position embeddings drawn
  from NumPy (seed 2222) so that none is trivially 0 or 1;
- fwd_x.npy [16, 28, 28] (uniform in [0, 1], as Fashion-MNIST's pixels
  scaled) and fwd_out-<policy>.npy: Model.predict under float32,
  mixed_float16 and mixed_bfloat16;
- train_x.npy [BATCH * STEPS, 28, 28], train_y.npy (int32 classes): the
  training data; <policy>/stepK.safetensors for float32 and mixed_float16:
  every variable after step K of train_on_batch with Adam() (Keras's
  defaults: learning rate 1e-3, betas 0.9 / 0.999, epsilon 1e-7), the loss
  sparse_categorical_crossentropy on the float32 softmax; under
  mixed_float16 compile() wraps Adam in a LossScaleOptimizer (dynamic, from
  2^15): "loss" (what train_on_batch returned: the step's forward pass,
  before the update) and "loss_scale" (the dynamic scale after the step; 1
  under float32).
"""
import json
import os
import struct

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers, ops  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, STEPS = 8, 3
POLICIES_FWD = ["float32", "mixed_float16", "mixed_bfloat16"]
POLICIES_TRAIN = ["float32", "mixed_float16"]


class PositionEmbedding(layers.Layer):
    """KerasHub's PositionEmbedding(sequence_length): its embeddings' first T
    rows broadcast to the input's shape (the input's values unused)."""

    def __init__(self, sequence_length, **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = sequence_length

    def build(self, input_shape):
        self.embeddings = self.add_weight(shape=(self.sequence_length, input_shape[-1]),
                                          initializer="glorot_uniform", name="embeddings")

    def call(self, x):
        e = ops.cast(self.embeddings[: ops.shape(x)[1]], self.compute_dtype)
        return ops.broadcast_to(e, ops.shape(x))


def vit():
    images = keras.Input((28, 28), name="images")
    x = layers.Dense(64, name="patch_projection")(images)
    pos = PositionEmbedding(28, name="position")(x)
    x = layers.Add(name="embed")([x, pos])
    for b in (1, 2):
        h = layers.LayerNormalization(name=f"block{b}_norm1")(x)
        h, _ = layers.MultiHeadAttention(4, 16, name=f"block{b}_attention")(h, h, return_attention_scores=True)
        x = layers.Add(name=f"block{b}_residual1")([x, h])
        h = layers.LayerNormalization(name=f"block{b}_norm2")(x)
        h = layers.Dense(128, activation="gelu", name=f"block{b}_mlp1")(h)
        h = layers.Dense(64, name=f"block{b}_mlp2")(h)
        x = layers.Add(name=f"block{b}_residual2")([x, h])
    x = layers.LayerNormalization(name="final_norm")(x)
    x = layers.GlobalAveragePooling1D(name="pool")(x)
    logits = layers.Dense(10, name="classifier")(x)
    probs = layers.Activation("softmax", dtype="float32", name="probs")(logits)
    return keras.Model(images, probs)


def write_safetensors(path, tensors, meta=None):
    header = {"__metadata__": {"generator": "tests/golden/train/vit/generate_vit.py",
                               "keras": keras.__version__, "backend": keras.backend.backend(), **(meta or {})}}
    blobs, off = [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype="<f4")
        data = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def weights_of(model):
    return {v.path.replace("/", "."): np.asarray(v.numpy(), dtype=np.float32) for v in model.weights}


def set_weights(model, tensors):
    model.set_weights([tensors[v.path.replace("/", ".")] for v in model.weights])


def main():
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(22)
    init = weights_of(vit())
    rng = np.random.default_rng(2222)
    for k, v in init.items():
        if k.endswith((".bias", ".beta")):
            init[k] = rng.uniform(-0.1, 0.1, v.shape).astype(np.float32)
        elif k.endswith(".gamma"):
            init[k] = rng.uniform(0.8, 1.2, v.shape).astype(np.float32)
    write_safetensors(os.path.join(HERE, "init.safetensors"), init)
    print("weights:", len(init), "tensors,", sum(v.size for v in init.values()), "parameters")

    fx = rng.uniform(0, 1, (16, 28, 28)).astype(np.float32)
    np.save(os.path.join(HERE, "fwd_x.npy"), fx)
    for policy in POLICIES_FWD:
        keras.config.set_dtype_policy(policy)
        m = vit()
        set_weights(m, init)
        y = np.asarray(m.predict(fx, verbose=0), dtype=np.float32)
        np.save(os.path.join(HERE, f"fwd_out-{policy}.npy"), y)
        print(f"fwd {policy}: out {y.shape}, max {y.max():.4f}")

    tx = rng.uniform(0, 1, (BATCH * STEPS, 28, 28)).astype(np.float32)
    ty = rng.integers(0, 10, BATCH * STEPS).astype(np.int32)
    np.save(os.path.join(HERE, "train_x.npy"), tx)
    np.save(os.path.join(HERE, "train_y.npy"), ty)
    for policy in POLICIES_TRAIN:
        keras.config.set_dtype_policy(policy)
        m = vit()
        set_weights(m, init)
        m.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
        os.makedirs(os.path.join(HERE, policy), exist_ok=True)
        for k in range(1, STEPS + 1):
            rows = slice((k - 1) * BATCH, k * BATCH)
            loss = m.train_on_batch(tx[rows], ty[rows])
            loss = float(loss[0] if isinstance(loss, (list, tuple)) else loss)
            t = weights_of(m)
            t["loss"] = np.array([loss], np.float32)
            opt = m.optimizer
            scale = float(np.asarray(opt.dynamic_scale)) if hasattr(opt, "dynamic_scale") else 1.0
            t["loss_scale"] = np.array([scale], np.float32)
            write_safetensors(os.path.join(HERE, policy, f"step{k}.safetensors"), t,
                              {"policy": policy, "step": str(k)})
            print(f"train {policy} step {k}: loss {loss:.6f}, scale {scale}")
    keras.config.set_dtype_policy("float32")


if __name__ == "__main__":
    main()
