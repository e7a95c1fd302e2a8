# SPDX-License-Identifier: Apache-2.0
"""bench/cpu/peers.py: the peers of bench/cpu/run.sh on the CPU.

Times the seed MLP (784 -> 4096 -> 4096 -> 10, relu, softmax) forward pass
in NumPy (+ OpenBLAS), PyTorch eager (f32, and bf16 under torch.autocast)
and jax.jit (f32, and bf16 weights and activations), and OpenBLAS sgemm
(through NumPy's float32 matmul) on the GEMM shapes. Prints one
tab-separated row per measurement: kind, peer, config, batch or shape,
median ms. Every peer is limited to the thread count given (the caller
also sets OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, OMP_WAIT_POLICY=PASSIVE).
A peer that is missing is reported on stderr and skipped.
"""
import argparse
import sys
import time

import numpy as np


def median_ms(fn, iters):
    fn()  # warm-up (and JIT compile)
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    n = len(ts)
    return ts[n // 2] if n % 2 else (ts[n // 2 - 1] + ts[n // 2]) / 2


def iters_for(batch):
    return 100 if batch <= 1 else 30 if batch <= 64 else 10 if batch <= 1024 else 5


def glorot(rng, fan_in, fan_out):
    lim = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-lim, lim, (fan_in, fan_out)).astype(np.float32)


def weights():
    rng = np.random.default_rng(0)
    dims = [784, 4096, 4096, 10]
    return [(glorot(rng, a, b), np.zeros(b, np.float32)) for a, b in zip(dims[:-1], dims[1:])]


def row(*cols):
    print("\t".join(str(c) for c in cols), flush=True)


def mlp_input(b):
    return np.random.default_rng(1).uniform(-1, 1, (b, 784)).astype(np.float32)


def numpy_mlp(ws):
    def mlp(x):
        h = np.maximum(x @ ws[0][0] + ws[0][1], 0)
        h = np.maximum(h @ ws[1][0] + ws[1][1], 0)
        z = h @ ws[2][0] + ws[2][1]
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return mlp


def bench_numpy(ws, batches):
    mlp = numpy_mlp(ws)
    for b in batches:
        x = mlp_input(b)
        row("mlp", "numpy", "f32", b, "%.4f" % median_ms(lambda: mlp(x), iters_for(b)))


def torch_mlp(ws, threads):
    """The seed MLP as a torch.nn.Sequential in eval mode, or None without torch."""
    try:
        import torch
    except ImportError as e:
        print("peers: no torch: %s" % e, file=sys.stderr)
        return None
    torch.set_num_threads(threads)
    tw = [(torch.from_numpy(w), torch.from_numpy(b)) for w, b in ws]
    lin = []
    for w, b in tw:
        m = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            m.weight.copy_(w.t())
            m.bias.copy_(b)
        lin.append(m)
    return torch.nn.Sequential(lin[0], torch.nn.ReLU(), lin[1], torch.nn.ReLU(), lin[2], torch.nn.Softmax(dim=1)).eval()


def bench_torch(ws, batches, threads):
    model = torch_mlp(ws, threads)
    if model is None:
        return
    import torch

    for b in batches:
        x = torch.from_numpy(mlp_input(b))
        with torch.inference_mode():
            row("mlp", "torch", "f32", b, "%.4f" % median_ms(lambda: model(x), iters_for(b)))

            def bf16():
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return model(x)

            row("mlp", "torch", "bf16", b, "%.4f" % median_ms(bf16, iters_for(b)))


def bench_jax(ws, batches):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        print("peers: no jax: %s" % e, file=sys.stderr)
        return

    def mlp(params, x):
        h = x
        for i, (w, b) in enumerate(params):
            h = jnp.dot(h, w, preferred_element_type=jnp.float32).astype(h.dtype) + b
            if i < 2:
                h = jnp.maximum(h, 0)
        return jax.nn.softmax(h.astype(jnp.float32), axis=1)

    f = jax.jit(mlp)
    for dt, name in ((jnp.float32, "f32"), (jnp.bfloat16, "bf16")):
        params = [(jnp.asarray(w, dt), jnp.asarray(b, dt)) for w, b in ws]
        for b in batches:
            x = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (b, 784)), dt)
            row("mlp", "jax", name, b, "%.4f" % median_ms(lambda: f(params, x).block_until_ready(), iters_for(b)))


def bench_sgemm(shapes):
    rng = np.random.default_rng(2)
    for m, k, n in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        row("gemm", "openblas", "sgemm", "%dx%dx%d" % (m, k, n), "%.4f" % median_ms(lambda: a @ b, 5))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batches", default="1,64,1024,8192")
    ap.add_argument("--gemm", default="", help="MxKxN,... for OpenBLAS sgemm")
    ap.add_argument("--only", default="numpy,torch,jax,sgemm")
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",") if b]
    only = a.only.split(",")
    ws = weights()
    if "sgemm" in only and a.gemm:
        bench_sgemm([tuple(int(v) for v in s.split("x")) for s in a.gemm.split(",")])
    if "numpy" in only:
        bench_numpy(ws, batches)
    if "torch" in only:
        bench_torch(ws, batches, a.threads)
    if "jax" in only:
        bench_jax(ws, batches)


if __name__ == "__main__":
    main()
