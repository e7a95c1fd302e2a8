#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""keras_train.py: `castor train` against Keras's `fit` on keras.applications
architectures (random init, small inputs), from the same .keras file and
data, without shuffling.

  KERAS_BACKEND=jax /tmp/kvenv/bin/python tests/real/keras_train.py \
      --castor build/castor --out /tmp/keras_train [--epochs 2] [NAME ...]

For each architecture (weights=None, seeded, 10 classes, logits): 64 random
images in [-1, 1) and random labels, SGD 0.01, sparse categorical
cross-entropy from logits, batch 32, no shuffling. Prints the per-epoch
losses of both and their relative difference, then has Keras load the file
`castor train --save` wrote and resume `fit` from it for one epoch.

--f64: also Keras's `fit` from the same weights under the float64 policy
(JAX_ENABLE_X64, in a child process), the referee of the two float32 runs:
prints each one's distance from it. --size S: the input size (default 32).

--grads: instead, one step over one batch of 32: castor's SGD step with
learning rate 1 gives each trainable variable's gradient (w0 - w1, from the
saved safetensors) and the BN moving statistics it updates; Keras's come
from jax.grad of model.stateless_call(training=True). Prints the
normalized max error per variable, worst first.

Not part of ctest: it needs Keras from PyPI and minutes per architecture.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

ARCHS = {"MobileNetV2": 32, "EfficientNetB0": 32, "MobileNet": 32, "ResNet50": 32}


def build(name, size):
    import keras
    keras.utils.set_random_seed(37)
    fn = getattr(keras.applications, name)
    try:
        model = fn(weights=None, input_shape=(size, size, 3), classes=10, classifier_activation=None)
    except TypeError:
        model = fn(weights=None, input_shape=(size, size, 3), classes=10)
    # Dropout in training draws its masks from each one's own generator
    # (EfficientNet's top dropout and stochastic depth): castor's and Keras's
    # draws differ, so the two runs compare with rate 0 (the file says so)
    if not any(isinstance(l, keras.layers.Dropout) and l.rate > 0 for l in model.layers):
        return model
    cfg = model.get_config()
    for l in cfg["layers"]:
        if l["class_name"] in ("Dropout", "SpatialDropout2D") and "rate" in l["config"]:
            l["config"]["rate"] = 0.0
    wts = model.get_weights()
    model = keras.Model.from_config(cfg)
    model.set_weights(wts)
    return model


def data(size, n):
    rng = np.random.default_rng(37)
    x = rng.uniform(-1, 1, (n, size, size, 3)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int32)
    return x, y


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        body = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(body[a:b], np.float32).reshape(v["shape"])
    return out


def castor_key(var):
    """Keras variable path 'layer/kernel' -> castor's weight key 'layer.kernel'."""
    layer, name = var.path.rsplit("/", 1)
    return layer.replace("/", "__") + "." + name


def compile_keras(model, lr):
    import keras
    model.compile(optimizer=keras.optimizers.SGD(lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def castor_train(args, path, xp, yp, epochs, batch, lr, save, hist):
    cmd = [args.castor, "train", path, "--x", xp, "--y", yp, "--epochs", str(epochs), "--batch-size", str(batch),
           "--optimizer", "sgd", "--learning-rate", str(lr), "--loss", "sparse_categorical_crossentropy",
           "--from-logits", "--no-shuffle", "--save", save, "--history", hist]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if r.returncode != 0:
        raise RuntimeError("castor train: " + r.stderr.strip()[:400])
    import csv
    with open(hist) as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


def grads(args, name, size):
    import jax
    import keras
    model = build(name, size)
    path = os.path.join(args.out, f"{name}.keras")
    model.save(path)
    x, y = data(size, 32)
    xp, yp = os.path.join(args.out, f"{name}.gx.npy"), os.path.join(args.out, f"{name}.gy.npy")
    np.save(xp, x)
    np.save(yp, y)
    lr = 1.0
    save = os.path.join(args.out, f"{name}.grad.safetensors")
    closs = castor_train(args, path, xp, yp, 1, 32, lr, save, os.path.join(args.out, f"{name}.grad.csv"))
    w1 = read_safetensors(save)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    tv = [v.value for v in model.trainable_variables]
    ntv = [v.value for v in model.non_trainable_variables]

    def f(tv):
        out, new_ntv = model.stateless_call(tv, ntv, x, training=True)
        return loss_fn(y, out), new_ntv

    (loss, new_ntv), g = jax.value_and_grad(f, has_aux=True)(tv)
    print(f"{name}: loss of the batch: castor {closs[0]:.6f}, Keras {float(loss):.6f}")
    rows = []
    for v, gv in zip(model.trainable_variables, g):
        k = castor_key(v)
        if k not in w1:
            rows.append((float("inf"), k, "missing in castor's file"))
            continue
        got = (np.asarray(v.value) - w1[k]) / lr
        want = np.asarray(gv)
        rows.append((float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)), k,
                     f"max|g| {np.abs(want).max():.3e}"))
    for v, nv in zip(model.non_trainable_variables, new_ntv):
        k = castor_key(v)
        if k not in w1:
            continue
        want = np.asarray(nv)
        rows.append((float(np.abs(w1[k] - want).max() / max(np.abs(want).max(), 1e-30)), k + " (updated)",
                     f"max {np.abs(want).max():.3e}"))
    if args.order:  # the model's order: where the differences start, from the output back
        for err, k, note in rows:
            print(f"    {err:.2e}  {k}  {note}")
    rows.sort(reverse=True)
    # a variable whose gradient is rounding noise (a beta before a training-mode
    # batch norm, whose mean subtraction cancels it) is not a finding: the
    # kernels' and gammas' are listed apart
    for title, keep in (("all variables", lambda k: True),
                        ("kernels and gammas", lambda k: k.endswith(("kernel", "gamma")))):
        print(f"  worst {args.top}, {title}:")
        for err, k, note in [r for r in rows if keep(r[1])][:args.top]:
            print(f"    {err:.2e}  {k}  {note}")
    return rows


def fit64(name, size, epochs):
    """Keras's fit from the float32 model's weights under the float64 policy
    (the caller sets JAX_ENABLE_X64): the per-epoch losses, as JSON."""
    import keras
    wts = build(name, size).get_weights()
    keras.config.set_dtype_policy("float64")
    model = build(name, size)
    model.set_weights([w.astype(np.float64) for w in wts])
    x, y = data(size, 64)
    compile_keras(model, 0.01)
    h = model.fit(x.astype(np.float64), y, batch_size=32, epochs=epochs, shuffle=False, verbose=0)
    print(json.dumps(h.history["loss"]))


def fit(args, name, size):
    import keras
    model = build(name, size)
    path = os.path.join(args.out, f"{name}.keras")
    # compiled before it is saved: the file's compile_config (SGD 0.01, the
    # loss) is what castor writes back and what Keras's load_model compiles
    # the resumed model with, the optimizer's variables from castor's file
    compile_keras(model, 0.01)
    model.save(path)
    x, y = data(size, 64)
    xp, yp = os.path.join(args.out, f"{name}.x.npy"), os.path.join(args.out, f"{name}.y.npy")
    np.save(xp, x)
    np.save(yp, y)
    save = os.path.join(args.out, f"{name}.trained.keras")
    ours = castor_train(args, path, xp, yp, args.epochs, 32, 0.01, save, os.path.join(args.out, f"{name}.csv"))
    h = model.fit(x, y, batch_size=32, epochs=args.epochs, shuffle=False, verbose=0)
    theirs = h.history["loss"]
    # Keras's own next epoch, and the same from castor's file: Keras loads it,
    # with the optimizer's state castor wrote (its iterations: the steps taken)
    nxt = model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0).history["loss"][0]
    resumed = keras.saving.load_model(save)
    steps = int(resumed.optimizer.iterations)
    r = resumed.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0).history["loss"][0]
    print(f"  {name}: Keras resumes castor's file at step {steps}: next epoch's loss {r:.4f} (Keras's own {nxt:.4f})",
          flush=True)
    row = {"name": name, "size": size, "castor": ours, "keras": theirs, "resumed": r, "steps": steps}
    if args.f64:
        env = dict(os.environ, JAX_ENABLE_X64="1")
        cmd = [sys.executable, os.path.abspath(__file__), "--castor", args.castor, "--fit64", "--size", str(size),
               "--epochs", str(args.epochs), name]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout, check=True).stdout
        row["f64"] = json.loads(out.strip().splitlines()[-1])
        for who in ("castor", "keras"):
            print(f"  {name}: {who} float32 against Keras float64: " +
                  ", ".join(f"{abs(c - k) / abs(k) * 100:.2f}%" for c, k in zip(row[who], row["f64"])))
    return row


def table(rows, epochs):
    head = "| architecture | input |" + "".join(f" epoch {e + 1} castor / Keras (difference) |" for e in range(epochs))
    out = [head + " Keras resumes castor's file (its next epoch's loss) |",
           "|---|---|" + "---|" * epochs + "---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['name']} | {r['size']} | {r['error']} |")
            continue
        cells = "".join(f" {c:.4f} / {k:.4f} ({abs(c - k) / abs(k) * 100:.2f}%) |"
                        for c, k in zip(r["castor"], r["keras"]))
        ref = ""
        if "f64" in r:  # the float64 referee: castor's and Keras's float32 distances from it
            ref = " float64 " + " / ".join(f"{k:.4f}" for k in r["f64"]) + ": castor " + ", ".join(
                f"{abs(c - k) / abs(k) * 100:.2f}%" for c, k in zip(r["castor"], r["f64"])) + "; Keras " + ", ".join(
                f"{abs(c - k) / abs(k) * 100:.2f}%" for c, k in zip(r["keras"], r["f64"])) + " |"
        out.append(f"| {r['name']} | {r['size']} |{cells} yes, at step {r['steps']} ({r['resumed']:.4f}) |{ref}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--castor", required=True)
    ap.add_argument("--out", default="/tmp/keras_train")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--grads", action="store_true")
    ap.add_argument("--top", type=int, default=15, help="--grads: variables printed")
    ap.add_argument("--order", action="store_true", help="--grads: also every variable in the model's order")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--f64", action="store_true", help="also Keras's fit under float64, the referee")
    ap.add_argument("--fit64", action="store_true", help=argparse.SUPPRESS)  # the --f64 child
    ap.add_argument("--size", type=int, default=0, help="input size (default: 32)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = args.names or ["MobileNetV2", "EfficientNetB0"]
    rows = []
    for name in names:
        size = args.size or ARCHS.get(name, 32)
        if args.fit64:
            fit64(name, size, args.epochs)
            continue
        if args.grads:
            grads(args, name, size)
            continue
        try:
            rows.append(fit(args, name, size))
        except Exception as e:
            rows.append({"name": name, "size": size, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        print(table(rows[-1:], args.epochs).splitlines()[-1], flush=True)
    if rows:
        print(table(rows, args.epochs))


if __name__ == "__main__":
    sys.exit(main())
