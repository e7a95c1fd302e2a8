# SPDX-License-Identifier: Apache-2.0
"""Golden training steps of the two CNN samples from real Keras 3 (JAX
backend), for check_keras_train (issue 23).

Run by hand, never by CI or the build (it needs Keras, JAX and Debian's
dataset-fashion-mnist), after generate.py (same command with this name):

    KERAS_BACKEND=jax python3 tests/golden/train/generate_cnn.py

The models are samples/fashion_cnn.cast and samples/edge_cnn.cast, written
here as Keras models with the same layer names (so Keras's variable paths,
with "/" -> ".", are castor's state keys); fashion_cnn's Dropout rate is 0
(castor's masks are not Keras's; the test loads the sample with rate=0.5
replaced by rate=0). Each model starts from cnn/<model>-init.safetensors
(Keras's own initializers, seeded; fashion_cnn's biases then set uniform in
[-0.05, 0.05] so that bias handling shows) and takes STEPS steps of
Model.train_on_batch with Adam (Keras's defaults) and the sparse categorical
cross-entropy, on BATCH images at a time of cnn/x.npy / cnn/y.npy (the first
BATCH * STEPS training images of Fashion-MNIST, scaled by 1/255, and their
labels), under float32, mixed_float16 (LossScaleOptimizer, dynamic scale
from 2^15, as compile() wraps it) and mixed_bfloat16.

Output, in cnn/ (README.md beside this script has the format):
  <model>-<policy>/stepK.safetensors: the scalars of step K (loss,
      loss_scale.used, loss_scale, iterations, applied) and, after the last
      step only, every variable (batch norm's moving mean and variance
      included) and every Adam slot (<var>.momentum, <var>.velocity), F32;
      the state of every step would be 5.7 MB, the last one is a third of it
      and depends on every step's gradients;
  manifest.txt: the scalars as text, one line per case and step;
  report.txt: what the script checked and how far the mixed trajectories
      are from the float32 one.

Checks: train_on_batch's loss equals the loss of the step's own forward
pass; the first batch norm's moving statistics after step 1 follow
moving * 0.99 + batch * 0.01 (the batch mean and biased variance of the
convolution's output, in NumPy); the loss scale and iterations are Keras's
rule (no step skipped here).
"""

import datetime
import gzip
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jaxlib  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as G  # noqa: E402

OUT = os.path.join(HERE, "cnn")
DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 8
STEPS = 4
POLICIES = ["float32", "mixed_float16", "mixed_bfloat16"]
MODELS = ["fashion_cnn", "edge_cnn"]


def fashion_cnn():
    inp = keras.Input((28, 28, 1), name="images")
    x = layers.Conv2D(32, 3, activation="relu", name="conv2d")(inp)
    x = layers.MaxPooling2D(2, name="max_pooling2d")(x)
    x = layers.Conv2D(64, 3, activation="relu", name="conv2d_1")(x)
    x = layers.MaxPooling2D(2, name="max_pooling2d_1")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dropout(0.0, name="dropout")(x)
    x = layers.Dense(10, name="dense")(x)
    x = layers.Activation("softmax", dtype="float32", name="probs")(x)
    return keras.Model(inp, x)


def edge_cnn():
    inp = keras.Input((28, 28, 1), name="images")
    x = inp
    for i, f in enumerate([16, 32]):
        s = "" if i == 0 else f"_{i}"
        x = layers.Conv2D(f, 3, padding="same", use_bias=False, name="conv2d" + s)(x)
        x = layers.BatchNormalization(name="batch_normalization" + s)(x)
        x = layers.Activation("relu", name="relu" + s)(x)
        x = layers.MaxPooling2D(2, name="max_pooling2d" + s)(x)
    for i, f in enumerate([64, 128]):
        s = "" if i == 0 else f"_{i}"
        x = layers.SeparableConv2D(f, 3, padding="same", use_bias=False, name="separable_conv2d" + s)(x)
        x = layers.BatchNormalization(name=f"batch_normalization_{i + 2}")(x)
        x = layers.Activation("relu", name=f"relu_{i + 2}")(x)
    x = layers.GlobalAveragePooling2D(name="global_average_pooling2d")(x)
    x = layers.Dense(10, name="dense")(x)
    x = layers.Activation("softmax", dtype="float32", name="probs")(x)
    return keras.Model(inp, x)


BUILD = {"fashion_cnn": fashion_cnn, "edge_cnn": edge_cnn}


def idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def make_data():
    n = BATCH * STEPS
    x = idx(f"{DATA}/train-images-idx3-ubyte.gz")[:n].astype(np.float32) / np.float32(255)
    y = idx(f"{DATA}/train-labels-idx1-ubyte.gz")[:n].astype(np.int32)
    return x.reshape(n, 28, 28, 1), y


def all_vars(model):
    return {G.var_key(v): np.asarray(v.value, np.float32) for v in model.variables}


def make_init(name):
    keras.backend.clear_session()
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(23)
    m = BUILD[name]()
    init = all_vars(m)
    rng = np.random.default_rng(23)
    for k in init:
        if name == "fashion_cnn" and k.endswith(".bias"):
            init[k] = rng.uniform(-0.05, 0.05, init[k].shape).astype(np.float32)
    return init


def build(name, policy, init):
    keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(policy)
    m = BUILD[name]()
    for v in m.variables:
        v.assign(init[G.var_key(v)])
    return m


def run_case(name, policy, init, x, y, meta, manifest, report):
    m = build(name, policy, init)
    m.compile(optimizer=keras.optimizers.Adam(),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False))
    lso = isinstance(m.optimizer, keras.optimizers.LossScaleOptimizer)
    assert lso == (policy == "mixed_float16"), (name, policy, type(m.optimizer))
    m._symbolic_build(data_batch=(x[:BATCH], y[:BATCH], None))
    g = G.grad_fn(m)
    case = f"{name}-{policy}"
    os.makedirs(os.path.join(OUT, case), exist_ok=True)
    traj = []
    for k in range(1, STEPS + 1):
        xb, yb = x[(k - 1) * BATCH:k * BATCH], y[(k - 1) * BATCH:k * BATCH]
        used = float(np.asarray(m.optimizer.dynamic_scale.value)) if lso else 1.0
        _, uloss, _ = g([v.value for v in m.trainable_variables], [v.value for v in m.non_trainable_variables],
                        [v.value for v in m.metrics_variables], [v.value for v in m.optimizer.variables], xb, yb)
        if k == 1 and name == "edge_cnn":  # the moving statistics' formula
            conv = keras.Model(m.input, m.get_layer("conv2d").output)
            z = np.asarray(conv(xb), np.float32)
        loss = np.float32(m.train_on_batch(xb, yb, return_dict=True)["loss"])
        assert loss == np.float32(uloss), (case, k, loss, float(uloss))
        slots, it, scale, counter = G.optimizer_state(m, "adam", {})
        assert it == k and (scale == 2.0 ** 15 if lso else scale == 1.0) and used == scale, (case, k, it, scale)
        if k == 1 and name == "edge_cnn":
            mean, var = z.mean(axis=(0, 1, 2), dtype=np.float64), z.var(axis=(0, 1, 2), dtype=np.float64)
            st = all_vars(m)
            tol = 1e-6 if policy == "float32" else 1e-3
            assert np.allclose(st["batch_normalization.moving_mean"], 0.01 * mean, atol=tol), case
            assert np.allclose(st["batch_normalization.moving_variance"], 0.99 + 0.01 * var, atol=tol), case
            report.append(f"{case}: step 1 moving statistics of batch_normalization = 0.99 * start + 0.01 * "
                          f"the batch's (NumPy from conv2d's output) within {tol:g}")
        t = {"loss": np.array([loss], np.float32), "loss_scale.used": np.array([used], np.float32),
             "loss_scale": np.array([scale], np.float32), "iterations": np.array([it], np.float32),
             "applied": np.array([1.0], np.float32)}
        state = all_vars(m)
        state.update(slots)
        if k == STEPS:
            t.update(state)
        traj.append((loss, state))
        G.write_safetensors(os.path.join(OUT, case, f"step{k}.safetensors"), t,
                            dict(meta, case=case, step=str(k), policy=policy))
        manifest.append(f"{case} {policy} adam x.npy {k} {loss:.9g} {used:.9g} {scale:.9g} {it} {counter} 1")
        print(f"{case} step {k}: loss {loss:.6f}", file=sys.stderr)
    return traj


def main():
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    versions = (f"keras {keras.__version__} (backend jax {jax.__version__}, "
                f"jaxlib {jaxlib.__version__}, numpy {np.__version__})")
    meta = {"generator": "tests/golden/train/generate_cnn.py", "versions": versions, "date": stamp}
    os.makedirs(OUT, exist_ok=True)
    x, y = make_data()
    np.save(os.path.join(OUT, "x.npy"), x)
    np.save(os.path.join(OUT, "y.npy"), y)
    manifest = [f"# generated by tests/golden/train/generate_cnn.py with {versions} on {stamp}",
                "# one line per case and step, the fields of ../manifest.txt (README.md there)",
                "# case policy optimizer x step loss scale_used scale iterations growth_counter applied"]
    report = [f"# generated by tests/golden/train/generate_cnn.py with {versions} on {stamp}"]
    for name in MODELS:
        init = make_init(name)
        G.write_safetensors(os.path.join(OUT, f"{name}-init.safetensors"), init, dict(meta, model=name))
        n_params = sum(v.size for v in init.values())
        report.append(f"{name}: {len(init)} variables, {n_params} values")
        traj = {p: run_case(name, p, init, x, y, meta, manifest, report) for p in POLICIES}
        for p in POLICIES[1:]:
            a, b = traj["float32"], traj[p]
            dl = max(abs(float(b[k][0]) - float(a[k][0])) / abs(float(a[k][0])) for k in range(STEPS))
            dw = {n: float(np.max(np.abs(b[-1][1][n] - a[-1][1][n]))) / max(float(np.max(np.abs(a[-1][1][n]))), 1e-30)
                  for n in a[-1][1]}
            worst = max(dw, key=dw.get)
            report.append(f"{name}: {p} vs float32: max rel loss diff {dl:.3g} over the {STEPS} steps; after step "
                          f"{STEPS} max |d|/max|x| {dw[worst]:.3g} ({worst}), median over the state "
                          f"{float(np.median(list(dw.values()))):.3g}")
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(OUT, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    with open(os.path.join(OUT, "report.txt"), "w") as f:
        f.write("\n".join(report) + "\n")
    print("\n".join(report), file=sys.stderr)


if __name__ == "__main__":
    main()
