#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""keras_apps.py: every keras.applications architecture castor should read,
rebuilt from PyPI's Keras 3 at a small input (weights=None: seeded random
init; 10 classes, their logits where the architecture takes
classifier_activation=None), saved as .keras, run by Keras's predict and by `castor run` at batch
1 and 4, and compared (normalized max error: max|castor - keras| / max|keras|).
Writes a Markdown table (architecture, input, policy, loads, error at batch
1 and 4, castor run's wall time: load + compile + run) to stdout and, with
--doc, into docs/keras.md between the markers.

  KERAS_BACKEND=jax /tmp/kvenv/bin/python tests/real/keras_apps.py \
      --castor build/castor --out /tmp/apps [--policy float32|mixed_bfloat16] [NAME ...]

Not part of ctest: it needs Keras from PyPI and minutes per architecture.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

# (name, smallest input castor and Keras both take with weights=None)
ARCHS = [("MobileNet", 32), ("MobileNetV2", 32), ("MobileNetV3Small", 32), ("MobileNetV3Large", 32),
         ("EfficientNetB0", 32), ("EfficientNetB1", 32), ("EfficientNetB2", 32), ("EfficientNetB3", 32),
         ("EfficientNetB4", 32), ("EfficientNetB5", 32), ("EfficientNetB6", 32), ("EfficientNetB7", 32),
         ("EfficientNetV2B0", 32), ("EfficientNetV2B1", 32), ("EfficientNetV2B2", 32), ("EfficientNetV2B3", 32),
         ("EfficientNetV2S", 32), ("EfficientNetV2M", 32), ("EfficientNetV2L", 32),
         ("ResNet50", 32), ("ResNet101", 32), ("ResNet152", 32),
         ("ResNet50V2", 32), ("ResNet101V2", 32), ("ResNet152V2", 32),
         ("DenseNet121", 32), ("DenseNet169", 32), ("DenseNet201", 32),
         ("Xception", 71), ("InceptionV3", 75), ("InceptionResNetV2", 75),
         ("NASNetMobile", 32), ("NASNetLarge", 32),
         ("ConvNeXtTiny", 32), ("ConvNeXtSmall", 32), ("ConvNeXtBase", 32), ("ConvNeXtLarge", 32),
         ("ConvNeXtXLarge", 32), ("VGG16", 32), ("VGG19", 32)]
BOUND = {"float32": 1e-5, "mixed_bfloat16": 2e-2}


def run(args, name, size):
    import keras
    keras.mixed_precision.set_global_policy(args.policy)
    keras.utils.set_random_seed(37)
    path = os.path.join(args.out, f"{name}-{args.policy}.keras")
    build = getattr(keras.applications, name)
    try:  # the logits: a softmax of random-init logits is often one-hot, which would hide errors
        model = build(weights=None, input_shape=(size, size, 3), classes=10, classifier_activation=None)
    except TypeError:
        model = build(weights=None, input_shape=(size, size, 3), classes=10)
    model.save(path)
    row = {"name": name, "size": size}
    ref = None
    if args.policy != "float32":  # the same weights under float32: how far each 16-bit result is from it
        keras.mixed_precision.set_global_policy("float32")
        try:
            ref = build(weights=None, input_shape=(size, size, 3), classes=10, classifier_activation=None)
        except TypeError:
            ref = build(weights=None, input_shape=(size, size, 3), classes=10)
        ref.set_weights(model.get_weights())
        keras.mixed_precision.set_global_policy(args.policy)
    rng = np.random.default_rng(37)
    for batch in (1, 4):
        x = rng.uniform(0, 255, (batch, size, size, 3)).astype(np.float32)
        xp, yp = os.path.join(args.out, f"{name}.x{batch}.npy"), os.path.join(args.out, f"{name}.y{batch}.npy")
        np.save(xp, x)
        want = np.asarray(model.predict(x, verbose=0), dtype=np.float32)
        t0 = time.time()
        try:
            r = subprocess.run([args.castor, "run", path, "--input", xp, "--output", yp], capture_output=True,
                               text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            row["error"] = f"castor run took more than {args.timeout} s (not a refusal: the run was stopped)"
            return row
        row[f"time{batch}"] = time.time() - t0
        if r.returncode != 0:
            row["error"] = (r.stderr.strip().splitlines() or ["?"])[0][:300]
            return row
        got = np.load(yp)
        row[f"err{batch}"] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        if ref is not None:
            exact = np.asarray(ref.predict(x, verbose=0), dtype=np.float32)
            scale = max(np.abs(exact).max(), 1e-30)
            row[f"castor_f32_{batch}"] = float(np.abs(got - exact).max() / scale)
            row[f"keras_f32_{batch}"] = float(np.abs(want - exact).max() / scale)
    return row


def table(rows, policy):
    """float32: error against Keras's predict. A 16-bit policy adds, per batch, how far castor's and
    Keras's own 16-bit results are from Keras's float32 predict with the same weights (castor / Keras)."""
    mixed = policy != "float32"
    head = "| architecture | input | policy | loads | error batch 1 | error batch 4 |"
    head += " from float32, castor / Keras, batch 1 | batch 4 |" if mixed else ""
    out = [head + " castor run (s) |", "|---|---|---|---|---|---|" + ("---|---|" if mixed else "") + "---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['name']} | {r['size']} | {policy} | no: {r['error'].replace('|', '/')} | | |"
                       + (" | |" if mixed else "") + " |")
            continue
        ok = "yes" if max(r["err1"], r["err4"]) <= BOUND[policy] else "yes, error above the bound"
        if mixed and ok != "yes" and all(r[f"castor_f32_{b}"] <= r[f"keras_f32_{b}"] for b in (1, 4)):
            ok = "yes, above the bound; castor nearer float32 than Keras"
        line = f"| {r['name']} | {r['size']} | {policy} | {ok} | {r['err1']:.1e} | {r['err4']:.1e} |"
        if mixed:
            line += "".join(f" {r[f'castor_f32_{b}']:.1e} / {r[f'keras_f32_{b}']:.1e} |" for b in (1, 4))
        out.append(line + f" {r['time1']:.0f} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--castor", required=True)
    ap.add_argument("--out", default="/tmp/keras_apps")
    ap.add_argument("--policy", default="float32", choices=sorted(BOUND))
    ap.add_argument("--timeout", type=float, default=900, help="seconds one castor run may take")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name, size in ARCHS:
        if args.names and name not in args.names:
            continue
        try:
            rows.append(run(args, name, size))
        except Exception as e:  # Keras itself refusing the input size, ...
            rows.append({"name": name, "size": size, "error": f"Keras: {type(e).__name__}: {str(e)[:200]}"})
        print(table(rows[-1:], args.policy).splitlines()[-1], flush=True)
    print(table(rows, args.policy))


if __name__ == "__main__":
    sys.exit(main())
