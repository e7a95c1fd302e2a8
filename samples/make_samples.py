# SPDX-License-Identifier: Apache-2.0
"""make_samples.py: writes the README's quick-start files into samples/.

  KERAS_BACKEND=jax python make_samples.py      (Keras 3, NumPy)

mnist_mlp.keras: a seeded, untrained Keras 3 MLP (784 -> 32 relu -> 10
softmax, compiled with Adam and sparse categorical cross-entropy), saved
with model.save; x.npy: 32 seeded samples of 784 float32 values in [0, 1);
y.npy: their int32 class indices (0-9). samples/mlp.onnx is
tests/onnx/models/mlp.opset17.onnx (PyTorch's export, tests/onnx/models/
generate.py), copied. Run once; the outputs are committed, so the quick
starts need no Python.
"""
import os

import numpy as np
import keras

here = os.path.dirname(os.path.abspath(__file__))
keras.utils.set_random_seed(38)
inp = keras.Input(shape=(784,), name="digits")
h = keras.layers.Dense(32, activation="relu", name="dense_1")(inp)
out = keras.layers.Dense(10, activation="softmax", name="predictions")(h)
model = keras.Model(inp, out, name="mnist_mlp")
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.save(os.path.join(here, "mnist_mlp.keras"))
rng = np.random.default_rng(38)
np.save(os.path.join(here, "x.npy"), rng.random((32, 784), dtype=np.float32))
np.save(os.path.join(here, "y.npy"), rng.integers(0, 10, size=32, dtype=np.int32))
