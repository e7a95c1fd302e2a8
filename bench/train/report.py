#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/train/report.py: tables from the JSON lines of bench/train/run.sh.

    report.py RAW.jsonl > train-DATE.md
    report.py --castor-history H.csv --policy P --units U --batch-size B \
              --seed S [--model VARIANT] [--train-count N] [--test-line LINE]
                                               # castor's CSV -> JSON lines

The second form turns castor train's --history CSV (one row per epoch, a
header naming the columns; Keras's names: epoch, loss, accuracy, val_loss,
val_accuracy, plus whatever castor adds, e.g. time per step and the loss
scale) into the peers' "epoch" lines, and `castor evaluate`'s last output
line into a "test" line (the first number after "accuracy"). castor's
`seconds_per_sample` is the epoch's training time per training sample
(`seconds` includes validation): with --train-count N (the training rows
after the validation split) the time per step is seconds_per_sample x N /
ceil(N / batch), the peers' definition (the last step may be short).

The tables: per run, test accuracy and time per step; castor's test
accuracy against each peer's, seed by seed, with the gap of the means in
percentage points; per epoch; and, for
runs with ROUNDS (castor and the peers interleaved), each round's step
times side by side with castor's ratio to each peer.
"""
import argparse
import csv
import json
import re
import statistics
import sys


MODELS = {"small": "mlp", "seed": "mlp", "cnn": "fashion_cnn", "vit": "fashion_vit",
          "lstm": "fashion_lstm", "lstm_own": "fashion_lstm/own-init"}


def castor_lines(a):
    model = MODELS.get(a.model, a.model)
    out = [dict(kind="config", peer="castor", model=model, policy=a.policy, units=a.units,
                batch_size=a.batch_size, seed=a.seed)]
    step_ms = []
    with open(a.castor_history) as f:
        for row in csv.DictReader(f):
            r = {}
            for k, v in row.items():
                try:
                    r[k] = float(v)
                except (TypeError, ValueError):
                    r[k] = v
            ms = r.get("step_ms") or (r.get("time_per_step_s", 0) * 1e3 if "time_per_step_s" in r else None)
            if ms is None and a.train_count and isinstance(r.get("seconds_per_sample"), float):
                ms = r["seconds_per_sample"] * a.train_count / -(-a.train_count // a.batch_size) * 1e3
            if ms is None and isinstance(r.get("seconds_per_sample"), float):  # castor train --history
                # the peers' definition: the epoch's training time over its
                # steps (the last one may be short), not time per sample x batch
                if isinstance(r.get("seconds"), float) and r["seconds_per_sample"] > 0:
                    samples = round(r["seconds"] / r["seconds_per_sample"])
                    ms = r["seconds"] / max(1, -(-samples // a.batch_size)) * 1e3
                else:
                    ms = r["seconds_per_sample"] * a.batch_size * 1e3
            if ms is not None:
                step_ms.append(ms)
                r["step_ms"] = ms
            out.append(dict(kind="epoch", peer="castor", model=model, policy=a.policy, **r))
    test = dict(kind="test", peer="castor", model=model, policy=a.policy, units=a.units,
                batch_size=a.batch_size, seed=a.seed)
    m = re.search(r"accuracy[ :=]+([0-9.eE+-]+)", a.test_line or "")
    if m:
        test["test_accuracy"] = float(m.group(1))
    m = re.search(r"loss[ :=]+([0-9.eE+-]+)", a.test_line or "")
    if m:
        test["test_loss"] = float(m.group(1))
    if step_ms:
        test["step_ms_median_after_first"] = statistics.median(step_ms[1:] or step_ms)
    out.append(test)
    for o in out:
        print(json.dumps(o))


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def report(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    run = next((r for r in rows if r["kind"] == "run"), {})
    configs = [r for r in rows if r["kind"] == "config"]
    print(f"# Training benchmark (issue 10), {run.get('date', '?')}")
    print()
    print(f"- machine: {run.get('cpu', '?')}, {run.get('threads', '?')} threads for every framework; "
          f"load average at the start: {run.get('load', '?')}")
    print(f"- commit: {run.get('commit', '?')}")
    vers = sorted({f"{c['peer']} {c['version']}" + (f" (jax {c['jax']})" if "jax" in c else "")
                   for c in configs if "version" in c})
    print(f"- peers: {', '.join(vers) or 'none'}")
    runs = [r for r in rows if r["kind"] == "run"] or [run]
    for r in runs:  # several when run.sh was invoked in parts (APPEND=1)
        print(f"- command: `{r.get('command', '?')}`" + (f" (commit {r.get('commit', '?')}, {r.get('date', '?')})"
                                                         if len(runs) > 1 else ""))
    print()
    skipped = [r for r in rows if r["kind"] == "skipped"]
    # One key per run: (peer, policy, units, batch, seed), from config/test lines.
    tests = [r for r in rows if r["kind"] == "test"]
    print("## Test accuracy and time per training step")
    print()
    print("| model | units | batch | policy | peer | seeds | test accuracy (mean, min-max) | test loss | "
          "time per step, ms (median of epochs 2..) | steps skipped |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    groups = {}
    for t in tests:
        groups.setdefault((t.get("model", "mlp"), t["units"], t["batch_size"], t["policy"], t["peer"]),
                          []).append(t)
    for k in sorted(groups):
        ts = groups[k]
        acc = [t["test_accuracy"] for t in ts if "test_accuracy" in t]
        loss = [t["test_loss"] for t in ts if "test_loss" in t]
        ms = [t["step_ms_median_after_first"] for t in ts if "step_ms_median_after_first" in t]
        sk = [t.get("skipped", 0) for t in ts]
        acc_s = "n/a" if not acc else "%.2f%%" % (100 * statistics.mean(acc)) + (
            " (%.2f-%.2f)" % (100 * min(acc), 100 * max(acc)) if len(acc) > 1 else "")
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {','.join(str(t['seed']) for t in ts)} | {acc_s} | "
              f"{fmt(statistics.mean(loss) if loss else None, '.4f')} | "
              f"{fmt(statistics.median(ms) if ms else None, '.2f')} | {sum(sk)} |")
    for s in skipped:
        print(f"| {s.get('model', '')} | {s.get('units', '')} | {s.get('batch_size', '')} | {s['policy']} | "
              f"{s['peer']} | {s.get('seed', '')} | skipped: {s['reason']} | | | |")
    gaps(rows)
    rounds(rows)
    print()
    print("## Per epoch")
    print()
    print("loss and accuracy are the epoch's running means over its training steps (Keras's "
          "fit logs, weighted by batch size); val_* are evaluated after the epoch; "
          "time per step is the epoch's training steps only (epoch 1 includes compiling).")
    print()
    print("| model | units | batch | policy | peer | seed | epoch | loss | accuracy | val_loss | val_accuracy | "
          "ms per step | loss scale | skipped |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cur = {}
    for r in rows:
        if r["kind"] == "config":
            cur[r["peer"]] = r
        if r["kind"] != "epoch":
            continue
        c = cur.get(r["peer"], {})
        print(f"| {c.get('model', 'mlp')} | {c.get('units', '')} | {c.get('batch_size', '')} | {r['policy']} | {r['peer']} | "
              f"{c.get('seed', '')} | {int(r['epoch'])} | {fmt(r.get('loss'), '.4f')} | "
              f"{fmt(r.get('accuracy'), '.4f')} | {fmt(r.get('val_loss'), '.4f')} | "
              f"{fmt(r.get('val_accuracy'), '.4f')} | {fmt(r.get('step_ms'), '.2f')} | "
              f"{fmt(r.get('loss_scale'), 'g')} | {r.get('skipped', '')} |")


def gaps(rows):
    """castor's test accuracy against each peer's, seed by seed, and the
    difference of the means in percentage points (the first run of each)."""
    acc = {}
    for t in rows:
        if t["kind"] == "test" and "test_accuracy" in t:
            acc.setdefault((t.get("model", "mlp"), t["policy"]), {}).setdefault(t["peer"], {}).setdefault(
                t["seed"], t["test_accuracy"])
    lines = []
    for (model, policy), by_peer in sorted(acc.items()):
        c = by_peer.get("castor", {})
        for peer in sorted(p for p in by_peer if p != "castor"):
            seeds = sorted(set(c) & set(by_peer[peer]))
            if not seeds:
                continue
            for s in seeds:
                lines.append(f"| {model} | {policy} | {peer} | {s} | {100 * c[s]:.2f}% | "
                             f"{100 * by_peer[peer][s]:.2f}% | {100 * (c[s] - by_peer[peer][s]):+.2f} |")
            mc = statistics.mean(c[s] for s in seeds)
            mp = statistics.mean(by_peer[peer][s] for s in seeds)
            lines.append(f"| {model} | {policy} | {peer} | mean of {len(seeds)} | **{100 * mc:.2f}%** | "
                         f"**{100 * mp:.2f}%** | **{100 * (mc - mp):+.2f}** |")
    if not lines:
        return
    print()
    print("## Test accuracy: castor against each peer, seed by seed")
    print()
    print("| model | policy | peer | seed | castor | peer | castor - peer (pp) |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))


def rounds(rows):
    """castor and each peer per round (the order run.sh ran them in): the
    k-th test line of a peer for (model, policy, seed) is round k."""
    tests = [r for r in rows if r["kind"] == "test"]
    procs = [r for r in rows if r["kind"] == "proc"]
    runs = {}
    for t in tests:
        runs.setdefault((t.get("model", "mlp"), t["policy"], t["seed"]), {}).setdefault(t["peer"], []).append(t)
    pk = {}
    for p in procs:
        pk.setdefault((MODELS.get(p["variant"], p["variant"]), p["policy"], p["seed"], p["peer"]), []).append(p)
    if not any(len(v) > 1 for g in runs.values() for v in g.values()) and not procs:
        return
    print()
    print("## Training step time per round")
    print()
    print("castor: the epoch's training time over its steps (castor compiles before the epoch); "
          "the peers: steps 2..n of the epoch (the first step holds XLA's compile for Keras), "
          "the median over epochs 2.. when there are several. CPU: process CPU time over the same "
          "steps (peers only: castor does not report it); process: the whole process's wall and "
          "user+sys CPU seconds (load, compile, train, validate; the peers also test, castor "
          "tests in a second process). Ratio: castor's step time / the peer's.")
    print()
    print("| model | policy | seed | round | peer | ms per step | CPU ms per step | process wall s | "
          "process CPU s | castor / peer |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    def step(t):
        if t["peer"] != "castor" and t.get("steady_step_ms") is not None:
            return t["steady_step_ms"]
        return t.get("step_ms_median_after_first")
    for (model, policy, seed), g in runs.items():
        for i in range(max(len(v) for v in g.values())):
            c = g.get("castor", [])
            cms = step(c[i]) if i < len(c) else None
            for peer in sorted(g, key=lambda p: (p != "castor", p)):
                if i >= len(g[peer]):
                    continue
                t = g[peer][i]
                ms = step(t)
                pr = pk.get((model, policy, seed, peer), [])
                pr = pr[i] if i < len(pr) else {}
                ratio = "" if peer == "castor" or not cms or not ms else "%.2f" % (cms / ms)
                cpu = t.get("steady_cpu_ms") if peer != "castor" else None
                cpu_s = (pr.get("user_s", 0) + pr.get("sys_s", 0)) if pr else None
                print(f"| {model} | {policy} | {seed} | {i + 1} | {peer} | {fmt(ms, '.1f')} | "
                      f"{fmt(cpu, '.1f')} | {fmt(pr.get('wall_s'), '.1f')} | {fmt(cpu_s, '.1f')} | {ratio} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw", nargs="?")
    ap.add_argument("--castor-history")
    ap.add_argument("--policy")
    ap.add_argument("--units", type=int)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--test-line", default="")
    ap.add_argument("--model", default="mlp", help="run.sh's variant (small, seed, cnn, vit) or a model name")
    ap.add_argument("--train-count", type=int, default=0,
                    help="training rows after the validation split (time per step from seconds_per_sample)")
    a = ap.parse_args()
    if a.castor_history:
        castor_lines(a)
    elif a.raw:
        report(a.raw)
    else:
        ap.error("give RAW.jsonl or --castor-history")


if __name__ == "__main__":
    main()
