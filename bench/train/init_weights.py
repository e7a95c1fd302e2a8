#!/usr/bin/env python3
"""bench/train/init_weights.py: the peers' initial weights as safetensors,
so castor starts from the same point as torch_peer.py and keras_peer.py:
Glorot-uniform kernels drawn by common.glorot_uniform from
np.random.default_rng(seed) in layer order, zero biases, with the keys of
samples/mnist_mlp*.cast (dense_1, dense_2, dense_logits).

    init_weights.py --units U --seed S --out FILE.safetensors
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for k, v in tensors.items():
        b = np.ascontiguousarray(v, np.float32).tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    dims = [784, a.units, a.units, 10]
    t = {}
    for name, fi, fo in zip(["dense_1", "dense_2", "dense_logits"], dims[:-1], dims[1:]):
        t[name + ".kernel"] = common.glorot_uniform(rng, fi, fo)
        t[name + ".bias"] = np.zeros(fo, np.float32)
    write_safetensors(a.out, t)


if __name__ == "__main__":
    main()
