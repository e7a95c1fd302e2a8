#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Golden forward passes of convolutional layers from real Keras 3, for castor.

Run by hand, never by CI or the build (it needs Keras and JAX):

    python3 -m venv /tmp/kvenv && /tmp/kvenv/bin/pip install keras jax jaxlib
    KERAS_BACKEND=jax /tmp/kvenv/bin/python tests/golden/cnn-keras/generate.py [MODEL...]

(MODEL...: those models only, e.g. masking; manifest.txt keeps the others.)

Each model of MODELS below is built in Keras and, from the same table, written
as a .cast file with the same layer names. Its weights (Keras's seeded initial
values, biases drawn too so that they count) go to <model>.safetensors under
the keys the .cast frontend loads (NAME.kernel, NAME.depthwise_kernel, ...),
a seeded input batch to <model>.in0.npy, and for each policy of POLICIES what
Keras's model.predict returns under that global policy (the weights the same
float32 values) to <model>-<policy>.out0.npy. manifest.txt lists
model, policy. tests/unit/check_cnn_keras.c compiles each .cast under each
policy with castor and compares.
"""

import datetime
import json
import os
import struct
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = ["float32", "mixed_float16", "mixed_bfloat16"]
BATCH = 5

# model: (input shape, [(Keras class, .cast layer, name, kwargs)]) in a chain.
# kwargs are Keras's; cast_args() spells them in .cast.
MODELS = {
    "conv": ([13, 11, 4], [
        ("Conv2D", "conv2d", "conv2d", dict(filters=6, kernel_size=3, strides=2, padding="same", activation="relu")),
        ("Conv2D", "conv2d", "conv2d_1", dict(filters=8, kernel_size=(3, 2), groups=2, dilation_rate=(2, 1))),
        ("MaxPooling2D", "max_pooling2d", "max_pooling2d", dict(pool_size=2, padding="same")),
        ("AveragePooling2D", "average_pooling2d", "average_pooling2d", dict(pool_size=(2, 1), strides=1)),
    ]),
    "depthwise": ([10, 9, 3], [
        ("DepthwiseConv2D", "depthwise_conv2d", "depthwise_conv2d",
         dict(kernel_size=3, depth_multiplier=2, padding="same", activation="relu")),
        ("DepthwiseConv2D", "depthwise_conv2d", "depthwise_conv2d_1",
         dict(kernel_size=5, strides=2, use_bias=False)),
        ("GlobalAveragePooling2D", "global_average_pooling2d", "global_average_pooling2d", dict()),
    ]),
    "separable": ([8, 7, 5], [
        ("ZeroPadding2D", "zero_padding2d", "zero_padding2d", dict(padding=((1, 0), (2, 1)))),
        ("SeparableConv2D", "separable_conv2d", "separable_conv2d",
         dict(filters=8, kernel_size=3, depth_multiplier=2, activation="relu")),
        ("SeparableConv2D", "separable_conv2d", "separable_conv2d_1",
         dict(filters=6, kernel_size=(1, 3), strides=2, padding="same")),
        ("GlobalMaxPooling2D", "global_max_pooling2d", "global_max_pooling2d", dict(keepdims=True)),
    ]),
    "conv1d": ([17, 3], [
        ("Conv1D", "conv1d", "conv1d", dict(filters=6, kernel_size=5, strides=2, padding="same", activation="relu")),
        ("Conv1D", "conv1d", "conv1d_1", dict(filters=4, kernel_size=3, groups=2, padding="causal", dilation_rate=2)),
        ("MaxPooling1D", "max_pooling1d", "max_pooling1d", dict(pool_size=3, strides=1)),
        ("AveragePooling1D", "average_pooling1d", "average_pooling1d", dict(pool_size=2, padding="same")),
        ("GlobalMaxPooling1D", "global_max_pooling1d", "global_max_pooling1d", dict()),
    ]),
    # masks (issue 39): Masking's mask reaches both scans (LSTM's return_sequences passes it on); the
    # input's steps of ZERO_STEPS are all mask_value, so the mask counts
    "masking": ([7, 4], [
        ("Masking", "masking", "masking", dict(mask_value=0.0)),
        ("LSTM", "lstm", "lstm", dict(units=5, return_sequences=True)),
        ("GRU", "gru", "gru", dict(units=3)),
    ]),
    # Embedding(mask_zero=True)'s mask (the ids that are 0) through GRU (return_sequences) and LSTM
    "embedmask": ([6], [
        ("Embedding", "embedding", "embedding", dict(input_dim=10, output_dim=4, mask_zero=True)),
        ("GRU", "gru", "gru", dict(units=3, return_sequences=True)),
        ("LSTM", "lstm", "lstm", dict(units=2)),
    ]),
}

# the layers .cast spells from the layer library's table (issue 37: re_lu ... group_normalization; the
# .cast names are Keras's automatic ones): the preprocessing and shape layers, the transposed
# convolution's block, InceptionResNetV2's residual scale (a chain item's 5th element names its inputs:
# "x" the model's input, else earlier layers; such a model's .cast gives each layer its own value)
MODELS.update({
    "prep": ([6, 5, 3], [
        ("Rescaling", "rescaling", "rescaling", dict(scale=0.5, offset=-0.25)),
        ("Normalization", "normalization", "normalization",
         dict(mean=[0.1, -0.2, 0.3], variance=[0.5, 2.0, 4.0])),
        ("ReLU", "re_lu", "re_lu", dict(max_value=1.5, negative_slope=0.1, threshold=0.2)),
        ("Cropping2D", "cropping2d", "cropping2d", dict(cropping=((1, 0), (0, 2)))),
        ("UpSampling2D", "up_sampling2d", "up_sampling2d", dict(size=(2, 1))),
        ("Normalization", "normalization", "normalization_1", dict()),  # its mean and variance: weights
        ("UpSampling2D", "up_sampling2d", "up_sampling2d_1", dict(size=2, interpolation="bilinear")),
    ]),
    "upconv": ([5, 4, 3], [
        ("Conv2DTranspose", "conv2d_transpose", "conv2d_transpose",
         dict(filters=4, kernel_size=3, strides=2, padding="same", activation="relu")),
        ("GroupNormalization", "group_normalization", "group_normalization", dict(groups=2, epsilon=1e-3)),
        ("LayerScale", "layer_scale", "layer_scale", dict(init_values=0.1, projection_dim=4)),
        ("SpatialDropout2D", "spatial_dropout2d", "spatial_dropout2d", dict(rate=0.3)),
        ("Conv2DTranspose", "conv2d_transpose", "conv2d_transpose_1",
         dict(filters=3, kernel_size=(2, 3), strides=(1, 2), use_bias=False)),
        ("ReLU", "re_lu", "re_lu", dict()),
    ]),
    "residual": ([5, 4, 3], [
        ("Conv2D", "conv2d", "conv2d", dict(filters=3, kernel_size=1), ["x"]),
        ("CustomScaleLayer", "custom_scale_layer", "custom_scale_layer", dict(scale=0.17), ["x", "conv2d"]),
        ("ReLU", "re_lu", "re_lu", dict(negative_slope=0.2), ["custom_scale_layer"]),
    ]),
    # keys .cast takes from a layers.def row's library row (its Keras config keys beyond the row's own):
    # LayerNormalization's epsilon, Dropout's noise_shape (the identity at inference), the keepdims of
    # GlobalAveragePooling1D; and a merge that broadcasts ([N, 7, 4] * [N, 1, 4])
    "keys": ([7, 4], [
        ("LayerNormalization", "layer_normalization", "layer_normalization", dict(epsilon=0.5), ["x"]),
        ("Dropout", "dropout", "dropout", dict(rate=0.5, noise_shape=(None, 1, 4)), ["layer_normalization"]),
        ("GlobalAveragePooling1D", "global_average_pooling1d", "global_average_pooling1d", dict(keepdims=True),
         ["x"]),
        ("Multiply", "multiply", "multiply", dict(), ["dropout", "global_average_pooling1d"]),
    ]),
})

# classes keras.layers does not export: the applications' own
def keras_class(cls):
    if cls == "LayerScale":
        from keras.src.applications.convnext import LayerScale
        return LayerScale
    if cls == "CustomScaleLayer":
        from keras.src.applications.inception_resnet_v2 import CustomScaleLayer
        return CustomScaleLayer
    return getattr(layers, cls)


# a weight's .cast key suffix where Keras's name differs (LayerScale's gamma has none: "variable")
def weight_key(layer, v):
    return "gamma" if type(layer).__name__ == "LayerScale" else v.name


# weights .cast does not read: Normalization's count (adapt()'s, unused by its call)
SKIP_WEIGHTS = {"count"}

# weights drawn (uniform in [lo, hi)) instead of Keras's initial 0 or 1; the others keep Keras's seeded values
DRAWN = {"bias": (-0.5, 0.5), "beta": (-0.5, 0.5), "gamma": (0.5, 1.5), "mean": (-0.5, 0.5),
         "variance": (0.5, 2.0)}

# model: its input's ids are int32 in [0, this) (an Embedding's), not floats
INT_INPUT = {"embedmask": 10}

# model: (batch row, step) pairs set to 0 in its input: trailing padding, a gap, a row of none
ZERO_STEPS = {
    "masking": [(0, 5), (0, 6), (1, 2), (2, 0), (3, 0), (3, 1), (3, 2), (3, 3), (3, 4), (3, 5), (3, 6), (4, 6)],
    "embedmask": [(0, 4), (0, 5), (1, 0), (2, 3), (3, 0), (3, 1), (3, 2), (3, 3), (3, 4), (3, 5)],
}


def cast_value(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(cast_value(x) for x in v) + "]"
    return str(v)


def cast_text(model, shape, chain):
    lines = [f"# tests/golden/cnn-keras/{model}.cast: generated by generate.py from the same",
             "# table as the Keras model; the tests set the policy.",
             f"model {model}", f'weights "{model}.safetensors"', "",
             f"x = input(shape={cast_value(shape)}{', dtype=int32' if model in INT_INPUT else ''})"]
    named = any(len(item) > 4 for item in chain)
    for _, layer, name, kw, *ins in chain:
        args = ", ".join(f"{k}={cast_value(v)}" for k, v in kw.items())
        srcs = ", ".join(ins[0]) if ins else "x"
        lines.append(f"{name if named else 'x'} = {layer}({srcs}{', ' + args if args else ''}, name={name})")
    lines.append(f"output {chain[-1][2] if named else 'x'}")
    return "\n".join(lines) + "\n"


def build(shape, chain, dtype="float32"):
    inp = keras.Input(shape=shape, batch_size=None, dtype=dtype)
    x, values = inp, {"x": inp}
    for cls, _, name, kw, *ins in chain:
        srcs = [values[i] for i in ins[0]] if ins else [x]
        x = values[name] = keras_class(cls)(name=name, **kw)(srcs if len(srcs) > 1 else srcs[0])
    return keras.Model(inp, x)


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs, off = [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    stamp = f"Keras {keras.__version__}, JAX {jax.__version__}, {datetime.date.today()}"
    manifest = [f"# {stamp}", "# model policy"]
    only = sys.argv[1:]  # model names: regenerate those only (the manifest keeps the others' lines)
    if only:
        with open(os.path.join(HERE, "manifest.txt")) as f:
            manifest = [ln.rstrip("\n") for ln in f if ln.startswith("#") or ln.split()[0] not in only]
    for mi, (model, (shape, chain)) in enumerate(MODELS.items()):
        if only and model not in only:
            continue
        keras.config.set_dtype_policy("float32")
        keras.utils.set_random_seed(100 + mi)
        dtype = "int32" if model in INT_INPUT else "float32"
        ref = build(shape, chain, dtype)
        rng = np.random.default_rng(200 + mi)
        weights = {}
        for layer in ref.layers:
            for v in layer.weights:
                val = np.asarray(v.numpy(), dtype=np.float32)
                key = weight_key(layer, v)
                if key in DRAWN:  # Keras starts these at 0, 1 or a constant: draw them so that they count
                    val = rng.uniform(*DRAWN[key], val.shape).astype(np.float32)
                    v.assign(val)
                weights[f"{layer.name}.{key}"] = val
        write_safetensors(os.path.join(HERE, f"{model}.safetensors"),
                          {k: v for k, v in weights.items() if k.split(".")[-1] not in SKIP_WEIGHTS},
                          {"generator": stamp})
        x = rng.uniform(-1, 1, [BATCH] + shape).astype(np.float32)
        if model in INT_INPUT:  # ids in [1, V): the zeros below are the only masked steps
            x = rng.integers(1, INT_INPUT[model], [BATCH] + shape).astype(np.int32)
        for row, step in ZERO_STEPS.get(model, []):
            x[row, step] = 0
        np.save(os.path.join(HERE, f"{model}.in0.npy"), x)
        with open(os.path.join(HERE, f"{model}.cast"), "w") as f:
            f.write(cast_text(model, shape, chain))
        for policy in POLICIES:
            keras.config.set_dtype_policy(policy)
            m = build(shape, chain, dtype)
            for layer in m.layers:
                for v in layer.weights:
                    v.assign(weights[f"{layer.name}.{weight_key(layer, v)}"])
                if hasattr(layer, "finalize_state"):  # Normalization: its call reads the assigned mean, variance
                    layer.finalize_state()
            y = np.asarray(m.predict(x, verbose=0)).astype(np.float32)
            np.save(os.path.join(HERE, f"{model}-{policy}.out0.npy"), y)
            manifest.append(f"{model} {policy}")
            print(model, policy, y.shape, file=sys.stderr)
    keras.config.set_dtype_policy("float32")
    with open(os.path.join(HERE, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()
