#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""keras_apps.py: every keras.applications architecture castor should read,
rebuilt from PyPI's Keras 3 at a small input (weights=None: seeded random
init; 10 classes, their logits where the architecture takes
classifier_activation=None), saved as .keras, run by Keras's predict and by `castor run` at batch
1 and 4, and compared (normalized max error: max|castor - keras| / max|keras|).
Writes a Markdown table (architecture, input, policy, loads, error at batch
1 and 4, castor run's wall time: load + compile + run) to stdout.

  /tmp/kvenv/bin/python tests/real/keras_apps.py --castor build/castor --out /tmp/apps \
      [--policy float32|mixed_bfloat16] [--seed S] [--f64] [NAME ...]
  /tmp/tvenv/bin/python tests/real/keras_apps.py --castor build/castor --out /tmp/apps \
      --backend torch --load [--policy ...] [NAME ...]
  /tmp/kvenv/bin/python tests/real/keras_apps.py --out /tmp/apps --summary [--policy ...] [NAME ...]

--backend sets KERAS_BACKEND (jax by default). Keras's random init differs
between backends, so --load reads the .keras files an earlier run wrote into
--out instead of rebuilding them: both backends then predict from the same
weights and inputs. Each run keeps Keras's predictions in --out
(NAME-POLICY-sSEED-BACKEND.y{1,4}.npy); where the other backend's are there,
the table adds how far the two Keras references are from each other.
--f64 (JAX only) also predicts with the same weights under Keras's float64
policy (JAX_ENABLE_X64=1) and gives how far castor's and Keras's results
are from it: the referee where float32 itself is ill-conditioned. It keeps
the float64 predictions in --out (NAME-POLICY-sSEED-f64.y{1,4}.npy); a later
run without --f64 (the torch backend's, --castor-only) takes them from there,
and adds, where the other backend's predictions are there too, that Keras's
distance from float64; the last column then says whether castor is no
farther from float64 than the farther of the Keras results.

--summary reads only the predictions earlier runs left in --out (castor's,
Keras-JAX's, Keras-torch's, float64's) and prints, per architecture and
batch, castor's and Keras-torch's error against Keras-JAX and the three
distances from float64 (no Keras, no castor: seconds).

--castor-only runs castor alone on the .keras files, inputs and Keras
predictions (NAME-POLICY-BACKEND.y{1,4}.npy) an earlier run left in --out:
the error columns in seconds per architecture, without the float32 ones.

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


OTHER = {"jax": "torch", "torch": "jax"}


def build_as(keras, build, size, policy, weights_from):
    """The architecture under POLICY with WEIGHTS_FROM's weights; the global policy is restored."""
    keep = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(policy)
    try:
        m = build(weights=None, input_shape=(size, size, 3), classes=10, classifier_activation=None)
    except TypeError:
        m = build(weights=None, input_shape=(size, size, 3), classes=10)
    m.set_weights(weights_from.get_weights())
    keras.mixed_precision.set_global_policy(keep)
    return m


def run_castor_only(args, name, size):
    """--castor-only: castor run on the .keras file, inputs and Keras predictions an earlier run left
    in --out (Keras is not run: no float32 columns)."""
    stem = f"{name}-{args.policy}" + (f"-s{args.seed}" if args.seed != 37 else "")
    path = os.path.join(args.out, f"{stem}.keras")
    row = {"name": name, "size": size}
    for batch in (1, 4):
        xp, yp = os.path.join(args.out, f"{stem}.x{batch}.npy"), os.path.join(args.out, f"{stem}.y{batch}.npy")
        wp = os.path.join(args.out, f"{stem}-{args.backend}.y{batch}.npy")
        if not all(os.path.exists(f) for f in (path, xp, wp)):
            row["error"] = f"--castor-only: no {stem} files of an earlier run in {args.out}"
            return row
        want = np.load(wp)
        got = castor_run(args, path, xp, yp, want, row, batch)
        if got is None:
            return row
        f64p = os.path.join(args.out, f"{stem}-f64.y{batch}.npy")
        if os.path.exists(f64p):
            f64_columns(row, batch, np.load(f64p), got, want,
                        os.path.join(args.out, f"{stem}-{OTHER[args.backend]}.y{batch}.npy"))
    return row


def summary(args, names):
    """--summary: from the predictions earlier runs left in --out (castor's NAME-POLICY.y{1,4}.npy, Keras
    on JAX's and on torch's, the float64 referee of a --f64 run), without running Keras or castor: per
    architecture and batch, castor's and Keras-torch's error against Keras-JAX, and castor's, Keras-JAX's
    and Keras-torch's distance from float64 (normalized by the reference's max |value|); "-" where a
    file is missing. The last column: castor no farther from float64 than the farther of the two Keras
    (both batches)."""
    def err(a, b):
        return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-300))
    head = ("| architecture | batch | castor vs Keras-JAX | Keras-torch vs Keras-JAX | from float64: castor |"
            " Keras-JAX | Keras-torch | max abs logit (float64) | castor no farther from float64 than the farther Keras (castor's distance / it) |")
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for name, size in ARCHS:
        if names and name not in names:
            continue
        stem = os.path.join(args.out, f"{name}-{args.policy}" + (f"-s{args.seed}" if args.seed != 37 else ""))
        for batch in (1, 4):
            def load(tag):
                f = f"{stem}{tag}.y{batch}.npy"
                return np.load(f) if os.path.exists(f) else None
            c, j, t, f = load(""), load("-jax"), load("-torch"), load("-f64")
            cell = lambda a, b: f"{err(a, b):.1e}" if a is not None and b is not None else "-"
            crit = "-"
            if c is not None and f is not None and (j is not None or t is not None):
                keras = max(err(k, f) for k in (j, t) if k is not None)
                crit = ("yes" if err(c, f) <= keras else "no") + f" ({err(c, f) / max(keras, 1e-300):.2f}x)"
            logit = f"{np.abs(f).max():.1e}" if f is not None else "-"
            out.append(f"| {name} | {batch} | {cell(c, j)} | {cell(t, j)} | {cell(c, f)} | {cell(j, f)} | "
                       f"{cell(t, f)} | {logit} | {crit} |")
    return "\n".join(out)


def castor_run(args, path, xp, yp, want, row, batch):
    """`castor run PATH` on XP into YP: its time and error against WANT go into ROW; its output,
    or None when it failed (ROW's "error" says why)."""
    t0 = time.time()
    try:
        r = subprocess.run([args.castor, "run", path, "--input", xp, "--output", yp], capture_output=True,
                           text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        row["error"] = f"castor run took more than {args.timeout} s (not a refusal: the run was stopped)"
        return None
    row[f"time{batch}"] = time.time() - t0
    if r.returncode != 0:
        row["error"] = (r.stderr.strip().splitlines() or ["?"])[0][:300]
        return None
    got = np.load(yp)
    row[f"err{batch}"] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    return got


def run(args, name, size):
    if args.castor_only:
        return run_castor_only(args, name, size)
    import keras
    keras.mixed_precision.set_global_policy(args.policy)
    keras.utils.set_random_seed(args.seed)
    stem = f"{name}-{args.policy}" + (f"-s{args.seed}" if args.seed != 37 else "")
    path = os.path.join(args.out, f"{stem}.keras")
    build = getattr(keras.applications, name)
    if args.load:
        model = keras.saving.load_model(path)
    else:
        try:  # the logits: a softmax of random-init logits is often one-hot, which would hide errors
            model = build(weights=None, input_shape=(size, size, 3), classes=10, classifier_activation=None)
        except TypeError:
            model = build(weights=None, input_shape=(size, size, 3), classes=10)
        model.save(path)
    row = {"name": name, "size": size}
    # the same weights under float32: how far each 16-bit result is from it
    ref = build_as(keras, build, size, "float32", model) if args.policy != "float32" else None
    f64 = build_as(keras, build, size, "float64", model) if args.f64 else None
    rng = np.random.default_rng(args.seed)
    for batch in (1, 4):
        x = rng.uniform(0, 255, (batch, size, size, 3)).astype(np.float32)
        xp, yp = os.path.join(args.out, f"{stem}.x{batch}.npy"), os.path.join(args.out, f"{stem}.y{batch}.npy")
        np.save(xp, x)
        want = np.asarray(model.predict(x, verbose=0), dtype=np.float32)
        np.save(os.path.join(args.out, f"{stem}-{args.backend}.y{batch}.npy"), want)
        other = os.path.join(args.out, f"{stem}-{OTHER[args.backend]}.y{batch}.npy")
        if os.path.exists(other):  # the other backend's Keras, same file and input
            o = np.load(other)
            row[f"backends{batch}"] = float(np.abs(want - o).max() / max(np.abs(o).max(), 1e-30))
        got = castor_run(args, path, xp, yp, want, row, batch)
        if got is None:
            return row
        if ref is not None:
            exact = np.asarray(ref.predict(x, verbose=0), dtype=np.float32)
            scale = max(np.abs(exact).max(), 1e-30)
            row[f"castor_f32_{batch}"] = float(np.abs(got - exact).max() / scale)
            row[f"keras_f32_{batch}"] = float(np.abs(want - exact).max() / scale)
        f64p = os.path.join(args.out, f"{stem}-f64.y{batch}.npy")
        exact = None
        if f64 is not None:
            exact = np.asarray(f64.predict(x.astype(np.float64), verbose=0), dtype=np.float64)
            np.save(f64p, exact)
        elif os.path.exists(f64p):  # the float64 referee an earlier --f64 run (JAX) left, same file and input
            exact = np.load(f64p)
        if exact is not None:
            f64_columns(row, batch, exact, got, want, other)
    return row


def f64_columns(row, batch, exact, got, want, other):
    """ROW's distances from the float64 referee EXACT: castor's (GOT), this backend's Keras (WANT) and,
    where OTHER (the other backend's predictions file) exists, the other backend's Keras."""
    scale = max(np.abs(exact).max(), 1e-300)
    row[f"castor_f64_{batch}"] = float(np.abs(got - exact).max() / scale)
    row[f"keras_f64_{batch}"] = float(np.abs(want - exact).max() / scale)
    row[f"maxlogit{batch}"] = float(np.abs(exact).max())
    if os.path.exists(other):
        row[f"other_f64_{batch}"] = float(np.abs(np.load(other) - exact).max() / scale)


def table(rows, args):
    """Error against Keras's predict (on --backend). A 16-bit policy adds, per batch, how far castor's
    and Keras's own 16-bit results are from Keras's float32 predict with the same weights (castor /
    Keras); where the other backend's predictions were there, how far the two Keras references are
    apart; with --f64, castor's and Keras's distance from Keras's float64 predict and its max |logit|."""
    policy, mixed = args.policy, args.policy != "float32" and not args.castor_only
    both = any("backends1" in r for r in rows)
    f64 = any("castor_f64_1" in r for r in rows)
    of64 = any("other_f64_1" in r for r in rows)
    head = "| architecture | input | policy | Keras | loads | error batch 1 | error batch 4 |"
    head += " from float32, castor / Keras, batch 1 | batch 4 |" if mixed else ""
    head += f" Keras {args.backend} from {OTHER[args.backend]}, batch 1 / 4 |" if both else ""
    head += (f" from float64, castor / Keras {args.backend}" + (f" / Keras {OTHER[args.backend]}" if of64 else "")
             + ", batch 1 | batch 4 | max abs logit (float64) | castor no farther from float64 than"
             + (" the farther Keras |" if of64 else " Keras |")) if f64 else ""
    n = head.count("|") - 1
    out = [head + " castor run (s) |", "|---" * (n + 1) + "|"]
    for r in rows:
        lead = f"| {r['name']} | {r['size']} | {policy} | {args.backend} |"
        if "error" in r:
            out.append(lead + f" no: {r['error'].replace('|', '/')} |" + " |" * (n - 4))
            continue
        ok = "yes" if max(r["err1"], r["err4"]) <= BOUND[policy] else "yes, error above the bound"
        if mixed and ok != "yes" and all(r[f"castor_f32_{b}"] <= r[f"keras_f32_{b}"] for b in (1, 4)):
            ok = "yes, above the bound; castor nearer float32 than Keras"
        line = lead + f" {ok} | {r['err1']:.1e} | {r['err4']:.1e} |"
        if mixed:
            line += "".join(f" {r[f'castor_f32_{b}']:.1e} / {r[f'keras_f32_{b}']:.1e} |" for b in (1, 4))
        if both:
            line += " " + " / ".join(f"{r[f'backends{b}']:.1e}" if f"backends{b}" in r else "-" for b in (1, 4)) + " |"
        if f64 and "castor_f64_1" in r:
            for b in (1, 4):
                line += f" {r[f'castor_f64_{b}']:.1e} / {r[f'keras_f64_{b}']:.1e}"
                line += (f" / {r[f'other_f64_{b}']:.1e} |" if f"other_f64_{b}" in r else " / - |" if of64 else " |")
            line += f" {r['maxlogit1']:.1e} / {r['maxlogit4']:.1e} |"
            # the criterion: castor's distance from float64 at most the farther Keras's (both batches)
            keras = [max(r[f"keras_f64_{b}"], r.get(f"other_f64_{b}", 0.0)) for b in (1, 4)]
            line += " yes |" if all(r[f"castor_f64_{b}"] <= k for b, k in zip((1, 4), keras)) else " no |"
        elif f64:
            line += " |" * 4
        out.append(line + f" {r['time1']:.0f} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--castor", help="the castor binary (all but --summary)")
    ap.add_argument("--out", default="/tmp/keras_apps")
    ap.add_argument("--policy", default="float32", choices=sorted(BOUND))
    ap.add_argument("--timeout", type=float, default=900, help="seconds one castor run may take")
    ap.add_argument("--backend", default="jax", choices=sorted(OTHER), help="Keras's backend")
    ap.add_argument("--load", action="store_true", help="read the .keras files in --out, do not rebuild")
    ap.add_argument("--seed", type=int, default=37, help="the weights' and inputs' seed")
    ap.add_argument("--f64", action="store_true", help="also Keras's float64 predict (JAX only)")
    ap.add_argument("--castor-only", action="store_true",
                    help="run castor only, on the files and Keras predictions an earlier run left in --out")
    ap.add_argument("--summary", action="store_true",
                    help="only the table of the predictions earlier runs left in --out (no Keras, no castor)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    if args.summary:
        print(summary(args, args.names))
        return 0
    if not args.castor:
        ap.error("--castor is required (but for --summary)")
    if "keras" in sys.modules:
        sys.exit("keras_apps.py: keras was imported before --backend could choose its backend")
    os.environ["KERAS_BACKEND"] = args.backend
    if args.f64:
        if args.backend != "jax":
            sys.exit("keras_apps.py: --f64 needs the JAX backend (JAX_ENABLE_X64)")
        os.environ["JAX_ENABLE_X64"] = "1"
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name, size in ARCHS:
        if args.names and name not in args.names:
            continue
        try:
            rows.append(run(args, name, size))
        except Exception as e:  # Keras itself refusing the input size, ...
            rows.append({"name": name, "size": size, "error": f"Keras: {type(e).__name__}: {str(e)[:200]}"})
        print(table(rows[-1:], args).splitlines()[-1], flush=True)
    print(table(rows, args))


if __name__ == "__main__":
    sys.exit(main())
