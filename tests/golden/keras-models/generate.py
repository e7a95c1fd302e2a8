"""Small .keras files made by real Keras 3, for castor's Keras frontend tests.

Run by hand, never by CI or the build (it needs Keras, JAX and h5py):

    python3 -m venv /tmp/kvenv && /tmp/kvenv/bin/pip install keras jax jaxlib h5py
    KERAS_BACKEND=jax /tmp/kvenv/bin/python tests/golden/keras-models/generate.py

Writes beside this script:

  <model>-<policy>.keras   residual, shared_value and overrides (the models
                           of tests/golden/keras/generate.py, whose
                           placements.txt has Keras's per-layer dtypes),
                           built under each of the five global policies
                           (overrides keeps its per-layer dtype= overrides)
  dag-<policy>.keras       a Functional DAG: two inputs, a Dense layer shared
                           by both (called twice), LayerNormalization, ReLU,
                           Multiply, Softmax, two outputs; layer names that
                           are not Keras's defaults (weight paths come from
                           class and counter, not name)
  seq-<policy>.keras       a Sequential model with a per-layer float32
                           Softmax (Keras's mixed precision advice)
  lambda.keras             a Lambda layer (refused: a golden error case)
  <file>.in<i>.npy         the inputs (float32, batch 8, seeded)
  <file>.out<i>.npy        what Keras's model.predict gives for them
  manifest.txt             one line per file: name, policy, inputs, outputs

Weights are random (seeded), not Keras's initial ones, so layer norm's gamma
and beta and every bias are non-trivial. Each model is compiled (Adam,
learning rate 0.002, categorical cross-entropy, accuracy) so its
compile_config is read too; Keras wraps the optimizer in a
LossScaleOptimizer under mixed_float16.
"""

import datetime
import importlib.util
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = ["float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16"]

spec = importlib.util.spec_from_file_location("placements", os.path.join(HERE, "..", "keras", "generate.py"))
placements = importlib.util.module_from_spec(spec)
spec.loader.exec_module(placements)


def dag():
    a = keras.Input(shape=(12,), name="left")
    b = keras.Input(shape=(12,), name="right")
    shared = layers.Dense(12, activation="tanh", name="shared")  # called twice
    first = layers.Dense(12, name="dense_7")   # weights: layers/dense_1 (class counter)
    sa, sb = shared(a), shared(b)
    n = layers.LayerNormalization(epsilon=1e-4, name="norm")(first(sa))
    r = layers.ReLU(name="rect")(n)
    g = layers.Multiply(name="gate")([r, sb])
    s = layers.Add(name="sum")([g, sa, sb])
    head = layers.Dense(6, name="head")(s)
    probs = layers.Softmax(name="probs", dtype="float32")(head)
    side = layers.Activation("sigmoid", name="side")(layers.Dense(3, name="side_dense")(g))
    return keras.Model([a, b], [probs, side], name="dag")


def seq():
    return keras.Sequential([
        keras.Input(shape=(10,)),
        layers.Dense(16, activation="relu"),
        layers.LayerNormalization(),
        layers.Dense(16, activation="gelu"),
        layers.Dense(5),
        layers.Softmax(dtype="float32"),
    ], name="seq")


def unsupported():
    """lambda.keras: a Lambda layer, which castor refuses by name (the golden
    case tests/golden/frontend-errors/keras_unsupported_layer.cast)."""
    keras.mixed_precision.set_global_policy("float32")
    x = keras.Input(shape=(4,), name="x")
    y = layers.Lambda(lambda t: t * 2.0, name="double")(layers.Dense(4, name="d")(x))
    keras.Model(x, y, name="with_lambda").save(os.path.join(HERE, "lambda.keras"))


def main():
    rng = np.random.default_rng(2026)
    manifest = []
    for policy in POLICIES:
        keras.mixed_precision.set_global_policy(policy)
        models = [(m[0], placements.build_keras(m)[0]) for m in placements.MODELS if m[0] != "mnist_mlp"]
        models += [("dag", dag()), ("seq", seq())]
        for name, model in models:
            model.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(w.dtype) for w in model.get_weights()])
            model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.002),
                          loss="categorical_crossentropy", metrics=["accuracy"])
            base = f"{name}-{policy}"
            model.save(os.path.join(HERE, base + ".keras"))
            xs = [rng.standard_normal((8,) + tuple(t.shape[1:])).astype(np.float32) for t in model.inputs]
            ys = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
            ys = ys if isinstance(ys, (list, tuple)) else [ys]
            for i, x in enumerate(xs):
                np.save(os.path.join(HERE, f"{base}.in{i}.npy"), x)
            for i, y in enumerate(ys):
                np.save(os.path.join(HERE, f"{base}.out{i}.npy"), np.asarray(y, dtype=np.float32))
            outs = ",".join(t.name.split("/")[0] for t in model.outputs)
            manifest.append(f"{base} {policy} {len(xs)} {len(ys)}")
    unsupported()
    with open(os.path.join(HERE, "manifest.txt"), "w") as f:
        f.write(f"# generated by generate.py with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs\n")
        f.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()
