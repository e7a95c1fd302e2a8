#!/usr/bin/env python3
"""bench/gpu/train_peers.py: one training step's time in PyTorch AMP or
Keras 3 on JAX, on the GPU, for bench/gpu/train.sh. Prints one line:
`peer<TAB>model<TAB>policy<TAB>round<TAB>median_ms` (n/a and a reason on
stderr when the peer cannot run).

Models (the weights drawn by bench/train/init_weights.py, seed 0, the same
draw castor's samples get there): seed and mnist_mlp (784-4096-4096-10,
relu, softmax; RMSprop), fashion_cnn and fashion_vit (samples/*.cast's, as
bench/train/torch_peer.py and keras_peer.py write them; Adam). Loss: sparse
categorical cross-entropy on the float32 softmax.

torch: parameters in float32 on the GPU, torch.optim.RMSprop / Adam
(foreach); mixed_float16 and mixed_bfloat16 are torch.autocast("cuda") with
that dtype, float16 with torch.cuda.amp.GradScaler (dynamic loss scale, as
Keras's and castor's); float32 without TF32. Time: CUDA events around each
step (zero_grad, forward, backward, step), the batch already on the device.

keras: Keras 3 on JAX with the policy set globally, model.compile(jit_compile=True),
train_on_batch on device arrays; wall time per call until the updated loss
is ready (what a user of fit sees per step, without data loading).
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))

ap = argparse.ArgumentParser()
ap.add_argument("--peer", choices=["torch", "keras"], required=True)
ap.add_argument("--model", choices=["seed", "mnist_mlp", "fashion_cnn", "fashion_vit"], required=True)
ap.add_argument("--policy", choices=["float32", "mixed_float16", "mixed_bfloat16"], required=True)
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--round", type=int, default=1)
a = ap.parse_args()

import numpy as np  # noqa: E402

import init_weights  # noqa: E402

MLP = a.model in ("seed", "mnist_mlp")
SHAPE = {"fashion_cnn": (28, 28, 1), "fashion_vit": (28, 28)}.get(a.model, (784,))
rng = np.random.default_rng(1)
X = rng.random((a.batch,) + SHAPE, dtype=np.float32)
Y = rng.integers(0, 10, a.batch).astype(np.int32)
W = init_weights.draw("mlp", 0, 4096) if MLP else init_weights.draw(a.model, 0)


def report(times_ms):
    print(f"{a.peer}\t{a.model}\t{a.policy}\t{a.round}\t{statistics.median(times_ms):.4f}", flush=True)


def run_torch():
    import torch
    import torch_peer

    assert torch.cuda.is_available(), "torch sees no GPU"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    p = {k: torch.tensor(v, device=dev, requires_grad=True) for k, v in W.items()}
    x, y = torch.tensor(X, device=dev), torch.tensor(Y, device=dev)

    def forward(xb):
        if MLP:
            h = torch.relu(xb @ p["dense_1.kernel"] + p["dense_1.bias"])
            h = torch.relu(h @ p["dense_2.kernel"] + p["dense_2.bias"])
            return h @ p["dense_logits.kernel"] + p["dense_logits.bias"]
        return (torch_peer.cnn_forward if a.model == "fashion_cnn" else torch_peer.vit_forward)(p, xb, True)

    params = list(p.values())
    opt = (torch.optim.RMSprop(params, lr=1e-3, alpha=0.9, eps=1e-7, foreach=True) if MLP
           else torch.optim.Adam(params, lr=1e-3, eps=1e-7, foreach=True))
    dt = {"mixed_float16": torch.float16, "mixed_bfloat16": torch.bfloat16}.get(a.policy)
    scaler = torch.cuda.amp.GradScaler(enabled=dt == torch.float16)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dt or torch.float32, enabled=dt is not None):
            loss, _ = torch_peer.keras_sparse_ce(forward(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(a.steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    report(ts)


def run_keras():
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import jax
    import keras
    from keras import layers

    assert any(d.platform == "gpu" for d in jax.devices()), "jax sees no GPU"
    keras.mixed_precision.set_global_policy(a.policy)
    if MLP:
        inp = keras.Input(shape=(784,))
        h = layers.Dense(4096, activation="relu", name="dense_1")(inp)
        h = layers.Dense(4096, activation="relu", name="dense_2")(h)
        h = layers.Dense(10, name="dense_logits")(h)
        model = keras.Model(inp, layers.Activation("softmax", dtype="float32")(h))
        for v in model.trainable_weights:
            v.assign(W[v.path.replace("/", ".")])
        opt = keras.optimizers.RMSprop(1e-3)
    else:
        import keras_peer

        model = keras_peer.build_cnn() if a.model == "fashion_cnn" else keras_peer.build_vit()
        for v in model.trainable_weights:
            v.assign(W[v.path.replace("/", ".")])
        opt = keras.optimizers.Adam(1e-3)
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", jit_compile=True)
    x, y = jax.device_put(X), jax.device_put(Y)

    def step():
        jax.block_until_ready(model.train_on_batch(x, y, return_dict=False))

    for _ in range(a.warmup):
        step()
    ts = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        ts.append((time.perf_counter() - t0) * 1e3)
    report(ts)


try:
    run_torch() if a.peer == "torch" else run_keras()
except Exception as e:  # noqa: BLE001
    print(f"{a.peer} {a.model} {a.policy}: {e}", file=sys.stderr)
    print(f"{a.peer}\t{a.model}\t{a.policy}\t{a.round}\tn/a", flush=True)
