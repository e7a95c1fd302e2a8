#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""peers.py: the seed MLP (784 -> 4096 -> 4096 -> 10, relu, softmax) at batch
8192 and an 8192^3 GEMM in PyTorch eager and JAX/XLA, on the GPU castor
runs on. Prints one line per measurement: `peer<TAB>case<TAB>dtype<TAB>median_ms`
(or `...<TAB>n/a<TAB>reason`). Device time: CUDA events for PyTorch,
block_until_ready wall time for JAX (what jax users see), medians of --iters
runs after --warmup runs; inputs are on the device before timing, as in
castor's `run --repeat` (which times the kernels alone)."""
import argparse, statistics, sys, time

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8192)
p.add_argument("--gemm", type=int, default=8192)
p.add_argument("--iters", type=int, default=50)
p.add_argument("--warmup", type=int, default=10)
a = p.parse_args()
DIMS = [784, 4096, 4096, 10]


def out(peer, case, dtype, ms, why=""):
    print(f"{peer}\t{case}\t{dtype}\t" + (f"{ms:.4f}" if ms is not None else f"n/a\t{why}"), flush=True)


def torch_bench():
    try:
        import torch
        assert torch.cuda.is_available(), "torch sees no GPU"
    except Exception as e:  # noqa: BLE001
        for dt in ("float32", "float16", "bfloat16"):
            out("torch", "mlp", dt, None, str(e))
        out("torch", "gemm", "float16", None, str(e))
        return
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32, as in castor

    def timed(fn):
        for _ in range(a.warmup):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(a.iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); e.synchronize()
            ts.append(s.elapsed_time(e))
        return statistics.median(ts)

    g = torch.Generator(device="cuda").manual_seed(0)
    for name in ("float32", "float16", "bfloat16"):
        dt = getattr(torch, name)
        ws = [(torch.rand(i, o, device="cuda", generator=g) * 0.05).to(dt) for i, o in zip(DIMS, DIMS[1:])]
        bs = [torch.zeros(o, device="cuda", dtype=dt) for o in DIMS[1:]]
        x = torch.rand(a.batch, DIMS[0], device="cuda", generator=g).to(dt)

        @torch.inference_mode()
        def mlp():
            h = torch.relu(x @ ws[0] + bs[0])
            h = torch.relu(h @ ws[1] + bs[1])
            return torch.softmax((h @ ws[2] + bs[2]).float(), dim=-1)

        out("torch", "mlp", name, timed(mlp))
    A = torch.rand(a.gemm, a.gemm, device="cuda", dtype=torch.float16)
    B = torch.rand(a.gemm, a.gemm, device="cuda", dtype=torch.float16)
    out("torch", "gemm", "float16", timed(lambda: torch.matmul(A, B)))


def jax_bench():
    try:
        import jax, jax.numpy as jnp
        assert any(d.platform == "gpu" for d in jax.devices()), "jax sees no GPU"
    except Exception as e:  # noqa: BLE001
        for dt in ("float32", "float16", "bfloat16"):
            out("jax", "mlp", dt, None, str(e))
        out("jax", "gemm", "float16", None, str(e))
        return

    def timed(fn, *args):
        for _ in range(a.warmup):
            fn(*args).block_until_ready()
        ts = []
        for _ in range(a.iters):
            t = time.perf_counter(); fn(*args).block_until_ready(); ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts)

    key = jax.random.PRNGKey(0)
    for name in ("float32", "float16", "bfloat16"):
        dt = getattr(jnp, name)
        ks = jax.random.split(key, 4)
        ws = [(jax.random.uniform(k, (i, o)) * 0.05).astype(dt) for k, i, o in zip(ks, DIMS, DIMS[1:])]
        bs = [jnp.zeros((o,), dt) for o in DIMS[1:]]
        x = jax.random.uniform(ks[3], (a.batch, DIMS[0])).astype(dt)

        @jax.jit
        def mlp(x, ws, bs):
            prec = jax.lax.Precision.HIGHEST if name == "float32" else None
            h = jax.nn.relu(jnp.matmul(x, ws[0], precision=prec) + bs[0])
            h = jax.nn.relu(jnp.matmul(h, ws[1], precision=prec) + bs[1])
            return jax.nn.softmax((jnp.matmul(h, ws[2], precision=prec) + bs[2]).astype(jnp.float32), axis=-1)

        out("jax", "mlp", name, timed(mlp, x, ws, bs))
    A = jax.random.uniform(key, (a.gemm, a.gemm)).astype(jnp.float16)
    out("jax", "gemm", "float16", timed(jax.jit(jnp.matmul), A, A))


torch_bench()
jax_bench()
