#!/usr/bin/env python3
"""bench/train/torch_peer.py: the seed experiment in PyTorch eager, with
Keras's recipe written out by hand so the numbers are comparable:

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
    xtr, ytr, xva, yva = common.validation_split(xtr, ytr, a.validation_split)
    dims = [784, a.units, a.units, 10]
    params = []
    for fi, fo in zip(dims[:-1], dims[1:]):
        params.append(torch.from_numpy(common.glorot_uniform(rng, fi, fo)).requires_grad_())
        params.append(torch.zeros(fo, requires_grad=True))
    vel = [torch.zeros_like(p) for p in params]

    def forward(x):
        h = x
        for i in range(3):
            h = h @ params[2 * i] + params[2 * i + 1]
            if i < 2:
                h = torch.relu(h)
        return h

    def run_forward(x):
        if autocast_dtype is None:
            return forward(x)
        with torch.autocast("cpu", dtype=autocast_dtype):
            return forward(x)

    def evaluate(x, y):
        tot_loss, tot_acc = 0.0, 0.0
        with torch.no_grad():
            for s in range(0, x.shape[0], a.batch_size):
                xb, yb = torch.from_numpy(x[s:s + a.batch_size]), torch.from_numpy(y[s:s + a.batch_size])
                loss, p = keras_sparse_ce(run_forward(xb), yb)
                tot_loss += float(loss) * xb.shape[0]
                tot_acc += float((p.argmax(1) == yb).float().sum())
        return tot_loss / x.shape[0], tot_acc / x.shape[0]

    common.emit(kind="config", peer="torch", version=torch.__version__, policy=a.policy,
                units=a.units, batch_size=a.batch_size, epochs=a.epochs, seed=a.seed,
                threads=torch.get_num_threads(), train=int(xtr.shape[0]), val=int(xva.shape[0]),
                test=int(xte.shape[0]), **common.machine())
    lr, rho = 1e-3, 0.9
    step_ms_all = []
    skipped_total = 0
    for epoch in range(1, a.epochs + 1):
        perm = rng.permutation(xtr.shape[0])
        seen, loss_sum, acc_sum, steps, skipped = 0, 0.0, 0.0, 0, 0
        t0 = time.perf_counter()
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
                with torch.no_grad():
                    for q, g, v in zip(params, grads, vel):
                        v.mul_(rho).addcmul_(g, g, value=1.0 - rho)
                        q.sub_(lr * g / torch.sqrt(v + EPS))
            else:
                skipped += 1
            if loss_scale is not None:
                loss_scale = next_scale
            n = xb.shape[0]
            seen += n
            loss_sum += float(loss) * n
            acc_sum += float((p.argmax(1) == yb).float().sum())
            steps += 1
        t_train = time.perf_counter() - t0
        val_loss, val_acc = evaluate(xva, yva)
        step_ms = t_train / steps * 1e3
        step_ms_all.append(step_ms)
        skipped_total += skipped
        common.emit(kind="epoch", peer="torch", policy=a.policy, epoch=epoch, steps=steps,
                    loss=loss_sum / seen, accuracy=acc_sum / seen, val_loss=val_loss,
                    val_accuracy=val_acc, train_s=t_train, step_ms=step_ms,
                    epoch_s=time.perf_counter() - t0, skipped=skipped, loss_scale=loss_scale)
    test_loss, test_acc = evaluate(xte, yte)
    common.emit(kind="test", peer="torch", policy=a.policy, units=a.units, batch_size=a.batch_size,
                seed=a.seed, test_loss=test_loss, test_accuracy=test_acc,
                step_ms_median_after_first=float(np.median(step_ms_all[1:] or step_ms_all)),
                skipped=skipped_total)


if __name__ == "__main__":
    main()
