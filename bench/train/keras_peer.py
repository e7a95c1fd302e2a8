#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/train/keras_peer.py: the training benchmark in Keras 3 (JAX backend),
the recipe castor's `castor train` follows: Model.fit with

--model fashion_cnn / fashion_vit: samples/fashion_cnn.cast (Keras's simple
MNIST convnet) and samples/fashion_vit.cast (the small vision transformer)
built from Keras layers with the sample's layer names, every weight loaded
from --init (init_weights.py's file, the one castor loads), compile(Adam(),
...), the rest as below. KerasHub's PositionEmbedding is written out (a
learned [28, 64] weight broadcast to the input) so that KerasHub is not
needed. --model fashion_lstm (samples/fashion_lstm.cast) the same way; without
--init it starts from Keras's own initializers, seeded by --seed. For --model
mlp (the seed experiment):

- 784 -> Dense(units, relu) -> Dense(units, relu) -> Dense(10) ->
  Activation(softmax, dtype="float32"), the layer names of
  samples/mnist_mlp.cast; kernels Glorot-uniform from the same NumPy
  generator as torch_peer.py (so both peers start from the same weights),
  zero biases;
- compile(RMSprop() with Keras's defaults, "sparse_categorical_crossentropy",
  metrics=["accuracy"]); under mixed_float16 compile() wraps the optimizer in
  the dynamic LossScaleOptimizer;
- fit(batch_size, epochs, validation_split, shuffle=True) after
  keras.utils.set_random_seed(seed); evaluate() on the test set.

Per epoch: fit's logs (loss, accuracy, val_loss, val_accuracy), the time of
the training steps (first step start to last step end; epoch 1 includes the
XLA compile), the loss scale and the steps the LossScaleOptimizer skipped.
Threads: XLA's CPU client uses every CPU it may run on; run.sh pins the
process with taskset to the thread count. Prints JSON lines (common.py).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402


class Timing(keras.callbacks.Callback):
    def __init__(self, peer_opt):
        super().__init__()
        self.opt = peer_opt
        self.rows = []

    def _iters(self):
        return int(np.asarray(self.model.optimizer.iterations.value))

    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = self.t_last = time.perf_counter()
        self.c0 = self.c_last = time.process_time()
        self.steps = 0
        self.it0 = self._iters() if self.model.optimizer.built else 0

    def on_train_batch_end(self, batch, logs=None):
        self.t_last = time.perf_counter()
        self.c_last = time.process_time()
        self.steps += 1
        if self.steps == 1:  # after the first step: XLA's compile is done
            self.t1, self.c1 = self.t_last, self.c_last

    def on_epoch_end(self, epoch, logs=None):
        opt = self.model.optimizer
        lso = isinstance(opt, keras.optimizers.LossScaleOptimizer)
        applied = self._iters() - self.it0
        self.rows.append(dict(epoch=epoch + 1, steps=self.steps, train_s=self.t_last - self.t0,
                              step_ms=(self.t_last - self.t0) / self.steps * 1e3,
                              cpu_ms=(self.c_last - self.c0) / self.steps * 1e3,
                              **common.steady(self.steps, self.t1, self.t_last, self.c1, self.c_last),
                              epoch_s=time.perf_counter() - self.t0,
                              skipped=self.steps - applied,
                              loss_scale=float(np.asarray(opt.dynamic_scale.value)) if lso else None,
                              **{k: float(v) for k, v in (logs or {}).items()}))


class PositionEmbedding(layers.Layer):
    """keras_hub.layers.PositionEmbedding: a learned [sequence_length, D]
    weight (Glorot-uniform), its first T rows broadcast to the input."""

    def __init__(self, sequence_length, **kw):
        super().__init__(**kw)
        self.sequence_length = sequence_length

    def build(self, shape):
        self.embeddings = self.add_weight(shape=(self.sequence_length, shape[-1]),
                                          initializer="glorot_uniform", name="embeddings")

    def call(self, x):
        e = keras.ops.cast(self.embeddings[: x.shape[-2]], self.compute_dtype)
        return keras.ops.broadcast_to(e, keras.ops.shape(x))


def build_cnn():
    """samples/fashion_cnn.cast."""
    inp = keras.Input(shape=(28, 28, 1), name="images")
    x = layers.Conv2D(32, 3, activation="relu", name="conv2d")(inp)
    x = layers.MaxPooling2D(2, name="max_pooling2d")(x)
    x = layers.Conv2D(64, 3, activation="relu", name="conv2d_1")(x)
    x = layers.MaxPooling2D(2, name="max_pooling2d_1")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dropout(0.5, name="dropout")(x)
    x = layers.Dense(10, name="dense")(x)
    out = layers.Activation("softmax", dtype="float32", name="probs")(x)
    return keras.Model(inp, out)


def build_vit():
    """samples/fashion_vit.cast: width 64, 4 heads of key_dim 16, 2 pre-norm
    blocks, GELU MLP 128."""
    inp = keras.Input(shape=(28, 28), name="images")
    x = layers.Dense(64, name="patch_projection")(inp)
    x = layers.Add(name="embed")([x, PositionEmbedding(28, name="position")(x)])
    for b in ("block1", "block2"):
        h = layers.LayerNormalization(name=f"{b}_norm1")(x)
        h = layers.MultiHeadAttention(num_heads=4, key_dim=16, name=f"{b}_attention")(h, h)
        x = layers.Add(name=f"{b}_residual1")([x, h])
        h = layers.LayerNormalization(name=f"{b}_norm2")(x)
        h = layers.Dense(128, activation="gelu", name=f"{b}_mlp1")(h)
        h = layers.Dense(64, name=f"{b}_mlp2")(h)
        x = layers.Add(name=f"{b}_residual2")([x, h])
    x = layers.LayerNormalization(name="final_norm")(x)
    x = layers.GlobalAveragePooling1D(name="pool")(x)
    x = layers.Dense(10, name="classifier")(x)
    out = layers.Activation("softmax", dtype="float32", name="probs")(x)
    return keras.Model(inp, out)


def build_lstm():
    """samples/fashion_lstm.cast: LSTM(64) over the 28 rows of 28 pixels (Keras's
    defaults: tanh, sigmoid gates, Glorot-uniform kernel, orthogonal recurrent
    kernel, unit_forget_bias), its last state to Dense(10) and a float32
    softmax."""
    inp = keras.Input(shape=(28, 28), name="rows")
    h = layers.LSTM(64, name="lstm")(inp)
    x = layers.Dense(10, name="classifier")(h)
    out = layers.Activation("softmax", dtype="float32", name="probs")(x)
    return keras.Model(inp, out)


def load_init(model, path):
    """Assign every weight of init_weights.py's file: Keras's variable path
    'layer/sublayer/name' is castor's key 'layer.sublayer.name', except that
    a recurrent layer's cell ('lstm/lstm_cell/kernel') is not in castor's
    key ('lstm.kernel')."""
    init = common.read_safetensors(path)
    used = set()
    for v in model.trainable_weights:
        key = ".".join(p for p in v.path.split("/") if not p.endswith("_cell"))
        if key not in init:
            sys.exit(f"{path}: no weight {key} for Keras's {v.path}")
        if tuple(init[key].shape) != tuple(v.shape):
            sys.exit(f"{path}: {key} has shape {init[key].shape}, Keras's {v.path} {v.shape}")
        v.assign(init[key])
        used.add(key)
    left = sorted(set(init) - used)
    if left:
        sys.exit(f"{path}: weights Keras's model does not have: {', '.join(left)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_args(ap)
    a = ap.parse_args()
    keras.utils.set_random_seed(a.seed)
    keras.mixed_precision.set_global_policy(a.policy)
    rng = np.random.default_rng(a.seed)

    xtr, ytr, xte, yte = common.load_fashion_mnist()
    xtr, ytr = common.subset(xtr, ytr, a.train_samples)
    xte, yte = common.subset(xte, yte, a.test_samples)
    if a.max_steps:
        n = int(a.max_steps * a.batch_size / (1 - a.validation_split)) + 1
        xtr, ytr = xtr[:n], ytr[:n]
    if a.model != "mlp":
        if not a.init and a.model != "fashion_lstm":
            sys.exit(f"--model {a.model} needs --init (bench/train/init_weights.py)")
        shape = (28, 28, 1) if a.model == "fashion_cnn" else (28, 28)
        xtr, xte = xtr.reshape((-1,) + shape), xte.reshape((-1,) + shape)
        model = {"fashion_cnn": build_cnn, "fashion_vit": build_vit, "fashion_lstm": build_lstm}[a.model]()
        if a.init:
            load_init(model, a.init)
        else:  # its own initializers, seeded: run.sh's variant lstm_own
            a.model += "/own-init"
        model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        a.units = 0
        return fit(a, model, xtr, ytr, xte, yte)
    inp = keras.Input(shape=(784,), name="digits")
    h = layers.Dense(a.units, activation="relu", name="dense_1")(inp)
    h = layers.Dense(a.units, activation="relu", name="dense_2")(h)
    h = layers.Dense(10, name="dense_logits")(h)
    out = layers.Activation("softmax", dtype="float32", name="activation")(h)
    model = keras.Model(inp, out)
    dims = [784, a.units, a.units, 10]
    for name, fi, fo in zip(["dense_1", "dense_2", "dense_logits"], dims[:-1], dims[1:]):
        model.get_layer(name).kernel.assign(common.glorot_uniform(rng, fi, fo))
    model.compile(optimizer=keras.optimizers.RMSprop(), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    fit(a, model, xtr, ytr, xte, yte)


def fit(a, model, xtr, ytr, xte, yte):
    common.emit(kind="config", peer="keras", model=a.model, version=keras.__version__, jax=jax.__version__,
                policy=a.policy, units=a.units, train=int(xtr.shape[0]), test=int(xte.shape[0]), batch_size=a.batch_size, epochs=a.epochs,
                seed=a.seed, threads=len(os.sched_getaffinity(0)),
                optimizer=type(model.optimizer).__name__, **common.machine())
    cb = Timing(model.optimizer)
    try:
        model.fit(xtr, ytr, batch_size=a.batch_size, epochs=a.epochs,
                  validation_split=a.validation_split, shuffle=True, verbose=0, callbacks=[cb])
    except ValueError as e:
        # XLA's CPU backend has no float16 x float16 -> float32 dot_general
        # (MultiHeadAttention's einsums under mixed_float16): a limit of the
        # peer on this machine, reported as such, not a failed run
        if "not supported by dot_general on CPU" not in str(e):
            raise
        common.emit(kind="skipped", peer="keras", model=a.model, version=keras.__version__,
                    jax=jax.__version__, policy=a.policy, batch_size=a.batch_size, seed=a.seed,
                    reason="JAX on the CPU: " + str(e).splitlines()[0])
        return
    for r in cb.rows:
        common.emit(kind="epoch", peer="keras", model=a.model, policy=a.policy, **r)
    test_loss, test_acc = model.evaluate(xte, yte, batch_size=a.batch_size, verbose=0)
    common.emit(kind="test", peer="keras", model=a.model, policy=a.policy, units=a.units,
                batch_size=a.batch_size, seed=a.seed, test_loss=float(test_loss),
                test_accuracy=float(test_acc),
                **common.summary(cb.rows),
                skipped=int(sum(r["skipped"] for r in cb.rows)))


if __name__ == "__main__":
    main()
