#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Golden training trajectories from real Keras 3 (JAX backend), for castor's
training tests (issue 10).

Run by hand, never by CI or the build (it needs Keras and JAX):

    python3 -m venv /tmp/kvenv && /tmp/kvenv/bin/pip install keras jax jaxlib
    KERAS_BACKEND=jax /tmp/kvenv/bin/python tests/golden/train/generate.py

One small MLP (MODEL below; also written as mlp.cast from the same table)
starts from the same initial weights (init.safetensors) in every case and
takes STEPS training steps with Model.train_on_batch on fixed batches of
BATCH rows of x.npy / y.npy, in order (step k uses rows [(k-1)*BATCH,
k*BATCH)): exactly what Model.fit(x, y, batch_size=BATCH, epochs=1,
shuffle=False) does, which the script checks. After every step it writes
<case>/stepK.safetensors (every variable, every optimizer slot, the
gradients of that step and the scalars) and a line of manifest.txt.
README.md beside this file documents the format and the Keras semantics the
numbers follow.

The script also replays every step in NumPy from the gradients Keras
computed, with the formulas of README.md, and fails if the replay and Keras
disagree by more than a few float32 ulps: the README's formulas are checked,
not only copied from Keras's source.
"""

import datetime
import json
import os
import struct
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jaxlib  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 8
STEPS = 5
N_FEATURES = 12
N_CLASSES = 5

# ---- the model: one table drives Keras and mlp.cast ----
# (var, layer, inputs, attrs), as in tests/golden/keras/generate.py.
MODEL = [
    ("features", "input", [], {"shape": N_FEATURES}),
    ("x", "dense", ["features"], {"units": 16, "activation": "relu", "name": "dense_1"}),
    ("x", "dense", ["x"], {"units": 8, "activation": "tanh", "name": "dense_2"}),
    ("logits", "dense", ["x"], {"units": N_CLASSES, "name": "dense_3"}),
    ("probs", "activation", ["logits"],
     {"activation": "softmax", "dtype": "float32", "name": "activation", "cast_name": False}),
]
OUTPUT = "probs"
DENSE = [a["name"] for _, l, _, a in MODEL if l == "dense"]

# ---- the cases ----
# name, policy, optimizer kind, optimizer kwargs (Keras defaults unless
# given), x file, initial loss scale. Under mixed_float16, compile() wraps
# the optimizer in a dynamic LossScaleOptimizer (initial scale 2^15, growth
# every 2000 steps), as Model.fit does by default; a case with an initial
# scale passes LossScaleOptimizer(optimizer, initial_scale=S) to compile()
# itself (Keras's documented way to choose it; compile() then wraps nothing).
CASES = [
    ("rmsprop-float32", "float32", "rmsprop", {}, "x.npy", None),
    ("rmsprop-mixed_float16", "mixed_float16", "rmsprop", {}, "x.npy", None),
    ("rmsprop-mixed_bfloat16", "mixed_bfloat16", "rmsprop", {}, "x.npy", None),
    ("rmsprop_centered_momentum-float32", "float32", "rmsprop", {"momentum": 0.9, "centered": True}, "x.npy", None),
    ("rmsprop_centered_momentum-mixed_float16", "mixed_float16", "rmsprop",
     {"momentum": 0.9, "centered": True}, "x.npy", None),
    ("rmsprop_momentum-float32", "float32", "rmsprop", {"momentum": 0.9}, "x.npy", None),
    ("rmsprop_centered-float32", "float32", "rmsprop", {"centered": True}, "x.npy", None),
    ("adam-float32", "float32", "adam", {}, "x.npy", None),
    ("adam-mixed_float16", "mixed_float16", "adam", {}, "x.npy", None),
    ("sgd-float32", "float32", "sgd", {}, "x.npy", None),
    ("sgd_momentum-float32", "float32", "sgd", {"momentum": 0.9}, "x.npy", None),
    ("sgd_momentum-mixed_float16", "mixed_float16", "sgd", {"momentum": 0.9}, "x.npy", None),
    ("sgd_nesterov-float32", "float32", "sgd", {"momentum": 0.9, "nesterov": True}, "x.npy", None),
    ("sgd_nesterov-mixed_float16", "mixed_float16", "sgd",
     {"momentum": 0.9, "nesterov": True}, "x.npy", None),
    # Batch 3 of x_overflow.npy is x's batch 3 times OVERFLOW_FACTOR: the
    # forward pass and the loss stay finite in float16, the scaled gradients
    # do not, so step 3 is skipped (scale halves; variables, slots and
    # iterations kept) and Adam's step 4 is its 3rd applied step.
    ("adam-mixed_float16-overflow", "mixed_float16", "adam", {}, "x_overflow.npy", None),
    # Initial scale 2^18: step 1's scaled gradients overflow (skipped while
    # every slot is still zero), step 2 is Adam's first applied step.
    ("adam-mixed_float16-scale2p18", "mixed_float16", "adam", {}, "x.npy", 2.0 ** 18),
]
OVERFLOW_BATCH = 3
OVERFLOW_FACTOR = 64.0

SLOTS = {  # slot kinds in the order the optimizer creates them
    "rmsprop": ["velocity"],
    "adam": ["momentum", "velocity"],
    "sgd": ["momentum"],
}


def make_optimizer(kind, kw):
    if kind == "rmsprop":
        return keras.optimizers.RMSprop(**kw)
    if kind == "adam":
        return keras.optimizers.Adam(**kw)
    if kind == "sgd":
        return keras.optimizers.SGD(**kw)
    raise ValueError(kind)


def slot_kinds(kind, kw):
    if kind == "sgd" and not kw.get("momentum"):
        return []
    if kind == "rmsprop":  # Keras creates velocities, momentums, average_gradients
        return (["velocity"] + (["momentum"] if kw.get("momentum") else [])
                + (["average_gradient"] if kw.get("centered") else []))
    return SLOTS[kind]


# ---- data and initial weights (NumPy, seeded; independent of Keras's RNG) ----

def make_data():
    rng = np.random.default_rng(20261123)
    n = BATCH * STEPS
    x = rng.standard_normal((n, N_FEATURES)).astype(np.float32)
    y = rng.integers(0, N_CLASSES, n).astype(np.int32)
    xo = x.copy()
    b = OVERFLOW_BATCH - 1
    xo[b * BATCH:(b + 1) * BATCH] *= np.float32(OVERFLOW_FACTOR)
    return x, y, xo


def make_init():
    """Glorot-uniform kernels (Keras's default) and small non-zero biases."""
    rng = np.random.default_rng(7)
    w = {}
    fan_in = N_FEATURES
    for _, l, _, a in MODEL:
        if l != "dense":
            continue
        lim = np.sqrt(6.0 / (fan_in + a["units"]))
        w[a["name"] + ".kernel"] = rng.uniform(-lim, lim, (fan_in, a["units"])).astype(np.float32)
        w[a["name"] + ".bias"] = rng.uniform(-0.1, 0.1, a["units"]).astype(np.float32)
        fan_in = a["units"]
    return w


# ---- writers ----

def write_safetensors(path, tensors, metadata):
    """tensors: ordered dict name -> float32 array (written F32)."""
    header = {"__metadata__": metadata}
    blobs, off = [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype="<f4")
        data = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def cast_text():
    lines = [
        "# tests/golden/train/mlp.cast: the model of the Keras training goldens.",
        "# Generated by tests/golden/train/generate.py from the same table as the",
        "# Keras model; layer names match the keys of init.safetensors and of the",
        "# step files. Tests override the policy line with each case's policy.",
        "model train_mlp",
        "policy float32",
        'weights "init.safetensors"',
        "",
    ]
    width = max(len(v) for v, *_ in MODEL)
    for var, layer, srcs, a in MODEL:
        if layer == "input":
            args = [f"shape=[{a['shape']}]"]
        else:
            args = list(srcs)
            if layer == "dense":
                args.append(f"units={a['units']}")
                if a.get("activation"):
                    args.append(f"activation={a['activation']}")
            elif layer == "activation":
                args.append(a["activation"])
            if a.get("cast_name", True):
                args.append(f"name={a['name']}")
        if "dtype" in a:
            args.append(f"dtype={a['dtype']}")
        lines.append(f"{var:<{width}} = {layer}({', '.join(args)})")
    lines.append(f"output {OUTPUT}")
    return "\n".join(lines) + "\n"


# ---- Keras ----

def build_model(policy, init):
    keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(policy)
    env = {}
    inp = None
    for var, layer, srcs, a in MODEL:
        kw = {"name": a.get("name", var)} if layer != "input" else {"name": var}
        if "dtype" in a:
            kw["dtype"] = a["dtype"]
        if layer == "input":
            inp = env[var] = keras.Input(shape=(a["shape"],), **kw)
        elif layer == "dense":
            env[var] = layers.Dense(a["units"], activation=a.get("activation"), **kw)(env[srcs[0]])
        elif layer == "activation":
            env[var] = layers.Activation(a["activation"], **kw)(env[srcs[0]])
    model = keras.Model(inp, env[OUTPUT])
    for name in DENSE:
        l = model.get_layer(name)
        l.kernel.assign(init[name + ".kernel"])
        l.bias.assign(init[name + ".bias"])
    return model


def var_key(v):
    """Keras variable path 'dense_1/kernel' -> castor key 'dense_1.kernel'."""
    return v.path.replace("/", ".")


def optimizer_state(model, kind, kw):
    """(inner optimizer, {castor slot key: array}, iterations, scale, counter)."""
    opt = model.optimizer
    lso = isinstance(opt, keras.optimizers.LossScaleOptimizer)
    inner = opt.inner_optimizer if lso else opt
    slots = {}
    by_name = {v.name: v for v in inner.variables}
    for v in model.trainable_variables:
        for s in slot_kinds(kind, kw):
            name = v.path.replace("/", "_") + "_" + s
            slots[var_key(v) + "." + s] = np.asarray(by_name[name].value, np.float32)
    assert len(inner.variables) == 2 + len(slots), [v.name for v in inner.variables]
    it = int(np.asarray(inner.iterations.value))
    scale = float(np.asarray(opt.dynamic_scale.value)) if lso else 1.0
    counter = int(np.asarray(opt.step_counter.value)) if lso else 0
    return slots, it, scale, counter


def grad_fn(model):
    """The value_and_grad of Model.fit's JAX train_step (trainer.py), jitted:
    (scaled loss, unscaled loss, gradients of the scaled loss)."""
    vg = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)

    def f(tv, ntv, mv, ov, x, y):
        (loss, aux), grads = vg(tv, ntv, mv, x, y, None, training=True, optimizer_variables=ov)
        return loss, aux[0], grads
    return jax.jit(f)


def run_case(case, init, data):
    name, policy, kind, kw, xfile, s0 = case
    x, y = data[xfile], data["y.npy"]
    model = build_model(policy, init)
    opt = make_optimizer(kind, kw)
    if s0 is not None:
        opt = keras.optimizers.LossScaleOptimizer(opt, initial_scale=s0)
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False))
    lso = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert lso == (policy == "mixed_float16"), (name, type(model.optimizer))
    # Build the optimizer, the loss and the metrics as the first
    # train_on_batch would, so that the gradients of step 1 can be taken
    # from the same state the step starts from.
    model._symbolic_build(data_batch=(x[:BATCH], y[:BATCH], None))
    assert model.optimizer.built
    g = grad_fn(model)
    steps = []
    for k in range(STEPS):
        xb, yb = x[k * BATCH:(k + 1) * BATCH], y[k * BATCH:(k + 1) * BATCH]
        ov = [v.value for v in model.optimizer.variables]
        scale_used = float(np.asarray(model.optimizer.dynamic_scale.value)) if lso else 1.0
        sloss, uloss, grads = g([v.value for v in model.trainable_variables],
                                [v.value for v in model.non_trainable_variables],
                                [v.value for v in model.metrics_variables], ov, xb, yb)
        loss = model.train_on_batch(xb, yb, return_dict=True)["loss"]
        weights = {var_key(v): np.asarray(v.value, np.float32) for v in model.trainable_variables}
        slots, it, scale, counter = optimizer_state(model, kind, kw)
        gr = {var_key(v) + ".grad": np.asarray(gg, np.float32)
              for v, gg in zip(model.trainable_variables, grads)}
        finite = all(np.all(np.isfinite(a)) for a in gr.values())
        assert np.float32(loss) == np.float32(uloss), (name, k, loss, float(uloss))
        steps.append(dict(loss=np.float32(loss), scale_used=scale_used, scale=scale,
                          iterations=it, counter=counter, finite=finite,
                          weights=weights, slots=slots, grads=gr))
    return model, steps


# ---- NumPy replay of the README's formulas ----

def f32(v):
    return np.float32(v)


def replay(case, steps, init):
    """Re-apply every step from Keras's gradients with the formulas of
    README.md in float32; returns the largest |difference| / (|keras| + tiny)
    over variables and slots."""
    name, policy, kind, kw, _, s0 = case
    keys = [n + s for n in DENSE for s in (".kernel", ".bias")]
    w = {k: init[k].copy() for k in keys}
    sk = slot_kinds(kind, kw)
    slots = {k + "." + s: np.zeros_like(init[k]) for k in keys for s in sk}
    it, scale, counter = 0, (s0 or 2.0 ** 15) if policy == "mixed_float16" else 1.0, 0
    worst = 0.0
    exact = [0, 0]
    for st in steps:
        assert st["scale_used"] == scale, (name, st["scale_used"], scale)
        finite = all(np.all(np.isfinite(st["grads"][k + ".grad"])) for k in keys)
        if policy == "mixed_float16":
            if finite:
                counter = 0 if counter == 2000 - 1 else counter + 1
                scale_next = scale * 2 if counter == 0 else scale
            else:
                counter, scale_next = 0, scale * 0.5
        else:
            scale_next = scale
        if finite:
            for k in keys:
                gk = st["grads"][k + ".grad"] / f32(scale)
                if kind == "rmsprop":
                    lr, rho, eps = f32(1e-3), f32(0.9), f32(1e-7)
                    v = slots[k + ".velocity"] = rho * slots[k + ".velocity"] + f32(1 - 0.9) * gk * gk
                    den = v
                    if kw.get("centered"):
                        a = slots[k + ".average_gradient"] = rho * slots[k + ".average_gradient"] + f32(1 - 0.9) * gk
                        den = v - a * a
                    inc = (lr * gk) / np.sqrt(den + eps)
                    if kw.get("momentum"):
                        inc = slots[k + ".momentum"] = f32(kw["momentum"]) * slots[k + ".momentum"] + inc
                    w[k] = w[k] - inc
                elif kind == "adam":
                    lr, b1, b2, eps = f32(1e-3), f32(0.9), f32(0.999), f32(1e-7)
                    t = f32(it + 1)
                    alpha = lr * np.sqrt(f32(1) - b2 ** t) / (f32(1) - b1 ** t)
                    m = slots[k + ".momentum"] = slots[k + ".momentum"] + (gk - slots[k + ".momentum"]) * f32(1 - 0.9)
                    v = slots[k + ".velocity"] = slots[k + ".velocity"] + (gk * gk - slots[k + ".velocity"]) * f32(1 - 0.999)
                    w[k] = w[k] - (m * alpha) / (np.sqrt(v) + eps)
                elif kind == "sgd":
                    lr, mu = f32(0.01), f32(kw.get("momentum", 0.0))
                    if sk:
                        m = slots[k + ".momentum"] = slots[k + ".momentum"] * mu - gk * lr
                        w[k] = w[k] + (m * mu - gk * lr if kw.get("nesterov") else m)
                    else:
                        w[k] = w[k] - gk * lr
            it += 1
        scale = scale_next
        assert st["iterations"] == it and st["scale"] == scale and st["counter"] == counter, \
            (name, st["iterations"], it, st["scale"], scale)
        assert st["finite"] == finite
        for k in keys:
            pairs = [(w[k], st["weights"][k])] + [(slots[k + "." + s], st["slots"][k + "." + s]) for s in sk]
            for mine, ker in pairs:
                # Normalized error: cancellations (m + (g - m)*0.1 near 0)
                # make elementwise relative errors meaningless.
                d = np.max(np.abs(mine.astype(np.float64) - ker)) / max(float(np.max(np.abs(ker))), 1e-30)
                exact[0] += int(np.sum(mine == ker))
                exact[1] += mine.size
                worst = max(worst, float(d))
        # Re-sync to Keras's values so differences do not compound.
        for k in keys:
            w[k] = st["weights"][k].copy()
            for s in sk:
                slots[k + "." + s] = st["slots"][k + "." + s].copy()
    return worst, exact[0] / exact[1]


def numpy_loss(x, y, w):
    """float64 forward + Keras's sparse CE on probabilities (reference only)."""
    h = x.astype(np.float64)
    acts = {"dense_1": lambda z: np.maximum(z, 0), "dense_2": np.tanh, "dense_3": lambda z: z}
    for n in DENSE:
        h = acts[n](h @ w[n + ".kernel"] + w[n + ".bias"])
    e = np.exp(h - h.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    p = p / p.sum(axis=1, keepdims=True)
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(np.mean(-np.log(p[np.arange(len(y)), y])))


def fit_check(case, init, data, steps):
    """Model.fit(batch_size=BATCH, epochs=1, shuffle=False) from the same
    start must end where the train_on_batch loop ended."""
    name, policy, kind, kw, xfile, s0 = case
    model = build_model(policy, init)
    opt = make_optimizer(kind, kw)
    if s0 is not None:
        opt = keras.optimizers.LossScaleOptimizer(opt, initial_scale=s0)
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False))
    hist = model.fit(data[xfile], data["y.npy"], batch_size=BATCH, epochs=1,
                     shuffle=False, verbose=0)
    worst = 0.0
    for v in model.trainable_variables:
        ref = steps[-1]["weights"][var_key(v)]
        worst = max(worst, float(np.max(np.abs(np.asarray(v.value) - ref))))
    mean_loss = float(np.mean([s["loss"] for s in steps]))
    return worst, hist.history["loss"][0], mean_loss


def main():
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    versions = (f"keras {keras.__version__} (backend jax {jax.__version__}, "
                f"jaxlib {jaxlib.__version__}, numpy {np.__version__})")
    x, y, xo = make_data()
    init = make_init()
    data = {"x.npy": x, "x_overflow.npy": xo, "y.npy": y}
    np.save(os.path.join(HERE, "x.npy"), x)
    np.save(os.path.join(HERE, "x_overflow.npy"), xo)
    np.save(os.path.join(HERE, "y.npy"), y)
    meta = {"generator": "tests/golden/train/generate.py", "versions": versions, "date": stamp}
    write_safetensors(os.path.join(HERE, "init.safetensors"), init, meta)
    with open(os.path.join(HERE, "mlp.cast"), "w") as f:
        f.write(cast_text())

    manifest = [
        f"# generated by tests/golden/train/generate.py with {versions} on {stamp}",
        "# one line per case and step; see README.md. loss: unscaled mean loss of the",
        "# step's forward pass (before its update); scale_used: the loss scale that",
        "# step's loss was multiplied by; scale: the scale after the step; iterations:",
        "# the optimizer's iteration count after the step; applied: 1 if the update",
        "# was applied, 0 if the step was skipped (non-finite scaled gradients).",
        "# case policy optimizer x step loss scale_used scale iterations growth_counter applied",
    ]
    trajectories = {}
    report = []
    for case in CASES:
        name, policy, kind, kw, xfile, s0 = case
        model, steps = run_case(case, init, data)
        os.makedirs(os.path.join(HERE, name), exist_ok=True)
        for k, st in enumerate(steps, 1):
            t = dict(st["weights"])
            t.update(st["slots"])
            t.update(st["grads"])
            t["loss"] = np.array([st["loss"]], np.float32)
            t["loss_scale.used"] = np.array([st["scale_used"]], np.float32)
            t["loss_scale"] = np.array([st["scale"]], np.float32)
            t["iterations"] = np.array([st["iterations"]], np.float32)
            t["applied"] = np.array([1.0 if st["finite"] else 0.0], np.float32)
            write_safetensors(os.path.join(HERE, name, f"step{k}.safetensors"), t,
                              dict(meta, case=name, step=str(k), policy=policy))
            opt = kind + "".join(f",{a}={b}" for a, b in kw.items())
            if s0 is not None:
                opt += f",initial_scale={s0:g}"
            manifest.append(" ".join([name, policy, opt, xfile, str(k), "%.9g" % st["loss"],
                                      "%.9g" % st["scale_used"], "%.9g" % st["scale"],
                                      str(st["iterations"]), str(st["counter"]),
                                      "1" if st["finite"] else "0"]))
        worst, exact = replay(case, steps, init)
        fit_diff, fit_loss, mean_loss = fit_check(case, init, data, steps)
        ref64 = numpy_loss(data[xfile][:BATCH], y[:BATCH], init)
        trajectories[name] = steps
        skipped = [k for k, st in enumerate(steps, 1) if not st["finite"]]
        for k in skipped:
            bad = ["%s (%d inf, %d nan of %d)" % (n, np.isinf(g).sum(), np.isnan(g).sum(), g.size)
                   for n, g in steps[k - 1]["grads"].items() if not np.all(np.isfinite(g))]
            report.append(f"{name}: step {k} skipped at scale {steps[k - 1]['scale_used']:g}, "
                          f"loss {steps[k - 1]['loss']:.9g}; non-finite scaled gradients: {', '.join(bad)}")
        report.append(f"{name}: replay max normalized diff {worst:.3g} ({exact:.1%} bit-exact); fit vs loop max |dw| {fit_diff:.3g}, "
                      f"fit loss {fit_loss:.9g} vs mean of steps {mean_loss:.9g}; step-1 loss "
                      f"{steps[0]['loss']:.9g} vs float64 {ref64:.9g}; skipped {skipped or 'none'}")
        assert worst < 1e-6, (name, worst)
        assert fit_diff == 0.0 or fit_diff < 1e-6, (name, fit_diff)
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")

    # Mixed vs float32: the largest |w_mixed - w_f32| / max|w_f32| per pair.
    for opt in ("rmsprop", "rmsprop_centered_momentum", "adam", "sgd_momentum", "sgd_nesterov"):
        for pol in ("mixed_float16", "mixed_bfloat16"):
            a, b = trajectories.get(f"{opt}-float32"), trajectories.get(f"{opt}-{pol}")
            if not a or not b:
                continue
            dw = max(float(np.max(np.abs(b[k]["weights"][n] - a[k]["weights"][n])))
                     / float(np.max(np.abs(a[k]["weights"][n])))
                     for k in range(STEPS) for n in a[k]["weights"])
            dl = max(abs(float(b[k]["loss"]) - float(a[k]["loss"])) / abs(float(a[k]["loss"])) for k in range(STEPS))
            g1 = max(float(np.max(np.abs(b[0]["grads"][n] / b[0]["scale_used"] - a[0]["grads"][n])))
                     / float(np.max(np.abs(a[0]["grads"][n]))) for n in a[0]["grads"])
            report.append(f"{opt}: {pol} vs float32: max |dw|/max|w| {dw:.3g} (over the {STEPS} steps), "
                          f"max rel loss diff {dl:.3g}, step-1 gradients max |dg|/max|g| {g1:.3g}")
    print("\n".join(report), file=sys.stderr)
    with open(os.path.join(HERE, "report.txt"), "w") as f:
        f.write(f"# generated by tests/golden/train/generate.py with {versions} on {stamp}\n")
        f.write("\n".join(report) + "\n")


if __name__ == "__main__":
    main()
