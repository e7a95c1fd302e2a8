# SPDX-License-Identifier: Apache-2.0
"""Recurrent-layer .keras files made by real Keras 3, for check_keras_rnn.c.

Run by hand, never by CI or the build (it needs Keras, JAX and h5py):

    KERAS_BACKEND=jax /tmp/kvenv/bin/python tests/golden/keras-models/generate_rnn.py

Writes beside this script, each model under float32, mixed_float16 and
mixed_bfloat16 (Keras's global policy when the model is built):

  rnn-<policy>.keras     Functional, one input [N, 7, 5], three outputs:
                         LSTM (return_sequences) -> GRU (reset_after, go_backwards,
                         return_sequences) -> SimpleRNN (no bias); Bidirectional
                         LSTM (concat, sequences) -> Bidirectional GRU (reset_after
                         false, sum); Bidirectional SimpleRNN (mul, sequences) ->
                         Bidirectional GRU (ave) -> Dense
  rnn_state-<policy>.keras  Functional, inputs x [N, 6, 4], h0 [N, 8], c0 [N, 8]:
                         LSTM with return_state and initial_state=[h0, c0]; GRU
                         (go_backwards, return_sequences, return_state) from h0;
                         Bidirectional LSTM (merge_mode None, return_state): eleven
                         outputs, several of each call
  rnn_bad_*.keras        rnn_state-float32.keras's config edited (`generate_rnn.py bad`;
                         the commands and errors are in ../keras-errors)
  <file>.in<i>.npy, <file>.out<i>.npy  inputs (batch 8, seeded) and model.predict
  manifest-rnn.txt       file, policy, inputs, outputs, lowest precision

`generate_rnn.py mask` writes padded batches through Keras's masks
(Masking, Embedding mask_zero), under float32 and mixed_bfloat16:

  rnnmask_lstm-<policy>.keras  Masking -> LSTM (sequences) -> Dense -> LSTM
                         (go_backwards, return_state); Masking -> LSTM
                         (zero_output_for_mask, sequences)
  rnnmask_gru-<policy>.keras   Embedding(mask_zero) -> GRU (sequences) -> GRU
                         (reset_after false)
  rnnmask_bi-<policy>.keras    Masking -> Bidirectional LSTM (sequences) ->
                         SimpleRNN; Masking -> Bidirectional GRU (sum)
  rnnmask_seq-<policy>.keras   Sequential: Masking -> LSTM (sequences) ->
                         Dense -> GRU (the mask carried from layer to layer)
  rnnmask_embseq-float32.keras  Sequential: Embedding(mask_zero) -> GRU
                         (sequences) -> SimpleRNN
  rnnmask_nokwarg.keras  rnnmask_lstm-float32.keras without the calls' mask
                         arguments: Keras 3 carries the mask at run time all
                         the same (outputs: its reload's predict)
  manifest-rnnmask.txt   as manifest-rnn.txt
  rnnmask_bad_*.keras    rnnmask_lstm-float32.keras edited (../keras-errors)

and `generate_rnn.py masktrain` the training steps of TRAIN_MASK on a
padded batch (rnnmasktrain.x.npy, rnnmasktrain.y.npy), as `train` below
(rnnmasktrain-<case>.*, manifest-rnnmasktrain.txt).

`generate_rnn.py train` writes three training steps of Keras's fit
(train_on_batch, batches of 8 of rnntrain.x.npy / rnntrain.y.npy) for each
case of TRAIN below, for check_keras_rnn's trajectory test:

  rnntrain-<case>.keras          the model before training, compiled
                                 (sparse categorical cross-entropy)
  rnntrain-<case>.step<k>.w<i>.npy  trainable weight i (Keras's order) after
                                 step k (1..3)
  rnntrain-<case>.loss.txt       each step's loss as train_on_batch gives it
  manifest-rnntrain.txt          case, policy, number of trainable weights
"""

import datetime
import json
import os
import shutil
import sys
import zipfile

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = ["float32", "mixed_float16", "mixed_bfloat16"]
LOWEST = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


def scaled(rng, w):
    """Weights that keep the gates off saturation (a kernel's range shrinks with its fan-in)."""
    s = 0.5 if w.ndim < 2 else 1.5 / np.sqrt(w.shape[0])
    return rng.uniform(-s, s, w.shape).astype(w.dtype)


def rnn():
    x = keras.Input((7, 5), name="x")
    a = layers.LSTM(12, return_sequences=True, name="lstm")(x)
    a = layers.GRU(8, go_backwards=True, return_sequences=True, name="gru")(a)
    a = layers.SimpleRNN(6, use_bias=False, name="srnn")(a)
    b = layers.Bidirectional(layers.LSTM(8, return_sequences=True), name="bi_lstm")(x)
    b = layers.Bidirectional(layers.GRU(4, reset_after=False), merge_mode="sum", name="bi_gru")(b)
    c = layers.Bidirectional(layers.SimpleRNN(4, return_sequences=True), merge_mode="mul", name="bi_srnn")(x)
    c = layers.Bidirectional(layers.GRU(3), merge_mode="ave", name="bi_gru2")(c)
    c = layers.Dense(2, name="dense")(c)
    return keras.Model(x, [a, b, c], name="rnn")


def rnn_state():
    x = keras.Input((6, 4), name="x")
    h0 = keras.Input((8,), name="h0")
    c0 = keras.Input((8,), name="c0")
    y, h, c = layers.LSTM(8, return_state=True, name="lstm")(x, initial_state=[h0, c0])
    s, g = layers.GRU(8, go_backwards=True, return_sequences=True, return_state=True, name="gru")(x, initial_state=[h0])
    outs = layers.Bidirectional(layers.LSTM(4, return_state=True), merge_mode=None, name="bi")(x)
    return keras.Model([x, h0, c0], [y, h, c, s, g] + list(outs), name="rnn_state")


def save_case(rng, model, base, manifest, lowest):
    model.set_weights([scaled(rng, w) for w in model.get_weights()])
    model.save(os.path.join(HERE, base + ".keras"))
    xs = [rng.standard_normal((8,) + tuple(t.shape[1:])).astype(np.float32) for t in model.inputs]
    ys = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
    ys = ys if isinstance(ys, (list, tuple)) else [ys]
    for i, x in enumerate(xs):
        np.save(os.path.join(HERE, f"{base}.in{i}.npy"), x)
    for i, y in enumerate(ys):
        np.save(os.path.join(HERE, f"{base}.out{i}.npy"), np.asarray(y, dtype=np.float32))
    manifest.append(f"{base} {model.dtype_policy.name} {len(xs)} {len(ys)} {lowest}")


def edit_config(src, dst, edit):
    """dst: src with its config.json passed through edit(cfg)."""
    with zipfile.ZipFile(os.path.join(HERE, src)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    cfg = json.loads(members["config.json"])
    edit(cfg)
    members["config.json"] = json.dumps(cfg).encode()
    with zipfile.ZipFile(os.path.join(HERE, dst), "w", zipfile.ZIP_STORED) as z:
        for n, data in members.items():
            z.writestr(n, data)


def layer(cfg, name):
    return next(lay for lay in cfg["config"]["layers"] if lay["name"] == name)


def bad():
    def relu(cfg):
        layer(cfg, "lstm")["config"]["activation"] = "relu"

    def dropout(cfg):
        layer(cfg, "gru")["config"]["recurrent_dropout"] = 0.25

    def state_shape(cfg):  # h0 [N, 7]: the LSTM's initial_state[0] does not fit its 8 units
        layer(cfg, "h0")["config"]["batch_shape"] = [None, 7]

    def state_count(cfg):  # the GRU given h0 and c0: one state too many
        kw = layer(cfg, "gru")["inbound_nodes"][0]["kwargs"]
        kw["initial_state"].append(dict(kw["initial_state"][0]))

    def no_output(cfg):  # output 3 of the GRU call, which returns 2
        cfg["config"]["output_layers"][4] = ["gru", 0, 3]

    for name, fn in [("relu", relu), ("dropout", dropout), ("state_shape", state_shape),
                     ("state_count", state_count), ("no_output", no_output)]:
        edit_config("rnn_state-float32.keras", f"rnn_bad_{name}.keras", fn)


TRAIN = [  # case, policy, optimizer, model
    ("lstm_sgd", "float32", "sgd", "lstm"),
    ("gru_adam", "float32", "adam", "gru"),
    ("bi_adam", "float32", "adam", "bi"),
    ("lstm_adam", "mixed_float16", "adam", "lstm"),
    ("gru_before_sgd", "mixed_bfloat16", "sgd", "gru_before"),
]


def train_model(kind):
    x = keras.Input((6, 4), name="x")
    if kind == "lstm":
        h = layers.LSTM(8, name="lstm")(x)
    elif kind == "gru":
        h = layers.GRU(8, name="gru")(x)
    elif kind == "gru_before":
        h = layers.GRU(8, reset_after=False, name="gru")(x)
    else:  # Bidirectional GRU sequences (reverse=1) into a SimpleRNN going backwards (reverse=2)
        h = layers.Bidirectional(layers.GRU(6, return_sequences=True), name="bi")(x)
        h = layers.SimpleRNN(5, go_backwards=True, name="srnn")(h)
    y = layers.Dense(3, activation="softmax", name="dense", dtype="float32")(h)
    return keras.Model(x, y, name=f"rnntrain_{kind}")


def train_main():
    rng = np.random.default_rng(3940)
    xs = rng.standard_normal((24, 6, 4)).astype(np.float32)
    ys = rng.integers(0, 3, (24,)).astype(np.int32)
    np.save(os.path.join(HERE, "rnntrain.x.npy"), xs)
    np.save(os.path.join(HERE, "rnntrain.y.npy"), ys)
    manifest = []
    for case, policy, opt, kind in TRAIN:
        keras.mixed_precision.set_global_policy(policy)
        model = train_model(kind)
        model.set_weights([scaled(rng, w) for w in model.get_weights()])
        optimizer = keras.optimizers.SGD(0.1) if opt == "sgd" else keras.optimizers.Adam(0.01)
        model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
        base = f"rnntrain-{case}"
        model.save(os.path.join(HERE, base + ".keras"))
        losses = []
        for k in range(3):
            losses.append(float(model.train_on_batch(xs[8 * k:8 * k + 8], ys[8 * k:8 * k + 8])))
            for i, w in enumerate(model.trainable_weights):
                np.save(os.path.join(HERE, f"{base}.step{k + 1}.w{i}.npy"), np.asarray(w.value, dtype=np.float32))
        with open(os.path.join(HERE, base + ".loss.txt"), "w") as f:
            f.write("\n".join(repr(v) for v in losses) + "\n")
        manifest.append(f"{case} {policy} {len(model.trainable_weights)}")
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-rnntrain.txt"), "w") as f:
        f.write(f"# generated by generate_rnn.py train with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# case policy n_trainable\n")
        f.write("\n".join(manifest) + "\n")


def mask_lstm():
    x = keras.Input((7, 5), name="x")
    m = layers.Masking(0.0, name="masking")(x)
    a = layers.LSTM(6, return_sequences=True, name="lstm")(m)
    a = layers.Dense(4, name="dense")(a)
    a, h, c = layers.LSTM(5, go_backwards=True, return_state=True, name="lstm_back")(a)
    z = layers.LSTM(3, return_sequences=True, zero_output_for_mask=True, name="lstm_zero")(m)
    return keras.Model(x, [a, h, c, z], name="rnnmask_lstm")


def mask_gru():
    ids = keras.Input((7,), dtype="int32", name="ids")
    e = layers.Embedding(12, 6, mask_zero=True, name="emb")(ids)
    g = layers.GRU(8, return_sequences=True, name="gru")(e)
    g2 = layers.GRU(4, reset_after=False, name="gru2")(g)
    return keras.Model(ids, [g, g2], name="rnnmask_gru")


def mask_bi():
    x = keras.Input((7, 5), name="x")
    m = layers.Masking(0.0, name="masking")(x)
    b = layers.Bidirectional(layers.LSTM(5, return_sequences=True), name="bi")(m)
    s = layers.SimpleRNN(4, name="srnn")(b)
    b2 = layers.Bidirectional(layers.GRU(3), merge_mode="sum", name="bi_gru")(m)
    return keras.Model(x, [b, s, b2], name="rnnmask_bi")


def mask_seq():
    return keras.Sequential([keras.Input((7, 5)), layers.Masking(0.0), layers.LSTM(6, return_sequences=True),
                             layers.Dense(4), layers.GRU(3)], name="rnnmask_seq")


LENGTHS = [7, 5, 3, 1, 7, 6, 2, 4]  # per row of the batch; row 4 has a zero step inside, row 5 starts with one


def padded(rng, shape):
    x = rng.standard_normal((8,) + shape).astype(np.float32)
    for i, n in enumerate(LENGTHS):
        x[i, n:] = 0
    x[4, 3] = 0
    x[5, 0] = 0
    return x


def padded_ids(rng, t, vocab):
    ids = rng.integers(1, vocab, (8, t)).astype(np.int32)
    for i, n in enumerate(LENGTHS):
        ids[i, n:] = 0
    ids[4, 3] = 0
    ids[5, 0] = 0
    return ids


def save_mask_case(rng, model, base, manifest, lowest):
    model.set_weights([scaled(rng, w) for w in model.get_weights()])
    model.save(os.path.join(HERE, base + ".keras"))
    t = model.inputs[0]
    x = padded_ids(rng, t.shape[1], 12) if t.dtype == "int32" else padded(rng, tuple(t.shape[1:]))
    ys = model.predict(x, verbose=0)
    ys = ys if isinstance(ys, (list, tuple)) else [ys]
    np.save(os.path.join(HERE, f"{base}.in0.npy"), x)
    for i, y in enumerate(ys):
        np.save(os.path.join(HERE, f"{base}.out{i}.npy"), np.asarray(y, dtype=np.float32))
    manifest.append(f"{base} {model.dtype_policy.name} 1 {len(ys)} {lowest}")


def mask_bad():
    def any_axis(cfg):  # the LSTM's mask any over axis 1: [N, 5], not [N, 7]
        layer(cfg, "any")["config"]["axis"] = 1
        layer(cfg, "any")["config"]["name"] = "any"

    def masking_rank(cfg):  # the input [N, 7]: Masking over a rank-2 tensor (no steps to mask)
        layer(cfg, "x")["config"]["batch_shape"] = [None, 7]

    for name, fn in [("any_axis", any_axis), ("masking_rank", masking_rank)]:
        edit_config("rnnmask_lstm-float32.keras", f"rnnmask_bad_{name}.keras", fn)
    # a mask into a layer that uses it (GlobalAveragePooling1D averages the unmasked steps): refused
    x = keras.Input((7, 5))
    y = layers.GlobalAveragePooling1D()(layers.LSTM(3, return_sequences=True)(layers.Masking(0.0)(x)))
    keras.Model(x, y).save(os.path.join(HERE, "rnnmask_bad_pooling.keras"))
    # Sequential: a Masking into Flatten, which drops the mask (Keras warns too)
    keras.Sequential([keras.Input((7, 5)), layers.Masking(0.0), layers.Flatten(), layers.Dense(2)]).save(
        os.path.join(HERE, "rnnmask_drop.keras"))


def mask_main():
    rng = np.random.default_rng(3941)
    manifest = []
    for policy in ["float32", "mixed_bfloat16"]:
        keras.mixed_precision.set_global_policy(policy)
        for name, fn in [("lstm", mask_lstm), ("gru", mask_gru), ("bi", mask_bi), ("seq", mask_seq)]:
            save_mask_case(rng, fn(), f"rnnmask_{name}-{policy}", manifest, LOWEST[policy])
    keras.mixed_precision.set_global_policy("float32")

    def no_mask_argument(cfg):  # Keras passes the mask at run time all the same
        for lay in cfg["config"]["layers"]:
            for node in lay.get("inbound_nodes", []):
                node.get("kwargs", {}).pop("mask", None)

    edit_config("rnnmask_lstm-float32.keras", "rnnmask_nokwarg.keras", no_mask_argument)
    model = keras.models.load_model(os.path.join(HERE, "rnnmask_nokwarg.keras"))
    x = np.load(os.path.join(HERE, "rnnmask_lstm-float32.in0.npy"))
    np.save(os.path.join(HERE, "rnnmask_nokwarg.in0.npy"), x)
    ys = model.predict(x, verbose=0)
    for i, y in enumerate(ys):
        np.save(os.path.join(HERE, f"rnnmask_nokwarg.out{i}.npy"), np.asarray(y, dtype=np.float32))
    manifest.append(f"rnnmask_nokwarg float32 1 {len(ys)} float32")
    mask_bad()
    # a Sequential Embedding(mask_zero) -> GRU (castor makes the mask ids != 0 itself; last, so the
    # files above keep Keras's layer names)
    emb_seq = keras.Sequential([keras.Input((7,), dtype="int32"), layers.Embedding(12, 6, mask_zero=True),
                                layers.GRU(5, return_sequences=True), layers.SimpleRNN(3)], name="rnnmask_embseq")
    save_mask_case(rng, emb_seq, "rnnmask_embseq-float32", manifest, "float32")
    with open(os.path.join(HERE, "manifest-rnnmask.txt"), "w") as f:
        f.write(f"# generated by generate_rnn.py mask with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")


TRAIN_MASK = [  # case, policy, optimizer, model
    ("lstm_sgd", "float32", "sgd", "mask_lstm"),
    ("bi_adam", "float32", "adam", "mask_bi"),
    ("gru_sgd", "mixed_bfloat16", "sgd", "mask_gru"),  # Adam's first step is about sign(g): bf16 flips near-zero ones
]


def mask_train_model(kind):
    x = keras.Input((6, 4), name="x")
    m = layers.Masking(0.0, name="masking")(x)
    if kind == "mask_lstm":
        h = layers.LSTM(8, name="lstm")(m)
    elif kind == "mask_gru":
        h = layers.GRU(8, return_sequences=True, name="gru")(m)
        h = layers.GRU(6, reset_after=False, go_backwards=True, name="gru2")(h)
    else:  # Bidirectional GRU sequences into a SimpleRNN going backwards
        h = layers.Bidirectional(layers.GRU(6, return_sequences=True), name="bi")(m)
        h = layers.SimpleRNN(5, go_backwards=True, name="srnn")(h)
    y = layers.Dense(3, activation="softmax", name="dense", dtype="float32")(h)
    return keras.Model(x, y, name=f"rnnmasktrain_{kind}")


def mask_train_main():
    rng = np.random.default_rng(3942)
    xs = np.concatenate([padded(rng, (6, 4)) for _ in range(3)])
    ys = rng.integers(0, 3, (24,)).astype(np.int32)
    np.save(os.path.join(HERE, "rnnmasktrain.x.npy"), xs)
    np.save(os.path.join(HERE, "rnnmasktrain.y.npy"), ys)
    manifest = []
    for case, policy, opt, kind in TRAIN_MASK:
        keras.mixed_precision.set_global_policy(policy)
        model = mask_train_model(kind)
        model.set_weights([scaled(rng, w) for w in model.get_weights()])
        optimizer = keras.optimizers.SGD(0.1) if opt == "sgd" else keras.optimizers.Adam(0.01)
        model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
        base = f"rnnmasktrain-{case}"
        model.save(os.path.join(HERE, base + ".keras"))
        losses = []
        for k in range(3):
            losses.append(float(model.train_on_batch(xs[8 * k:8 * k + 8], ys[8 * k:8 * k + 8])))
            for i, w in enumerate(model.trainable_weights):
                np.save(os.path.join(HERE, f"{base}.step{k + 1}.w{i}.npy"), np.asarray(w.value, dtype=np.float32))
        with open(os.path.join(HERE, base + ".loss.txt"), "w") as f:
            f.write("\n".join(repr(v) for v in losses) + "\n")
        manifest.append(f"{case} {policy} {len(model.trainable_weights)}")
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-rnnmasktrain.txt"), "w") as f:
        f.write(f"# generated by generate_rnn.py masktrain with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# case policy n_trainable\n")
        f.write("\n".join(manifest) + "\n")


def main():
    rng = np.random.default_rng(3939)
    manifest = []
    for policy in POLICIES:
        keras.mixed_precision.set_global_policy(policy)
        save_case(rng, rnn(), f"rnn-{policy}", manifest, LOWEST[policy])
        save_case(rng, rnn_state(), f"rnn_state-{policy}", manifest, LOWEST[policy])
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest-rnn.txt"), "w") as f:
        f.write(f"# generated by generate_rnn.py with keras {keras.__version__} on "
                f"{datetime.date.today()}\n# file policy n_inputs n_outputs lowest_precision\n")
        f.write("\n".join(manifest) + "\n")
    bad()


if __name__ == "__main__":
    if sys.argv[1:] == ["bad"]:
        bad()
    elif sys.argv[1:] == ["train"]:
        train_main()
    elif sys.argv[1:] == ["mask"]:
        mask_main()
    elif sys.argv[1:] == ["masktrain"]:
        mask_train_main()
    else:
        main()
