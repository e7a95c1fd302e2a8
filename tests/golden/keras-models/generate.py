# SPDX-License-Identifier: Apache-2.0
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

`generate.py legacy` writes legacy.h5, a model in the legacy .h5 format.

`generate.py placements` writes placements-layers.txt: each layer of those
files loaded back in Keras, its compute dtype and its output's dtype.

`generate.py layers` makes only the layer-class files (the first set is left
as it is), each under float32, mixed_float16 and mixed_bfloat16, plus
per-layer overrides, listed in manifest-layers.txt with the lowest
precision a layer of the model computes in (the error bound's class):

  cnn-<policy>.keras       Sequential: Conv2D (same, relu), MaxPooling2D,
                           Conv2D (3x2 kernel, strides 2x1, valid), Conv2D
                           (dilation 2, same, no bias), AveragePooling2D
                           (3, strides 2, same), Dropout, Flatten, Dense,
                           Softmax
  merge-<policy>.keras     Functional DAG: Subtract, Maximum (3 inputs),
                           Minimum, Concatenate, Reshape with -1, Permute,
                           LayerNormalization over two axes, Softmax over
                           axis 1, Concatenate along axis 1, Flatten, two
                           outputs
  embed-<policy>.keras     Functional: int32 indices, Embedding, Dropout,
                           LayerNormalization, Reshape, Conv2D (tanh),
                           MaxPooling2D (strides 1, same), Flatten, Dense
  cnn_override-mixed_float16.keras, merge_override-mixed_bfloat16.keras
                           per-layer dtype= overrides (float32 and
                           mixed_bfloat16 layers in a mixed_float16 model; a
                           float32 Conv2D and LayerNormalization in a
                           mixed_bfloat16 one)
"""

import datetime
import sys
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


def refusals():
    """refusals.keras: three things castor does not read in one file (a
    custom layer class, an op node of the functional API, a Lambda): one load
    reports all three (tests/golden/keras-errors/keras_refusals.cast)."""
    keras.mixed_precision.set_global_policy("float32")

    @keras.saving.register_keras_serializable(package="mine")
    class Twice(layers.Layer):
        def call(self, t):
            return t * 2.0

    x = keras.Input(shape=(4,), name="x")
    h = Twice(name="twice")(layers.Dense(4, name="d")(x))
    h = keras.ops.sin(h)
    y = layers.Lambda(lambda t: t * 2.0, name="double")(h)
    keras.Model(x, y, name="refusals").save(os.path.join(HERE, "refusals.keras"))


# ---- layer classes (generate.py layers) ----

LAYER_POLICIES = ["float32", "mixed_float16", "mixed_bfloat16"]


def cnn(override=False):
    f32 = {"dtype": "float32"} if override else {}
    bf = {"dtype": "mixed_bfloat16"} if override else {}
    return keras.Sequential([
        keras.Input(shape=(16, 16, 3)),
        layers.Conv2D(8, 3, padding="same", activation="relu", **f32),
        layers.MaxPooling2D(2),
        layers.Conv2D(6, (3, 2), strides=(2, 1), padding="valid", **bf),
        layers.Conv2D(4, 3, dilation_rate=2, padding="same", use_bias=False),
        layers.AveragePooling2D(pool_size=3, strides=2, padding="same"),
        layers.Dropout(0.3),
        layers.Flatten(),
        layers.Dense(5, **f32),
        layers.Softmax(dtype="float32"),
    ], name="cnn")


def merge(override=False):
    f32 = {"dtype": "float32"} if override else {}
    a = keras.Input(shape=(6,), name="a")
    b = keras.Input(shape=(6,), name="b")
    d1 = layers.Dense(8, name="d1")(a)
    d2 = layers.Dense(8, activation="tanh", name="d2")(b)
    sub = layers.Subtract(name="sub")([d1, d2])
    mx = layers.Maximum(name="mx")([d1, d2, sub])
    mn = layers.Minimum(name="mn")([d1, d2])
    cat = layers.Concatenate(name="cat")([sub, mx, mn])          # [N, 24]
    r = layers.Reshape((4, -1), name="r")(cat)                   # [N, 4, 6]
    p = layers.Permute((2, 1), name="p")(r)                      # [N, 6, 4]
    ln = layers.LayerNormalization(axis=[1, 2], name="ln", **f32)(p)
    sm = layers.Softmax(axis=1, name="sm")(ln)
    cat2 = layers.Concatenate(axis=1, name="cat2")([sm, p])      # [N, 12, 4]
    out = layers.Dense(3, name="out")(layers.Flatten(name="flat")(cat2))
    side = layers.LayerNormalization(name="side")(mn)
    return keras.Model([a, b], [out, side], name="merge")


def embed():
    t = keras.Input(shape=(7,), dtype="int32", name="tokens")
    e = layers.Embedding(20, 6, name="emb")(t)                   # [N, 7, 6]
    e = layers.Dropout(0.2, name="drop")(e)
    e = layers.LayerNormalization(name="ln")(e)
    x = layers.Reshape((7, 6, 1), name="img")(e)
    x = layers.Conv2D(3, (2, 3), activation="tanh", name="conv")(x)   # [N, 6, 4, 3]
    x = layers.MaxPooling2D(2, strides=1, padding="same", name="pool")(x)
    y = layers.Dense(4, name="head")(layers.Flatten(name="flat")(x))
    return keras.Model(t, y, name="embed")


def scaled(rng, w):
    """Random weights that keep activations near 1 (a kernel's range shrinks
    with its fan-in), so that no softmax saturates and hides errors."""
    fan_in = int(np.prod(w.shape[:-1])) if w.ndim >= 2 else 1
    s = 0.5 if w.ndim < 2 or w.shape[0] == 20 else 1.5 / np.sqrt(fan_in)   # embeddings: 20 rows
    return rng.uniform(-s, s, w.shape).astype(w.dtype)


def save_case(rng, model, base, manifest, lowest):
    model.set_weights([scaled(rng, w) for w in model.get_weights()])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.002),
                  loss="categorical_crossentropy", metrics=["accuracy"])
    model.save(os.path.join(HERE, base + ".keras"))
    xs = []
    for t in model.inputs:
        shape = (8,) + tuple(t.shape[1:])
        if "int" in str(t.dtype):
            xs.append(rng.integers(0, 20, shape).astype(np.int32))
        else:
            xs.append(rng.standard_normal(shape).astype(np.float32))
    ys = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
    ys = ys if isinstance(ys, (list, tuple)) else [ys]
    for i, x in enumerate(xs):
        np.save(os.path.join(HERE, f"{base}.in{i}.npy"), x)
    for i, y in enumerate(ys):
        np.save(os.path.join(HERE, f"{base}.out{i}.npy"), np.asarray(y, dtype=np.float32))
    manifest.append(f"{base} {model.dtype_policy.name} {len(xs)} {len(ys)} {lowest}")


def layers_main():
    rng = np.random.default_rng(2027)
    manifest = []
    lowest = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
    for policy in LAYER_POLICIES:
        keras.mixed_precision.set_global_policy(policy)
        for name, build in [("cnn", cnn), ("merge", merge), ("embed", embed)]:
            save_case(rng, build(), f"{name}-{policy}", manifest, lowest[policy])
    keras.mixed_precision.set_global_policy("mixed_float16")
    save_case(rng, cnn(override=True), "cnn_override-mixed_float16", manifest, "bfloat16")
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    save_case(rng, merge(override=True), "merge_override-mixed_bfloat16", manifest, "bfloat16")
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-layers.txt"), "w") as f:
        f.write(f"# generated by generate.py layers with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")


# ---- generate.py layers2: BatchNormalization and a seeded Dropout ----

def bn():
    x = keras.Input(shape=(8, 8, 3), name="img")
    y = layers.Conv2D(6, 3, padding="same", name="conv")(x)
    y = layers.BatchNormalization(momentum=0.9, epsilon=1e-2, name="bn")(y)
    y = layers.ReLU(name="relu")(y)
    y = layers.Dropout(0.25, seed=7, name="drop")(y)
    y = layers.BatchNormalization(center=False, name="bn_nocenter")(y)
    y = layers.Flatten(name="flat")(y)
    y = layers.Dense(10, name="d")(y)
    y = layers.BatchNormalization(scale=False, center=False, name="bn_plain")(y)
    y = layers.Dense(4, name="head")(y)
    return keras.Model(x, y, name="bn")


def gp():
    x = keras.Input(shape=(7, 6, 3), name="img")
    t = keras.Input(shape=(5, 4), name="seq")
    y = layers.ZeroPadding2D(((1, 2), (0, 1)), name="pad")(x)           # [N, 10, 7, 3]
    y = layers.Conv2D(5, 3, activation="relu", name="conv")(y)          # [N, 8, 5, 5]
    y = layers.ZeroPadding2D(1, name="pad1")(y)                         # [N, 10, 7, 5]
    a = layers.GlobalAveragePooling2D(name="gap")(y)                     # [N, 5]
    b = layers.GlobalMaxPooling2D(keepdims=True, name="gmp")(y)          # [N, 1, 1, 5]
    b = layers.Flatten(name="flat")(b)
    c = layers.GlobalAveragePooling1D(name="gap1")(t)                   # [N, 4]
    s = layers.Concatenate(name="cat")([a, b, c])
    return keras.Model([x, t], [layers.Dense(3, name="head")(s), a], name="gp")


def seq_dense():
    """Dense on rank 3 (Keras contracts the last axis), after an Embedding and on a float sequence."""
    t = keras.Input(shape=(5,), dtype="int32", name="tokens")
    f = keras.Input(shape=(5, 4), name="seq")
    e = layers.Embedding(20, 6, name="emb")(t)                          # [N, 5, 6]
    e = layers.Dense(8, activation="relu", name="proj")(e)              # [N, 5, 8]
    g = layers.Dense(8, activation="gelu", name="seq_dense")(f)         # [N, 5, 8]
    y = layers.Add(name="sum")([e, g])
    y = layers.Dense(3, name="head")(y)                                 # [N, 5, 3]
    return keras.Model([t, f], [y, layers.GlobalAveragePooling1D(name="pool")(y)], name="seq_dense")


def layers3_main():
    """manifest-layers3.txt and its files: seq_dense-<policy>.keras (the others are left as they are)."""
    rng = np.random.default_rng(2029)
    manifest = []
    lowest = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
    for policy in LAYER_POLICIES:
        keras.mixed_precision.set_global_policy(policy)
        save_case(rng, seq_dense(), f"seq_dense-{policy}", manifest, lowest[policy])
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-layers3.txt"), "w") as f:
        f.write(f"# generated by generate.py layers3 with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")


def mha():
    """MultiHeadAttention: self-attention with use_causal_mask, cross-attention
    with a positional key and an attention_mask input, a layer without biases
    called with key= and both masks, and one layer shared by two calls.
    return_attention_scores=True makes Keras 3.15 on JAX take its explicit
    path (query scaled, einsum, Softmax, einsum), as castor computes it: its
    default ops.dot_product_attention refuses float16 on the CPU."""
    q = keras.Input(shape=(5, 8), name="q")
    v = keras.Input(shape=(7, 6), name="v")
    k = keras.Input(shape=(7, 4), name="k")
    m = keras.Input(shape=(5, 7), name="m")
    a, _ = layers.MultiHeadAttention(2, 4, name="self_attn")(q, q, use_causal_mask=True,
                                                             return_attention_scores=True)
    a = layers.LayerNormalization(name="ln")(layers.Add(name="res")([q, a]))
    b, _ = layers.MultiHeadAttention(3, 2, value_dim=5, name="cross")(a, v, k, attention_mask=m,
                                                                     return_attention_scores=True)
    c, _ = layers.MultiHeadAttention(2, 3, use_bias=False, name="no_bias")(
        b, v, key=k, attention_mask=m, use_causal_mask=True, return_attention_scores=True)
    shared = layers.MultiHeadAttention(2, 3, name="shared")
    d, _ = shared(c, c, return_attention_scores=True)
    e, _ = shared(d, c, use_causal_mask=True, return_attention_scores=True)
    y = layers.Dense(4, name="head")(layers.GlobalAveragePooling1D(name="pool")(e))
    return keras.Model([q, v, k, m], [y, d], name="mha")


def layers4_main():
    """manifest-layers4.txt and its files: mha-<policy>.keras (the others are
    left as they are); the attention mask input holds 0/1 with one query row
    masked whole."""
    rng = np.random.default_rng(2030)
    manifest = []
    lowest = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
    for policy in LAYER_POLICIES:
        keras.mixed_precision.set_global_policy(policy)
        model = mha()
        real_predict = model.predict

        def predict(xs, verbose=0, real_predict=real_predict):
            mask = (rng.uniform(0, 1, xs[3].shape) < 0.7).astype(np.float32)
            mask[2, 1, :] = 0
            xs[3][...] = mask
            return real_predict(xs, verbose=verbose)
        model.predict = predict
        save_case(rng, model, f"mha-{policy}", manifest, lowest[policy])
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-layers4.txt"), "w") as f:
        f.write(f"# generated by generate.py layers4 with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")


def layers2_main():
    """manifest-layers2.txt and its files (the others are left as they are):
    bn-<policy>.keras, Functional: Conv2D, BatchNormalization (momentum 0.9,
    epsilon 0.01), ReLU, Dropout (rate 0.25, seed 7), BatchNormalization
    without center, Flatten, Dense, BatchNormalization without center or
    scale, Dense; the moving variances drawn from [0.5, 1.5]."""
    rng = np.random.default_rng(2028)
    manifest = []
    lowest = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
    for policy in LAYER_POLICIES:
        keras.mixed_precision.set_global_policy(policy)
        model = bn()
        model.set_weights([scaled(rng, w) for w in model.get_weights()])
        for layer in model.layers:
            if isinstance(layer, layers.BatchNormalization):
                v = layer.moving_variance
                v.assign(rng.uniform(0.5, 1.5, v.shape).astype("float32"))
        real_set = model.set_weights
        model.set_weights = lambda ws: None   # save_case must keep these weights
        save_case(rng, model, f"bn-{policy}", manifest, lowest[policy])
        model.set_weights = real_set
    for policy in LAYER_POLICIES:
        keras.mixed_precision.set_global_policy(policy)
        save_case(rng, gp(), f"gp-{policy}", manifest, lowest[policy])
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-layers2.txt"), "w") as f:
        f.write(f"# generated by generate.py layers2 with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")


# ---- generate.py dwconv: DepthwiseConv2D and SeparableConv2D ----

def dwconv(override=False):
    """Functional, two inputs and two outputs: DepthwiseConv2D (depth_multiplier,
    same/valid, strides, dilation, no bias, an activation; on a 1-channel image)
    and SeparableConv2D (depth_multiplier, dilation, strides, no bias)."""
    bf = {"dtype": "mixed_bfloat16"} if override else {}
    f32 = {"dtype": "float32"} if override else {}
    x = keras.Input(shape=(10, 9, 3), name="img")
    g = keras.Input(shape=(7, 7, 1), name="gray")
    y = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, activation="relu", name="dw1", **bf)(x)  # [N,10,9,6]
    y = layers.DepthwiseConv2D((2, 3), strides=2, use_bias=False, name="dw2")(y)                 # [N,5,4,6]
    y = layers.SeparableConv2D(5, 3, padding="same", depth_multiplier=2, dilation_rate=2,
                               activation="tanh", name="sep1", **f32)(y)                       # [N,5,4,5]
    y = layers.SeparableConv2D(4, (3, 2), strides=(2, 1), use_bias=False, name="sep2")(y)       # [N,2,3,4]
    a = layers.Dense(3, name="head")(layers.Flatten(name="flat")(y))
    z = layers.DepthwiseConv2D(3, depth_multiplier=3, dilation_rate=(1, 2), name="dw_gray")(g)  # [N,5,3,3]
    z = layers.SeparableConv2D(2, 2, padding="same", name="sep_gray")(z)                       # [N,5,3,2]
    b = layers.GlobalAveragePooling2D(name="gap")(z)
    return keras.Model([x, g], [a, b], name="dwconv")


def dwconv_main():
    """manifest-dwconv.txt and placements-dwconv.txt and their files:
    dwconv-<policy>.keras under the five global policies, and
    dwconv_override-mixed_float16 (dw1 mixed_bfloat16, sep1 float32); the
    other files are left as they are."""
    rng = np.random.default_rng(2030)
    manifest = []
    lowest = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
              "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}

    def case(model, base, low):
        # a depthwise kernel [KH, KW, C, M] sums KH*KW terms, not KH*KW*C
        # (scaled's fan-in): its range follows, so the signal keeps its size
        ws = []
        for v in model.weights:
            w = np.asarray(v.numpy())
            if v.path.endswith("/kernel") and "dw" in v.path or v.path.endswith("depthwise_kernel"):
                s = 1.7 / np.sqrt(w.shape[0] * w.shape[1])
                ws.append(rng.uniform(-s, s, w.shape).astype(w.dtype))
            else:
                ws.append(scaled(rng, w))
        model.set_weights(ws)
        model.set_weights = lambda ws: None   # save_case must keep these weights
        save_case(rng, model, base, manifest, low)

    for policy in POLICIES:
        keras.mixed_precision.set_global_policy(policy)
        case(dwconv(), f"dwconv-{policy}", lowest[policy])
    keras.mixed_precision.set_global_policy("mixed_float16")
    case(dwconv(override=True), "dwconv_override-mixed_float16", "bfloat16")
    keras.mixed_precision.set_global_policy("float32")
    stamp = f"keras {keras.__version__} on {datetime.date.today()}"
    with open(os.path.join(HERE, "manifest-dwconv.txt"), "w") as f:
        f.write(f"# generated by generate.py dwconv with {stamp}\n"
                "# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")
    placements_main(["manifest-dwconv.txt"], "placements-dwconv.txt")
    dwconv_bad()


def dwconv_bad():
    """dwconv_bad_kernel.keras (dw1's depth_multiplier 3 over its saved [3, 3, 3, 2]
    kernel) and dwconv_bad_config.keras (sep1 with an L2 depthwise_regularizer):
    dwconv-float32.keras with its config.json edited (tests/golden/keras-errors)."""
    import zipfile
    src = os.path.join(HERE, "dwconv-float32.keras")
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    cfg = members["config.json"].decode()
    edits = {
        "dwconv_bad_kernel": ('"depth_multiplier": 2, "kernel_size": [3, 3]',
                              '"depth_multiplier": 3, "kernel_size": [3, 3]'),
        "dwconv_bad_config": ('"depthwise_regularizer": null, "pointwise_regularizer": null',
                              '"depthwise_regularizer": {"module": "keras.regularizers", "class_name": "L2", '
                              '"config": {"l2": 0.01}, "registered_name": null}, "pointwise_regularizer": null'),
    }
    for name, (old, new) in edits.items():
        assert old in cfg, name
        with zipfile.ZipFile(os.path.join(HERE, name + ".keras"), "w", zipfile.ZIP_STORED) as z:
            for n, data in members.items():
                z.writestr(n, cfg.replace(old, new, 1).encode() if n == "config.json" else data)


def legacy():
    """legacy.h5 (generate.py legacy): a model saved in the legacy .h5 format
    (Keras 3 writes the model_config attribute as Keras 2 did), which castor
    refuses with how to re-save it (tests/golden/keras-errors)."""
    keras.mixed_precision.set_global_policy("float32")
    m = keras.Sequential([keras.Input(shape=(4,)), layers.Dense(3)], name="legacy")
    m.save(os.path.join(HERE, "legacy.h5"))


def placements_main(manifests=("manifest-layers.txt", "manifest-layers2.txt"), out_name="placements-layers.txt"):
    """placements-layers.txt: Keras's per-layer dtypes in the layer-class
    files, read back from the saved files (they are not rewritten)."""
    lines = []
    files = []
    for manifest in manifests:
        with open(os.path.join(HERE, manifest)) as f:
            files += [ln.split()[0] for ln in f if ln.strip() and not ln.startswith("#")]
    for name in files:
        model = keras.models.load_model(os.path.join(HERE, name + ".keras"), compile=False)
        outputs = {h._keras_history.operation.name for h in model.outputs}
        for layer in model.layers:
            cls = type(layer).__name__
            if cls == "InputLayer":
                continue
            out = {str(t.dtype) for node in layer._inbound_nodes for t in node.output_tensors}
            assert len(out) == 1, (name, layer.name, out)
            lines.append(f"{name} {layer.name} {cls} {layer.compute_dtype} {out.pop()} "
                         f"{int(layer.name in outputs)}")
    with open(os.path.join(HERE, out_name), "w") as f:
        f.write(f"# generated by generate.py placements with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file layer class keras_compute keras_output is_model_output\n")
        f.write("\n".join(lines) + "\n")



# ---- generate.py apps: the layers keras.applications use (issue 37) ----

def apps_acts():
    """ReLU's settings and Keras 3's activations, each on the same input."""
    x = keras.Input((6, 5), name="x")
    outs = [layers.ReLU(max_value=6.0, name="relu6")(x),
            layers.ReLU(negative_slope=0.1, name="leaky")(x),
            layers.ReLU(max_value=1.5, negative_slope=0.2, threshold=0.25, name="relu_all")(x),
            layers.ReLU(threshold=0.5, name="relu_thr")(x)]
    for act in ["hard_silu", "hard_swish", "hard_sigmoid", "relu6", "silu", "mish", "selu", "elu", "leaky_relu",
                "softsign", "softplus", "exponential", "gelu", "log_softmax"]:
        outs.append(layers.Activation(act, name="act_" + act)(x))
    y = layers.Dense(7, activation="hard_silu", name="dense_hs")(x)
    return keras.Model(x, [layers.Concatenate(name="all")(outs), y], name="apps_acts")


def apps_prep():
    """Rescaling, Normalization (stored statistics), a squeeze-and-excitation
    block (broadcasting Multiply), broadcasting Add, Dropout with a
    noise_shape, SpatialDropout2D, Cropping2D, LayerScale."""
    from keras.src.applications.convnext import LayerScale
    x = keras.Input((8, 7, 4), name="img")
    h = layers.Rescaling(1.0 / 2.0, offset=-0.25, name="rescale")(x)
    h = layers.Rescaling([0.5, 1.0, 2.0, 0.25], name="rescale_c")(h)
    h = layers.Normalization(axis=-1, name="norm")(h)
    h = layers.Conv2D(6, 3, padding="same", activation="swish", name="conv")(h)
    se = layers.GlobalAveragePooling2D(keepdims=True, name="se_pool")(h)
    se = layers.Conv2D(6, 1, activation="hard_sigmoid", name="se_conv")(se)
    h = layers.Multiply(name="se_mul")([h, se])
    h = layers.Add(name="bias_add")([h, se])
    h = layers.Dropout(0.3, noise_shape=(None, 1, 1, 1), name="drop_path")(h)
    h = layers.SpatialDropout2D(0.2, name="sdrop")(h)
    h = layers.Cropping2D(((1, 2), (0, 1)), name="crop")(h)
    h = LayerScale(1e-6, 6, name="ls")(h)
    c = layers.Normalization(axis=-1, mean=[0.5, 1.0, -1.0, 0.0], variance=[4.0, 1.0, 0.25, 2.0], name="norm_c")(x)
    return keras.Model(x, [h, c], name="apps_prep")


def apps_ops():
    """The functional API's op nodes with numbers and tensors (MobileNetV3's
    hard_sigmoid is ReLU(6)(x + 3.0) * (1 / 6))."""
    x = keras.Input((4, 4, 3), name="x")
    y = layers.ReLU(6.0, name="r6")(x + 3.0) * (1.0 / 6.0)
    z = 2.0 - y / (x * x + 1.0)
    return keras.Model(x, [y, keras.ops.maximum(z, 1.5) - keras.ops.minimum(x, 0.5)], name="apps_ops")


def apps_main():
    rng = np.random.default_rng(2037)
    manifest = []
    lowest = {"float32": "float32", "mixed_bfloat16": "bfloat16"}
    for policy in ["float32", "mixed_bfloat16"]:
        keras.mixed_precision.set_global_policy(policy)
        for name, build in [("apps_acts", apps_acts), ("apps_prep", apps_prep), ("apps_ops", apps_ops)]:
            model = build()
            for l in model.layers:  # the stored statistics of Normalization, as adapt() leaves them
                if isinstance(l, layers.Normalization) and l.weights:
                    l.set_weights([rng.uniform(-1, 1, (4,)).astype("float32"), rng.uniform(0.2, 3, (4,)).astype("float32"),
                                   np.array(100, dtype="int64")])
            weights = [w if ("norm" in v.path) else scaled(rng, w) for v, w in zip(model.weights, model.get_weights())]
            model.set_weights(weights)
            model.save(os.path.join(HERE, f"{name}-{policy}.keras"))
            # the file as Keras loads it (Normalization takes set statistics at load, not at set_weights)
            model = keras.models.load_model(os.path.join(HERE, f"{name}-{policy}.keras"))
            xs = [rng.standard_normal((8,) + tuple(t.shape[1:])).astype(np.float32) for t in model.inputs]
            ys = model.predict(xs[0], verbose=0)
            ys = ys if isinstance(ys, (list, tuple)) else [ys]
            np.save(os.path.join(HERE, f"{name}-{policy}.in0.npy"), xs[0])
            for i, y in enumerate(ys):
                np.save(os.path.join(HERE, f"{name}-{policy}.out{i}.npy"), np.asarray(y, dtype=np.float32))
            manifest.append(f"{name}-{policy} {policy} 1 {len(ys)} {lowest[policy]}")
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-apps.txt"), "w") as f:
        f.write(f"# generated by generate.py apps with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")

# ---- generate.py rescaling: Rescaling computes in its compute dtype (issue 37) ----

def rescaling_main():
    """Rescaling under mixed_bfloat16 on pixel values, as EfficientNet and
    MobileNetV3 begin: Keras's call casts the input and the scale to
    bfloat16 (1/255 becomes 2^-8) and rounds the product, which castor's
    TF-AMP infer rule (f32 before the first convolution) did not: 6.8e-3 of
    EfficientNetB0's first layer. Output 0 is Rescaling(1/255) alone (castor
    must give Keras's bits: one rounded product of two bfloat16 values);
    output 1 Rescaling(1/127.5, offset=-1), MobileNetV3's: the product and
    the add each rounded (Keras's bits too, measured on 2026-11-29); output 2
    EfficientNetV2's Normalization with ImageNet's mean and variance after
    output 0: its call converts them to bfloat16 too."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    x = keras.Input((6, 5, 3), name="pixels")
    unit = layers.Rescaling(1.0 / 255, name="to_unit")(x)
    norm = layers.Normalization(mean=[0.485, 0.456, 0.406], variance=[0.229**2, 0.224**2, 0.225**2],
                                name="imagenet")(unit)
    model = keras.Model(x, [unit, layers.Rescaling(1.0 / 127.5, offset=-1.0, name="to_pm1")(x), norm],
                        name="rescale_bf16")
    keras.mixed_precision.set_global_policy("float32")
    name = "rescale_bf16-mixed_bfloat16"
    model.save(os.path.join(HERE, name + ".keras"))
    rng = np.random.default_rng(2038)
    xs = rng.uniform(0, 255, (4, 6, 5, 3)).astype(np.float32)
    ys = keras.models.load_model(os.path.join(HERE, name + ".keras")).predict(xs, verbose=0)
    np.save(os.path.join(HERE, name + ".in0.npy"), xs)
    for i, y in enumerate(ys):
        np.save(os.path.join(HERE, f"{name}.out{i}.npy"), np.asarray(y, dtype=np.float32))


# ---- generate.py acts16: 16-bit activations as Keras on JAX rounds them (issue 37) ----

def acts16_main():
    """Activation layers under mixed_bfloat16 on values of magnitude up to
    ~16. XLA computes sigmoid as 1 / (1 + exp(-x)) and rounds each op to
    bfloat16 (exp, the sum, the quotient; silu's product too) and
    hard_sigmoid as relu6(x + 3) / 6 with x + 3 rounded: castor must give
    Keras's bits (rounding once, 37% of swish's values differed by an ulp;
    EfficientNet's 2e-2 to 3e-2 from Keras compounded from it)."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    x = keras.Input((16, 16), name="x")
    # each activation between two Dense layers of identity kernels (exact in any order of summation), as
    # activations sit between convolutions: castor's infer rule keeps an elementwise op with float32
    # neighbours in float32 (TF's AMP lists; docs/keras.md)
    outs, eyes = [], []
    for a in ["swish", "silu", "sigmoid", "hard_sigmoid", "hard_swish"]:
        d_in = layers.Dense(16, use_bias=False, name="in_" + a)
        d_out = layers.Dense(16, use_bias=False, name="out_" + a)
        outs.append(d_out(layers.Activation(a, name="act_" + a)(d_in(x))))
        eyes += [d_in, d_out]
    model = keras.Model(x, outs, name="acts16")
    for d in eyes:
        d.set_weights([np.eye(16, dtype=np.float32)])
    keras.mixed_precision.set_global_policy("float32")
    name = "acts16-mixed_bfloat16"
    model.save(os.path.join(HERE, name + ".keras"))
    rng = np.random.default_rng(2039)
    xs = (rng.standard_normal((4, 16, 16)) * 4).astype(np.float32)
    ys = keras.models.load_model(os.path.join(HERE, name + ".keras")).predict(xs, verbose=0)
    np.save(os.path.join(HERE, name + ".in0.npy"), xs)
    for i, y in enumerate(ys):
        np.save(os.path.join(HERE, f"{name}.out{i}.npy"), np.asarray(y, dtype=np.float32))


# ---- generate.py avgpool16: AveragePooling2D in 16 bits as Keras on JAX sums (issue 37) ----

def avgpool16_main():
    """AveragePooling2D (3x3 'same' stride 1, NASNet's; 2x2 'valid') under mixed_bfloat16,
    between identity 1x1 convolutions: Keras on JAX sums the window with lax.reduce_window in
    bfloat16, so XLA rounds the running sum to it after each tap (row-major), then divides by
    the taps inside; a sum kept in float32 and rounded once differs in 1858 of the 4096 values
    (generate.py prints both counts). Under mixed_float16 neither model gives Keras's bits
    (1329 and 2384 of 4096 differed, 2026-11-30: XLA's float16 reduce_window is not that), so
    castor's float16 average keeps its float32 sum and there is no float16 file."""
    import ml_dtypes  # JAX's own dependency: the 16-bit roundings, to show what the golden tells apart
    for policy, dt in (("mixed_bfloat16", ml_dtypes.bfloat16),):
        keras.mixed_precision.set_global_policy(policy)
        x = keras.Input((8, 8, 16), name="x")
        c_in = layers.Conv2D(16, 1, use_bias=False, name="c_in")
        h = c_in(x)
        p1 = layers.AveragePooling2D(3, strides=1, padding="same", name="pool_same")(h)
        p2 = layers.AveragePooling2D(2, name="pool_valid")(h)
        c1 = layers.Conv2D(16, 1, use_bias=False, name="c1")
        c2 = layers.Conv2D(16, 1, use_bias=False, name="c2")
        model = keras.Model(x, [c1(p1), c2(p2)], name="avgpool16")
        eye = np.eye(16, dtype=np.float32).reshape(1, 1, 16, 16)
        for c in (c_in, c1, c2):
            c.set_weights([eye])
        keras.mixed_precision.set_global_policy("float32")
        name = f"avgpool16-{policy}"
        model.save(os.path.join(HERE, name + ".keras"))
        rng = np.random.default_rng(3717)
        xs = (rng.standard_normal((4, 8, 8, 16)) * 4).astype(np.float32)
        ys = keras.models.load_model(os.path.join(HERE, name + ".keras")).predict(xs, verbose=0)
        np.save(os.path.join(HERE, name + ".in0.npy"), xs)
        for i, y in enumerate(ys):
            np.save(os.path.join(HERE, f"{name}.out{i}.npy"), np.asarray(y, dtype=np.float32))
        r = lambda v: np.asarray(v, dtype=np.float32).astype(dt).astype(np.float32)  # noqa: E731
        xb = r(xs)
        pad = np.zeros((4, 10, 10, 16), np.float32)
        pad[:, 1:-1, 1:-1] = xb
        inside = np.zeros((10, 10), np.float32)
        inside[1:-1, 1:-1] = 1
        for label, step in (("each tap", r), ("once", lambda v: v)):
            acc = np.zeros((4, 8, 8, 16), np.float32)
            cnt = np.zeros((8, 8), np.float32)
            for di in range(3):
                for dj in range(3):
                    acc = step(acc + pad[:, di:di + 8, dj:dj + 8])
                    cnt += inside[di:di + 8, dj:dj + 8]
            mean = r(r(acc) / cnt[None, :, :, None])
            print(f"avgpool16 {policy}: the 3x3 sum rounded {label} differs from Keras's in "
                  f"{int((mean != ys[0]).sum())} of {mean.size} values")


# ---- generate.py nested: models used as layers (issue 37; ConvNeXt's stem is a nested Sequential) ----

def nested_fn():
    """A Functional with a nested Sequential stem (Conv2D, LayerNormalization, as ConvNeXt's), a
    nested Functional holding a nested Sequential (two levels), a second Sequential (Keras stores it
    under layers/sequential_1), and the outer model's own Dense."""
    stem = keras.Sequential([keras.Input((8, 8, 3)), layers.Conv2D(6, 2, strides=2, name="stem_conv"),
                             layers.LayerNormalization(epsilon=1e-6, name="stem_ln")], name="stem")
    deep = keras.Sequential([keras.Input((4, 4, 6)), layers.Dense(5, activation="gelu", name="deep_dense")],
                            name="deep")
    xi = keras.Input((4, 4, 6), name="block_in")
    h = deep(xi)
    h = layers.Conv2D(6, 3, padding="same", name="block_conv")(h)
    block = keras.Model(xi, layers.Add(name="block_add")([h, xi]), name="block")
    head = keras.Sequential([keras.Input((4, 4, 6)), layers.GlobalAveragePooling2D(name="head_pool"),
                             layers.Dense(4, name="head_dense")], name="head")
    x = keras.Input((8, 8, 3), name="img")
    y = head(block(stem(x)))
    return keras.Model(x, [layers.Dense(3, name="out")(y), y], name="nested_fn")


def nested_seq():
    """A Sequential holding a Sequential."""
    inner = keras.Sequential([keras.Input((5,)), layers.Dense(6, activation="tanh", name="in_dense"),
                              layers.Dense(6, name="in_dense2")], name="inner")
    return keras.Sequential([keras.Input((5,)), inner, layers.Dense(2, name="out_dense")], name="nested_seq")


def nested_main():
    rng = np.random.default_rng(3737)
    manifest = []
    lowest = {"float32": "float32", "mixed_bfloat16": "bfloat16"}
    for policy in ["float32", "mixed_bfloat16"]:
        keras.mixed_precision.set_global_policy(policy)
        for name, build in [("nested_fn", nested_fn), ("nested_seq", nested_seq)]:
            model = build()
            model.set_weights([scaled(rng, w) for w in model.get_weights()])
            model.save(os.path.join(HERE, f"{name}-{policy}.keras"))
            model = keras.models.load_model(os.path.join(HERE, f"{name}-{policy}.keras"))
            x = rng.standard_normal((8,) + tuple(model.inputs[0].shape[1:])).astype(np.float32)
            ys = model.predict(x, verbose=0)
            ys = ys if isinstance(ys, (list, tuple)) else [ys]
            np.save(os.path.join(HERE, f"{name}-{policy}.in0.npy"), x)
            for i, y in enumerate(ys):
                np.save(os.path.join(HERE, f"{name}-{policy}.out{i}.npy"), np.asarray(y, dtype=np.float32))
            manifest.append(f"{name}-{policy} {policy} 1 {len(ys)} {lowest[policy]}")
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-nested.txt"), "w") as f:
        f.write(f"# generated by generate.py nested with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")


def nested_bad():
    """nested_deep.keras: Sequentials nested four deep, one level past castor's bound
    (KR_MAX_NEST, 3); nested_bad_input.keras: nested_seq-float32.keras with its inner model's
    InputLayer edited to 4 features, one fewer than its call passes (tests/golden/keras-errors)."""
    import zipfile
    keras.mixed_precision.set_global_policy("float32")
    m = keras.Sequential([keras.Input((3,)), layers.Dense(2, name="d4")], name="level4")
    for level in [3, 2, 1]:
        m = keras.Sequential([keras.Input((3,) if level == 3 else (3,)), m] if level != 3 else
                             [keras.Input((3,)), layers.Dense(3, name="d3"), m], name=f"level{level}")
    keras.Sequential([keras.Input((3,)), m], name="deep").save(os.path.join(HERE, "nested_deep.keras"))
    src = os.path.join(HERE, "nested_seq-float32.keras")
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    cfg = members["config.json"].decode()
    old = '"batch_shape": [null, 5]'
    assert cfg.count(old) == 2
    i = cfg.index(old, cfg.index(old) + 1)
    cfg = cfg[:i] + '"batch_shape": [null, 4]' + cfg[i + len(old):]
    with zipfile.ZipFile(os.path.join(HERE, "nested_bad_input.keras"), "w", zipfile.ZIP_STORED) as z:
        for n, data in members.items():
            z.writestr(n, cfg.encode() if n == "config.json" else data)


# ---- generate.py upsample: UpSampling2D (issue 37) ----

def upsample():
    """UpSampling2D (nearest) with size (2, 3) and 2, around Conv2Ds; the raw upsampled input too."""
    x = keras.Input((3, 4, 2), name="img")
    h = layers.Conv2D(3, 2, padding="same", activation="tanh", name="conv1")(x)
    h = layers.UpSampling2D((2, 3), name="up23")(h)
    h = layers.Conv2D(4, 3, name="conv2")(h)
    h = layers.UpSampling2D(2, name="up2")(h)
    return keras.Model(x, [h, layers.UpSampling2D((1, 2), name="up12")(x)], name="upsample")


def upsample_main():
    rng = np.random.default_rng(3738)
    manifest = []
    lowest = {"float32": "float32", "mixed_bfloat16": "bfloat16"}
    for policy in ["float32", "mixed_bfloat16"]:
        keras.mixed_precision.set_global_policy(policy)
        model = upsample()
        model.set_weights([scaled(rng, w) for w in model.get_weights()])
        base = f"upsample-{policy}"
        model.save(os.path.join(HERE, base + ".keras"))
        x = rng.standard_normal((8, 3, 4, 2)).astype(np.float32)
        ys = model.predict(x, verbose=0)
        np.save(os.path.join(HERE, base + ".in0.npy"), x)
        for i, y in enumerate(ys):
            np.save(os.path.join(HERE, f"{base}.out{i}.npy"), np.asarray(y, dtype=np.float32))
        manifest.append(f"{base} {policy} 1 {len(ys)} {lowest[policy]}")
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-upsample.txt"), "w") as f:
        f.write(f"# generated by generate.py upsample with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")


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
    if sys.argv[1:] == ["layers"]:
        layers_main()
    elif sys.argv[1:] == ["refusals"]:
        refusals()
    elif sys.argv[1:] == ["apps"]:
        apps_main()
    elif sys.argv[1:] == ["rescaling"]:
        rescaling_main()
    elif sys.argv[1:] == ["acts16"]:
        acts16_main()
    elif sys.argv[1:] == ["avgpool16"]:
        avgpool16_main()
    elif sys.argv[1:] == ["nested"]:
        nested_main()
    elif sys.argv[1:] == ["nested_bad"]:
        nested_bad()
    elif sys.argv[1:] == ["upsample"]:
        upsample_main()
    elif sys.argv[1:] == ["layers3"]:
        layers3_main()
    elif sys.argv[1:] == ["layers4"]:
        layers4_main()
    elif sys.argv[1:] == ["layers2"]:
        layers2_main()
    elif sys.argv[1:] == ["placements"]:
        placements_main()
    elif sys.argv[1:] == ["dwconv"]:
        dwconv_main()
    elif sys.argv[1:] == ["dwconv_bad"]:
        dwconv_bad()
    elif sys.argv[1:] == ["legacy"]:
        legacy()
    else:
        main()
