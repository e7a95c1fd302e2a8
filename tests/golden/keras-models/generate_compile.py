# SPDX-License-Identifier: Apache-2.0
"""compile-*.keras: one tiny model per optimizer configuration, for castor's
mapping of a .keras file's compile_config onto castor train's options
(frontend/keras/compile.c; tests/unit/check_keras_compile.c and the golden
cases tests/golden/dump/keras_train_*.cast and keras-errors/compile_*.cast).

Run by hand, never by CI or the build (it needs Keras and JAX):

    KERAS_BACKEND=jax python3 tests/golden/keras-models/generate_compile.py

Each file is a Sequential Dense(4 -> 3) + Softmax model under float32 (or
mixed_float16 for the LossScaleOptimizer), compiled with categorical
cross-entropy and the optimizer below; only its compile_config matters.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
from keras import optimizers as O  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
S = O.schedules

CASES = {
    # mapped onto castor_train_options
    "adamw": lambda: O.AdamW(learning_rate=0.003, weight_decay=0.01, beta_1=0.8, beta_2=0.99,
                             epsilon=1e-6, clipnorm=1.0),
    "adam_wd": lambda: O.Adam(weight_decay=0.02, global_clipnorm=2.0),
    "expdecay": lambda: O.Adam(learning_rate=S.ExponentialDecay(0.1, 100, 0.9, staircase=True),
                               clipvalue=0.5),
    "cosine": lambda: O.SGD(learning_rate=S.CosineDecay(0.01, 1000, alpha=0.1, warmup_target=0.1,
                                                        warmup_steps=50), momentum=0.9),
    "piecewise": lambda: O.RMSprop(learning_rate=S.PiecewiseConstantDecay([10, 20], [0.1, 0.01, 0.001]),
                                   epsilon=1e-5),
    "lso": lambda: O.LossScaleOptimizer(O.Adam(), initial_scale=1024.0, dynamic_growth_steps=100),
    # still errors naming the key
    "rho": lambda: O.RMSprop(rho=0.8),
    "sgd_wd": lambda: O.SGD(weight_decay=0.01),
    "inverse_time": lambda: O.Adam(learning_rate=S.InverseTimeDecay(0.1, 10, 0.5)),
}


def main():
    for name, make in CASES.items():
        policy = "mixed_float16" if name == "lso" else "float32"
        keras.mixed_precision.set_global_policy(policy)
        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3),
                                  keras.layers.Softmax(dtype="float32")], name="tiny")
        model.compile(optimizer=make(), loss="categorical_crossentropy", metrics=["accuracy"])
        model.save(os.path.join(HERE, f"compile-{name}.keras"))
        print(f"compile-{name}.keras ({policy})")
    keras.mixed_precision.set_global_policy("float32")


if __name__ == "__main__":
    main()
