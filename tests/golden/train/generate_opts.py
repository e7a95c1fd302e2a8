#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Golden training trajectories of Keras 3's optimizer options (issue 26),
beside generate.py's and from the same model, initial weights and data.

Run by hand, never by CI or the build (it needs Keras and JAX), after
generate.py has written init.safetensors, x.npy, x_overflow.npy, y.npy:

    pip install keras jax jaxlib
    KERAS_BACKEND=jax python3 tests/golden/train/generate_opts.py

Each case builds the model of generate.py, compiles it with one optimizer
configuration (AdamW, Adam's beta_1/beta_2/epsilon, clipnorm, clipvalue,
global_clipnorm, a learning-rate schedule, LossScaleOptimizer's
initial_scale and dynamic_growth_steps), takes STEPS steps with
Model.train_on_batch on generate.py's fixed batches and writes, after each
step, opts/<case>/stepK.safetensors: every variable and slot (castor's
keys), "loss" (the step's forward-pass loss), "learning_rate" (the rate the
step's update used: the schedule at the optimizer's iterations before the
step), "loss_scale.used", "loss_scale", "iterations". opts/manifest.txt
lists the scalars as text. tests/unit/check_keras_train.c reads them.

The script checks its own premises: for the schedule cases, the rate it
records equals a float64 evaluation of the formula in docs/training.md to
float32 precision; for the clip and weight-decay cases, that the option
changed the trajectory (the final weights differ from the same run
without it by more than 1e-4, normalized), so a castor that ignored the
option would fail.
"""

import datetime
import math
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jaxlib  # noqa: E402
import keras  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as G  # noqa: E402

S = keras.optimizers.schedules
OUT = os.path.join(HERE, "opts")

# name, policy, x file, optimizer factory, slot kinds, the same without the
# option (None: no such check), python formula of the schedule (None: none)
def exp_f(step):
    return 0.1 * 0.5 ** math.floor(step / 2)


def exp_smooth_f(step):
    return 0.01 * 0.7 ** (step / 3)


def cos_warm_f(step):
    s = min(step, 3 + 2)
    if s < 2:
        return (0.01 - 0.001) * s / 2 + 0.001
    return 0.01 * ((1 - 0.1) * 0.5 * (1 + math.cos(math.pi * (s - 2) / 3)) + 0.1)


def cos_f(step):
    s = min(step, 4)
    return 0.1 * ((1 - 0.2) * 0.5 * (1 + math.cos(math.pi * s / 4)) + 0.2)


def pw_f(step):
    return 0.1 if step <= 1 else 0.05 if step <= 3 else 0.01


CASES = [
    ("adam_betas-float32", "float32", "x.npy",
     lambda: keras.optimizers.Adam(beta_1=0.8, beta_2=0.99, epsilon=1e-4), ["momentum", "velocity"],
     lambda: keras.optimizers.Adam(), None),
    ("adamw-float32", "float32", "x.npy", lambda: keras.optimizers.AdamW(), ["momentum", "velocity"], None, None),
    ("adamw_wd0.5-float32", "float32", "x.npy",
     lambda: keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.5), ["momentum", "velocity"],
     lambda: keras.optimizers.Adam(learning_rate=0.01), None),
    ("adamw_wd0.5-mixed_float16", "mixed_float16", "x.npy",
     lambda: keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.5), ["momentum", "velocity"], None, None),
    ("sgd_clipvalue-float32", "float32", "x.npy",
     lambda: keras.optimizers.SGD(learning_rate=0.1, clipvalue=0.02), [],
     lambda: keras.optimizers.SGD(learning_rate=0.1), None),
    ("sgd_clipnorm-float32", "float32", "x.npy",
     lambda: keras.optimizers.SGD(learning_rate=0.1, clipnorm=0.1), [],
     lambda: keras.optimizers.SGD(learning_rate=0.1), None),
    ("sgd_clipnorm-mixed_float16", "mixed_float16", "x.npy",
     lambda: keras.optimizers.SGD(learning_rate=0.1, clipnorm=0.1), [], None, None),
    ("sgd_momentum_global_clipnorm-float32", "float32", "x.npy",
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9, global_clipnorm=0.2), ["momentum"],
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), None),
    ("sgd_momentum_global_clipnorm-mixed_float16", "mixed_float16", "x.npy",
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9, global_clipnorm=0.2), ["momentum"], None, None),
    ("sgd_exponential_staircase-float32", "float32", "x.npy",
     lambda: keras.optimizers.SGD(learning_rate=S.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5, staircase=True)),
     [], None, exp_f),
    # Initial scale 2^18: step 1 overflows and is skipped, so step 2 runs at
    # the schedule's step 0 again (Keras evaluates it at iterations).
    ("adam_exponential-mixed_float16-scale2p18", "mixed_float16", "x.npy",
     lambda: keras.optimizers.LossScaleOptimizer(
         keras.optimizers.Adam(learning_rate=S.ExponentialDecay(0.01, decay_steps=3, decay_rate=0.7)),
         initial_scale=2.0 ** 18),
     ["momentum", "velocity"], None, exp_smooth_f),
    ("adam_cosine_warmup-float32", "float32", "x.npy",
     lambda: keras.optimizers.Adam(learning_rate=S.CosineDecay(0.001, decay_steps=3, alpha=0.1, warmup_target=0.01,
                                                               warmup_steps=2)),
     ["momentum", "velocity"], None, cos_warm_f),
    ("sgd_cosine-float32", "float32", "x.npy",
     lambda: keras.optimizers.SGD(learning_rate=S.CosineDecay(0.1, decay_steps=4, alpha=0.2)), [], None, cos_f),
    ("sgd_piecewise-float32", "float32", "x.npy",
     lambda: keras.optimizers.SGD(learning_rate=S.PiecewiseConstantDecay([1, 3], [0.1, 0.05, 0.01])), [], None, pw_f),
    ("adam_scale2p10_growth2-mixed_float16", "mixed_float16", "x.npy",
     lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(), initial_scale=2.0 ** 10,
                                                 dynamic_growth_steps=2),
     ["momentum", "velocity"], None, None),
]


def run(policy, xfile, make_opt, slots_kinds, init, data):
    x, y = data[xfile], data["y.npy"]
    model = G.build_model(policy, init)
    model.compile(optimizer=make_opt(), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False))
    model._symbolic_build(data_batch=(x[:G.BATCH], y[:G.BATCH], None))
    opt = model.optimizer
    lso = isinstance(opt, keras.optimizers.LossScaleOptimizer)
    inner = opt.inner_optimizer if lso else opt
    by_name = {v.name: v for v in inner.variables}
    steps = []
    for k in range(G.STEPS):
        xb, yb = x[k * G.BATCH:(k + 1) * G.BATCH], y[k * G.BATCH:(k + 1) * G.BATCH]
        lr_used = float(np.asarray(inner.learning_rate))
        scale_used = float(np.asarray(opt.dynamic_scale.value)) if lso else 1.0
        it_before = int(np.asarray(inner.iterations.value))
        loss = model.train_on_batch(xb, yb, return_dict=True)["loss"]
        t = {G.var_key(v): np.asarray(v.value, np.float32) for v in model.trainable_variables}
        for v in model.trainable_variables:
            for s in slots_kinds:
                t[G.var_key(v) + "." + s] = np.asarray(by_name[v.path.replace("/", "_") + "_" + s].value, np.float32)
        it = int(np.asarray(inner.iterations.value))
        steps.append(dict(tensors=t, loss=float(loss), lr=lr_used, scale_used=scale_used, it_before=it_before,
                          scale=float(np.asarray(opt.dynamic_scale.value)) if lso else 1.0, iterations=it))
    return steps


def normalized(a, b):
    return max(float(np.max(np.abs(a[k] - b[k]))) / max(float(np.max(np.abs(b[k]))), 1e-30) for k in b)


def main():
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    versions = (f"keras {keras.__version__} (backend jax {jax.__version__}, "
                f"jaxlib {jaxlib.__version__}, numpy {np.__version__})")
    data = {f: np.load(os.path.join(HERE, f)) for f in ("x.npy", "x_overflow.npy", "y.npy")}
    init = G.make_init()
    for k, v in init.items():  # generate.py's files are what this script starts from
        assert np.array_equal(v, G.make_init()[k])
    x, y, xo = G.make_data()
    assert np.array_equal(x, data["x.npy"]) and np.array_equal(xo, data["x_overflow.npy"])
    meta = {"generator": "tests/golden/train/generate_opts.py", "versions": versions, "date": stamp}
    manifest = [f"# generated by tests/golden/train/generate_opts.py with {versions} on {stamp}",
                "# case step loss learning_rate scale_used scale iterations"]
    report = []
    for name, policy, xfile, make_opt, kinds, without, formula in CASES:
        steps = run(policy, xfile, make_opt, kinds, init, data)
        os.makedirs(os.path.join(OUT, name), exist_ok=True)
        for k, st in enumerate(steps, 1):
            t = dict(st["tensors"])
            t["loss"] = np.array([st["loss"]], np.float32)
            t["learning_rate"] = np.array([st["lr"]], np.float32)
            t["loss_scale.used"] = np.array([st["scale_used"]], np.float32)
            t["loss_scale"] = np.array([st["scale"]], np.float32)
            t["iterations"] = np.array([st["iterations"]], np.float32)
            G.write_safetensors(os.path.join(OUT, name, f"step{k}.safetensors"), t,
                                dict(meta, case=name, step=str(k), policy=policy))
            manifest.append(" ".join([name, str(k), "%.9g" % st["loss"], "%.9g" % st["lr"], "%.9g" % st["scale_used"],
                                      "%.9g" % st["scale"], str(st["iterations"])]))
            if formula:
                want = formula(st["it_before"])
                assert abs(st["lr"] - want) <= 2e-7 * abs(want), (name, k, st["lr"], want)
        line = f"{name}: final loss {steps[-1]['loss']:.9g}, iterations {steps[-1]['iterations']}"
        if without:
            ref = run(policy, xfile, without, kinds, init, data)
            d = normalized(steps[-1]["tensors"], ref[-1]["tensors"])
            assert d > 1e-4, (name, d)
            line += f"; the option moves the final state by {d:.3g} (normalized)"
        if formula:
            line += "; rates " + ", ".join("%.6g" % s["lr"] for s in steps)
        report.append(line)
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(OUT, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    with open(os.path.join(OUT, "report.txt"), "w") as f:
        f.write(f"# generated by tests/golden/train/generate_opts.py with {versions} on {stamp}\n")
        f.write("\n".join(report) + "\n")
    print("\n".join(report), file=sys.stderr)


if __name__ == "__main__":
    main()
