#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""keras_layers.py: where castor's and Keras's results part, layer by layer.

`probe` turns a .keras model into one whose outputs are every layer's output
(multi-output Functional models over the same layers and weights, at most 60
outputs each as castor takes 64, saved once as DIR/probeK.keras and reused, so
every run reads the same files), predicts it
with Keras and, with --castor, runs it through `castor run` (one --output per
layer), and saves each side's per-layer results as DIR/TAG.npz (float32).
`compare` prints, in the model's order, each layer's normalized max error
max|a - b| / max|b| between two such files (and a third's, if given, against
the same b), so the first layer where they part shows.

  /tmp/kvenv/bin/python tests/real/keras_layers.py probe MODEL.keras X.npy DIR --tag jax \\
      [--castor build/castor --castor-tag castor]
  XLA_FLAGS=--xla_allow_excess_precision=false /tmp/kvenv/bin/python ... --tag jax-noexcess
  /tmp/tvenv/bin/python tests/real/keras_layers.py probe MODEL.keras X.npy DIR --backend torch --tag torch
  python3 tests/real/keras_layers.py compare DIR/castor.npz DIR/jax.npz [DIR/torch.npz] [--all]

A model output under a mixed policy is float32 in castor (difference (b) of
docs/keras.md) and a Conv2D read only by BatchNormalizations keeps its float32
sums (g): probing the convolutions would change castor's program, so layers
whose output only BatchNormalizations read are not probed, and `compare`
shows whether a side's final output is bit for bit the unprobed model's
(--a-full / --b-full Y.npy): more outputs may change XLA's fusions too.
Not part of ctest: it needs Keras from PyPI.
"""
import argparse
import os
import subprocess
import sys

import numpy as np


def probe_layers(model):
    """The layers worth an output, in the model's order: not the inputs, not those only BN reads."""
    readers = {}
    for layer in model.layers:
        for node in layer._inbound_nodes:
            for t in node.input_tensors:
                src = t._keras_history.operation
                readers.setdefault(id(src), []).append(type(layer).__name__)
    out = []
    for layer in model.layers:
        if type(layer).__name__ == "InputLayer":
            continue
        r = readers.get(id(layer), [])
        if r and all(c == "BatchNormalization" for c in r):
            continue
        out.append(layer)
    return out


CHUNK = 60  # castor takes at most 64 outputs a model


def probe(args):
    os.environ["KERAS_BACKEND"] = args.backend
    import keras
    names_path = os.path.join(args.dir, "probe.names")
    if not os.path.exists(names_path):
        model = keras.saving.load_model(args.model)
        layers = probe_layers(model)
        for k in range(0, len(layers), CHUNK):
            part = layers[k:k + CHUNK]
            keras.Model(model.inputs, [l.output for l in part], name=f"probe{k // CHUNK}").save(
                os.path.join(args.dir, f"probe{k // CHUNK}.keras"))
        with open(names_path, "w") as f:
            f.write("\n".join(l.name for l in layers) + "\n")
    names = open(names_path).read().split()
    x = np.load(args.input)
    keras_out, castor_out = {}, {}
    for k in range(0, len(names), CHUNK):
        part = names[k:k + CHUNK]
        path = os.path.join(args.dir, f"probe{k // CHUNK}.keras")
        ys = keras.saving.load_model(path).predict(x, verbose=0)
        ys = ys if isinstance(ys, (list, tuple)) else [ys]
        keras_out.update({n: np.asarray(y, dtype=np.float32) for n, y in zip(part, ys)})
        if args.castor:
            outs = [os.path.join(args.dir, f"castor.{i}.npy") for i in range(len(part))]
            cmd = [args.castor, "run", path, "--input", args.input]
            for o in outs:
                cmd += ["--output", o]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"castor run {path}: {r.stderr.strip()[:2000]}")
            castor_out.update({n: np.load(o) for n, o in zip(part, outs)})
            for o in outs:
                os.remove(o)
    np.savez(os.path.join(args.dir, args.tag + ".npz"), **keras_out)
    if args.castor:
        np.savez(os.path.join(args.dir, args.castor_tag + ".npz"), **castor_out)


def err(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def compare(args):
    a, b = np.load(args.a), np.load(args.b)
    c = np.load(args.c) if args.c else None
    names = list(b.files)
    head = f"{'layer':40s} {os.path.basename(args.a)} vs {os.path.basename(args.b)}"
    if c is not None:
        head += f"   {os.path.basename(args.c)} vs {os.path.basename(args.b)}"
    print(head)
    last = None
    for n in names:
        e = err(a[n], b[n])
        line = f"{n:40s} {e:.1e}" + (f"   {err(c[n], b[n]):.1e}" if c is not None else "")
        if args.all or last is None or abs(e - last) > 0.5 * max(last, 1e-30) or n == names[-1]:
            print(line)  # without --all only where the error moves by half or more
        last = e
    for label, path, got in (("a", args.a_full, a), ("b", args.b_full, b)):
        if path:  # did probing change the program? (more outputs: other fusions, other casts)
            full = np.load(path)
            same = np.array_equal(full, got[names[-1]])
            print(f"{label}: its last probe output {'equals' if same else 'DIFFERS FROM'} the unprobed "
                  f"model's ({err(got[names[-1]], full):.1e})")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe")
    p.add_argument("model")
    p.add_argument("input")
    p.add_argument("dir")
    p.add_argument("--tag", required=True)
    p.add_argument("--backend", default="jax", choices=["jax", "torch"])
    p.add_argument("--castor")
    p.add_argument("--castor-tag", default="castor")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("c", nargs="?")
    c.add_argument("--all", action="store_true")
    c.add_argument("--a-full", help="the unprobed model's output for a's side (.npy)")
    c.add_argument("--b-full", help="the same for b's side")
    args = ap.parse_args()
    if args.cmd == "probe":
        os.makedirs(args.dir, exist_ok=True)
        probe(args)
    else:
        compare(args)


if __name__ == "__main__":
    sys.exit(main())
