#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/train/torch_peer.py: the training benchmark in PyTorch eager, with
Keras's recipe written out by hand so the numbers are comparable.

--model fashion_cnn / fashion_vit (samples/fashion_cnn.cast,
samples/fashion_vit.cast): every weight from --init (init_weights.py's file,
the one castor and keras_peer.py load, in Keras's layouts: HWIO convolution
kernels are permuted to torch's OIHW, the flatten is taken in NHWC order as
Keras's, MultiHeadAttention's [D, heads, key_dim] kernels are reshaped to
[D, D]); Keras's Adam written out (m = m + (g - m)(1 - b1);
v = v + (g^2 - v)(1 - b2); w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + 1e-7):
torch.optim.Adam adds epsilon to the bias-corrected root instead), with
torch._foreach_* ops; LayerNormalization's epsilon 1e-3, exact (erf) GELU,
attention softmax in float32, dropout 0.5 (its masks differ from Keras's and
castor's by design). Data, loss and metrics as below. For --model mlp (the
seed experiment):

- 784 -> Dense(units, relu) -> Dense(units, relu) -> Dense(10) -> softmax,
  Glorot-uniform kernels and zero biases (Keras's defaults);
- loss: Keras's sparse categorical cross-entropy on probabilities, in
  float32: p = softmax(logits); p /= sum(p); clip(p, 1e-7, 1 - 1e-7);
  mean of -log p[y] over the batch;
- optimizer: Keras's RMSprop, not torch.optim.RMSprop (which puts epsilon
  outside the square root): v = 0.9 v + 0.1 g^2; w -= 1e-3 g / sqrt(v + 1e-7);
- data: Keras's validation_split (the last 20% of the training set, before
  shuffling), a fresh seeded permutation of the rest every epoch, the last
  partial batch kept; epoch loss/accuracy are batch-size-weighted running
  means over the epoch's steps, as Keras's fit reports them; val_* are
  evaluated after the epoch, in batches of the same size.

Policies: float32; mixed_bfloat16 = torch.autocast("cpu", bfloat16) around
the forward pass (float32 weights, bf16 matmuls; the loss in float32);
mixed_float16 needs float16 CPU autocast (recent torch; the dynamic loss
scale is Keras's, written out); where autocast falls back to float32 the script prints a "skipped" line and exits 0.

Prints JSON lines (common.py): config, one per epoch, test.
"""
import argparse
import sys
import time

import numpy as np
import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
import common  # noqa: E402

EPS = 1e-7


def keras_sparse_ce(logits, y):
    p = torch.softmax(logits.float(), dim=1)
    p = p / p.sum(dim=1, keepdim=True)
    p = p.clamp(EPS, 1.0 - EPS)
    return -torch.log(p.gather(1, y.view(-1, 1).long())).mean(), p


def cnn_forward(p, x, training):
    """samples/fashion_cnn.cast on NHWC x [N, 28, 28, 1]."""
    F = torch.nn.functional
    h = x.permute(0, 3, 1, 2)
    h = F.max_pool2d(torch.relu(F.conv2d(h, p["conv2d.kernel"].permute(3, 2, 0, 1), p["conv2d.bias"])), 2)
    h = F.max_pool2d(torch.relu(F.conv2d(h, p["conv2d_1.kernel"].permute(3, 2, 0, 1), p["conv2d_1.bias"])), 2)
    h = h.permute(0, 2, 3, 1).flatten(1)  # Keras's Flatten of NHWC
    h = F.dropout(h, 0.5, training)
    return h @ p["dense.kernel"] + p["dense.bias"]


def vit_forward(p, x, training):
    """samples/fashion_vit.cast on x [N, 28, 28]: pre-norm blocks, 4 heads of 16."""
    F = torch.nn.functional
    n, t, d, heads, kd = x.shape[0], 28, 64, 4, 16

    def ln(h, k):
        return F.layer_norm(h, (d,), p[k + ".gamma"], p[k + ".beta"], eps=1e-3)

    def proj(h, k):  # EinsumDense [D, heads, kd] -> [N, heads, T, kd]
        w, b = p[k + ".kernel"].reshape(d, heads * kd), p[k + ".bias"].reshape(heads * kd)
        return (h @ w + b).view(n, t, heads, kd).transpose(1, 2)

    h = x @ p["patch_projection.kernel"] + p["patch_projection.bias"]
    h = h + p["position.embeddings"][:t]
    for b in ("block1", "block2"):
        a = ln(h, b + "_norm1")
        q = proj(a, b + "_attention.query") * (1.0 / kd ** 0.5)
        k = proj(a, b + "_attention.key")
        v = proj(a, b + "_attention.value")
        att = torch.softmax((q @ k.transpose(-1, -2)).float(), dim=-1).to(v.dtype)
        o = (att @ v).transpose(1, 2).reshape(n, t, heads * kd)
        o = o @ p[b + "_attention.attention_output.kernel"].reshape(heads * kd, d) \
            + p[b + "_attention.attention_output.bias"]
        h = h + o
        m = F.gelu(ln(h, b + "_norm2") @ p[b + "_mlp1.kernel"] + p[b + "_mlp1.bias"])
        h = h + (m @ p[b + "_mlp2.kernel"] + p[b + "_mlp2.bias"])
    h = ln(h, "final_norm").float().mean(dim=1)
    return h @ p["classifier.kernel"] + p["classifier.bias"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_args(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)

    autocast_dtype, loss_scale = None, None
    if a.policy == "mixed_bfloat16":
        autocast_dtype = torch.bfloat16
    elif a.policy == "mixed_float16":
        try:
            with torch.autocast("cpu", dtype=torch.float16):
                ok = torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == torch.float16
        except Exception:  # noqa: BLE001 - any failure means "not supported here"
            ok = False
        if not ok:
            common.emit(kind="skipped", peer="torch", version=torch.__version__, policy=a.policy,
                        reason="this torch has no float16 CPU autocast (torch.autocast('cpu', "
                               "dtype=torch.float16) falls back to float32)")
            return
        autocast_dtype = torch.float16
        loss_scale = 2.0 ** 15  # Keras's LossScaleOptimizer, written out below
    growth = 0

    xtr, ytr, xte, yte = common.load_fashion_mnist()
    xtr, ytr = common.subset(xtr, ytr, a.train_samples)
    xte, yte = common.subset(xte, yte, a.test_samples)
    xtr, ytr, xva, yva = common.validation_split(xtr, ytr, a.validation_split)
    training = [False]
    if a.model == "mlp":
        dims = [784, a.units, a.units, 10]
        params = []
        for fi, fo in zip(dims[:-1], dims[1:]):
            params.append(torch.from_numpy(common.glorot_uniform(rng, fi, fo)).requires_grad_())
            params.append(torch.zeros(fo, requires_grad=True))

        def forward(x):
            h = x
            for i in range(3):
                h = h @ params[2 * i] + params[2 * i + 1]
                if i < 2:
                    h = torch.relu(h)
            return h
    else:
        if not a.init:
            sys.exit(f"--model {a.model} needs --init (bench/train/init_weights.py)")
        init = common.read_safetensors(a.init)
        import init_weights  # noqa: E402 - beside this file, on sys.path
        want = {k: tuple(shape) for k, shape, _ in init_weights.spec(a.model)}
        for k, shape in want.items():
            if k not in init:
                sys.exit(f"{a.init}: no weight {k} for {a.model}")
            if tuple(init[k].shape) != shape:
                sys.exit(f"{a.init}: {k} has shape {list(init[k].shape)}, {a.model} needs {list(shape)}")
        if set(init) - set(want):
            sys.exit(f"{a.init}: weights {a.model} does not have: {', '.join(sorted(set(init) - set(want)))}")
        byname = {k: torch.from_numpy(v).requires_grad_() for k, v in init.items()}
        params = list(byname.values())
        shape = (-1, 28, 28, 1) if a.model == "fashion_cnn" else (-1, 28, 28)
        xtr, xva, xte = xtr.reshape(shape), xva.reshape(shape), xte.reshape(shape)
        net = cnn_forward if a.model == "fashion_cnn" else vit_forward
        a.units = 0

        def forward(x):
            return net(byname, x, training[0])
    vel = [torch.zeros_like(p) for p in params]
    mom = [torch.zeros_like(p) for p in params]
    adam_t = [0]

    def run_forward(x):
        if autocast_dtype is None:
            return forward(x)
        with torch.autocast("cpu", dtype=autocast_dtype):
            return forward(x)

    def apply(grads):
        with torch.no_grad():
            if a.model == "mlp":  # Keras's RMSprop
                for q, g, v in zip(params, grads, vel):
                    v.mul_(rho).addcmul_(g, g, value=1.0 - rho)
                    q.sub_(lr * g / torch.sqrt(v + EPS))
                return
            adam_t[0] += 1  # Keras's Adam
            b1, b2, t = 0.9, 0.999, adam_t[0]
            alpha = lr * (1 - b2 ** t) ** 0.5 / (1 - b1 ** t)
            torch._foreach_lerp_(mom, grads, 1 - b1)
            torch._foreach_mul_(vel, b2)
            torch._foreach_addcmul_(vel, grads, grads, value=1 - b2)
            denom = torch._foreach_sqrt(vel)
            torch._foreach_add_(denom, EPS)
            torch._foreach_addcdiv_(params, mom, denom, value=-alpha)

    def evaluate(x, y):
        tot_loss, tot_acc = 0.0, 0.0
        with torch.no_grad():
            for s in range(0, x.shape[0], a.batch_size):
                xb, yb = torch.from_numpy(x[s:s + a.batch_size]), torch.from_numpy(y[s:s + a.batch_size])
                loss, p = keras_sparse_ce(run_forward(xb), yb)
                tot_loss += float(loss) * xb.shape[0]
                tot_acc += float((p.argmax(1) == yb).float().sum())
        return tot_loss / x.shape[0], tot_acc / x.shape[0]

    common.emit(kind="config", peer="torch", model=a.model, version=torch.__version__, policy=a.policy,
                units=a.units, batch_size=a.batch_size, epochs=a.epochs, seed=a.seed,
                threads=torch.get_num_threads(), train=int(xtr.shape[0]), val=int(xva.shape[0]),
                test=int(xte.shape[0]), **common.machine())
    lr, rho = 1e-3, 0.9
    rows = []
    skipped_total = 0
    for epoch in range(1, a.epochs + 1):
        perm = rng.permutation(xtr.shape[0])
        seen, loss_sum, acc_sum, steps, skipped = 0, 0.0, 0.0, 0, 0
        training[0] = True
        t0, c0 = time.perf_counter(), time.process_time()
        t1 = c1 = None
        for s in range(0, xtr.shape[0], a.batch_size):
            if a.max_steps and steps >= a.max_steps:
                break
            idx = perm[s:s + a.batch_size]
            xb, yb = torch.from_numpy(xtr[idx]), torch.from_numpy(ytr[idx])
            loss, p = keras_sparse_ce(run_forward(xb), yb)
            for q in params:
                q.grad = None
            if loss_scale is not None:
                # Keras's LossScaleOptimizer: the finite check on the scaled
                # gradients, then unscale and apply, or skip and halve.
                (loss * loss_scale).backward()
                finite = all(bool(torch.isfinite(q.grad).all()) for q in params)
                grads = [q.grad / loss_scale for q in params]
                if finite:
                    growth += 1
                    if growth == 2000:
                        growth, next_scale = 0, loss_scale * 2
                    else:
                        next_scale = loss_scale
                else:
                    growth, next_scale = 0, loss_scale / 2
            else:
                loss.backward()
                grads = [q.grad for q in params]
                finite = True
            if finite:
                apply(grads)
            else:
                skipped += 1
            if loss_scale is not None:
                loss_scale = next_scale
            n = xb.shape[0]
            seen += n
            loss_sum += float(loss) * n
            acc_sum += float((p.argmax(1) == yb).float().sum())
            steps += 1
            if steps == 1:
                t1, c1 = time.perf_counter(), time.process_time()
        t_end, c_end = time.perf_counter(), time.process_time()
        t_train = t_end - t0
        training[0] = False
        val_loss, val_acc = evaluate(xva, yva)
        skipped_total += skipped
        row = dict(epoch=epoch, steps=steps, loss=loss_sum / seen, accuracy=acc_sum / seen,
                   val_loss=val_loss, val_accuracy=val_acc, train_s=t_train,
                   step_ms=t_train / steps * 1e3, cpu_ms=(c_end - c0) / steps * 1e3,
                   **common.steady(steps, t1, t_end, c1, c_end),
                   epoch_s=time.perf_counter() - t0, skipped=skipped, loss_scale=loss_scale)
        rows.append(row)
        common.emit(kind="epoch", peer="torch", model=a.model, policy=a.policy, **row)
    test_loss, test_acc = evaluate(xte, yte)
    common.emit(kind="test", peer="torch", model=a.model, policy=a.policy, units=a.units,
                batch_size=a.batch_size, seed=a.seed, test_loss=test_loss, test_accuracy=test_acc,
                **common.summary(rows), skipped=skipped_total)


if __name__ == "__main__":
    main()
