#!/usr/bin/env python3
"""bench/train/keras_peer.py: the seed experiment in Keras 3 (JAX backend),
the recipe castor's `castor train` follows: Model.fit with

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
        self.steps = 0
        self.it0 = self._iters() if self.model.optimizer.built else 0

    def on_train_batch_end(self, batch, logs=None):
        self.t_last = time.perf_counter()
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        opt = self.model.optimizer
        lso = isinstance(opt, keras.optimizers.LossScaleOptimizer)
        applied = self._iters() - self.it0
        self.rows.append(dict(epoch=epoch + 1, steps=self.steps, train_s=self.t_last - self.t0,
                              step_ms=(self.t_last - self.t0) / self.steps * 1e3,
                              epoch_s=time.perf_counter() - self.t0,
                              skipped=self.steps - applied,
                              loss_scale=float(np.asarray(opt.dynamic_scale.value)) if lso else None,
                              **{k: float(v) for k, v in (logs or {}).items()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_args(ap)
    a = ap.parse_args()
    keras.utils.set_random_seed(a.seed)
    keras.mixed_precision.set_global_policy(a.policy)
    rng = np.random.default_rng(a.seed)

    xtr, ytr, xte, yte = common.load_fashion_mnist()
    if a.max_steps:
        n = int(a.max_steps * a.batch_size / (1 - a.validation_split)) + 1
        xtr, ytr = xtr[:n], ytr[:n]
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

    common.emit(kind="config", peer="keras", version=keras.__version__, jax=jax.__version__,
                policy=a.policy, units=a.units, batch_size=a.batch_size, epochs=a.epochs,
                seed=a.seed, threads=len(os.sched_getaffinity(0)),
                optimizer=type(model.optimizer).__name__, **common.machine())
    cb = Timing(model.optimizer)
    model.fit(xtr, ytr, batch_size=a.batch_size, epochs=a.epochs,
              validation_split=a.validation_split, shuffle=True, verbose=0, callbacks=[cb])
    for r in cb.rows:
        common.emit(kind="epoch", peer="keras", policy=a.policy, **r)
    test_loss, test_acc = model.evaluate(xte, yte, batch_size=a.batch_size, verbose=0)
    common.emit(kind="test", peer="keras", policy=a.policy, units=a.units,
                batch_size=a.batch_size, seed=a.seed, test_loss=float(test_loss),
                test_accuracy=float(test_acc),
                step_ms_median_after_first=float(np.median([r["step_ms"] for r in cb.rows][1:]
                                                           or [cb.rows[0]["step_ms"]])),
                skipped=int(sum(r["skipped"] for r in cb.rows)))


if __name__ == "__main__":
    main()
