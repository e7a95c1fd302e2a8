# SPDX-License-Identifier: Apache-2.0
"""Keras 3 loading the .keras files castor writes (castor train --save
OUT.keras), recorded once in saved-by-castor.txt beside this script.

Run by hand, never by CI or the build (it needs Keras and JAX):

    KERAS_BACKEND=jax python3 tests/golden/keras-models/generate_saved.py build/castor

For each model below castor trains two epochs (Adam from the file's
compile_config; a LossScaleOptimizer under mixed_float16), saves OUT.keras
and runs it on the inputs (castor run). Keras 3 then loads OUT.keras
(load_model, compile=True) and the record says, per file:
  - every warning Keras gave while loading (none expected: a mismatched
    optimizer would say "Skipping variable loading for optimizer");
  - max|keras.predict - castor run| / max|keras.predict| against the bound
    of the policy (docs/keras.md: 1e-6 float32, 2e-3 float16, 2e-2
    bfloat16), and whether it is within it;
  - the optimizer's iterations Keras loaded (castor's steps) and, after one
    more epoch of model.fit in Keras, its iterations and warnings: fit
    resumes from castor's optimizer state.
"""

import io
import os
import subprocess
import sys
import tempfile
import warnings

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import keras  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BOUND = {"float32": 1e-6, "float16": 2e-3, "mixed_float16": 2e-3, "bfloat16": 2e-2, "mixed_bfloat16": 2e-2}
MODELS = [(f"seq-{p}.keras", p) for p in BOUND] + [("compile-adamw.keras", "float32"),
                                                    ("compile-lso.keras", "mixed_float16")]


def main():
    castor = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp()
    lines = [f"# Keras {keras.__version__} ({keras.backend.backend()}) loading castor's .keras files "
             f"(generate_saved.py)"]
    rng = np.random.default_rng(3)
    failed = 0
    for name, policy in MODELS:
        src = os.path.join(HERE, name)
        n_in = 10 if name.startswith("seq") else 4
        n_out = 5 if name.startswith("seq") else 3
        x = rng.standard_normal((48, n_in)).astype("float32")
        y = np.eye(n_out, dtype="float32")[rng.integers(0, n_out, 48)]
        xp, yp = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
        np.save(xp, x), np.save(yp, y)
        out = os.path.join(work, "out.keras")
        subprocess.run([castor, "train", src, "--x", xp, "--y", yp, "--epochs", "2", "--batch-size", "16",
                        "--save", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pred = os.path.join(work, "pred.npy")
        subprocess.run([castor, "run", out, "--input", xp, "--output", pred], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ours = np.load(pred)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            model = keras.saving.load_model(out)
        load_warn = [str(m.message) for m in w]
        theirs = np.asarray(model.predict(x, verbose=0), dtype="float32")
        err = float(np.abs(theirs - ours).max() / np.abs(theirs).max())
        iters = int(model.optimizer.iterations)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            model.fit(x, y, epochs=1, batch_size=16, verbose=0)
        fit_warn = [str(m.message) for m in w]
        ok = err <= BOUND[policy] and not load_warn and iters == 6 and int(model.optimizer.iterations) == 9
        failed += not ok
        lines.append(f"{name} ({policy}): predict error {err:.3g} (bound {BOUND[policy]:g}); "
                     f"load warnings {load_warn or 'none'}; optimizer iterations loaded {iters} (castor: 6), "
                     f"after one more epoch of fit {int(model.optimizer.iterations)}; fit warnings "
                     f"{fit_warn or 'none'}: {'ok' if ok else 'FAILED'}")
        print(lines[-1])
    with open(os.path.join(HERE, "saved-by-castor.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
