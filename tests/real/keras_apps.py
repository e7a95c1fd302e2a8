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
         ("EfficientNetB0", 32), ("EfficientNetV2B0", 32), ("ResNet50", 32), ("ResNet50V2", 32),
         ("DenseNet121", 32), ("ConvNeXtTiny", 32), ("NASNetMobile", 32), ("VGG16", 32), ("VGG19", 32),
         ("Xception", 71), ("InceptionV3", 75), ("InceptionResNetV2", 75), ("ResNet101", 32), ("ResNet152", 32),
         ("EfficientNetB1", 32), ("EfficientNetV2S", 32), ("DenseNet169", 32), ("ConvNeXtSmall", 32)]
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
    rng = np.random.default_rng(37)
    for batch in (1, 4):
        x = rng.uniform(0, 255, (batch, size, size, 3)).astype(np.float32)
        xp, yp = os.path.join(args.out, f"{name}.x{batch}.npy"), os.path.join(args.out, f"{name}.y{batch}.npy")
        np.save(xp, x)
        want = np.asarray(model.predict(x, verbose=0), dtype=np.float32)
        t0 = time.time()
        r = subprocess.run([args.castor, "run", path, "--input", xp, "--output", yp], capture_output=True, text=True)
        row[f"time{batch}"] = time.time() - t0
        if r.returncode != 0:
            row["error"] = (r.stderr.strip().splitlines() or ["?"])[0][:300]
            return row
        got = np.load(yp)
        row[f"err{batch}"] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    return row


def table(rows, policy):
    out = ["| architecture | input | policy | loads | error batch 1 | error batch 4 | castor run (s) |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['name']} | {r['size']} | {policy} | no: {r['error'].replace('|', '/')} | | | |")
        else:
            ok = "yes" if max(r["err1"], r["err4"]) <= BOUND[policy] else "yes, error above the bound"
            out.append(f"| {r['name']} | {r['size']} | {policy} | {ok} | {r['err1']:.1e} | {r['err4']:.1e} | "
                       f"{r['time1']:.0f} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--castor", required=True)
    ap.add_argument("--out", default="/tmp/keras_apps")
    ap.add_argument("--policy", default="float32", choices=sorted(BOUND))
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
