"""bench/train/common.py: what the training peers share (NumPy only).

- Fashion-MNIST from Debian's dataset-fashion-mnist package (IDX files,
  gzipped, in /usr/share/datasets/fashion-mnist/): uint8 images scaled by
  1/255 to float32 [N, 784], labels int32 [N], as the Keras guide does.
- Keras's validation_split: the LAST floor(n * split) rows of the training
  set are the validation set, taken before any shuffling
  (keras/src/trainers/data_adapters/array_slicing.py,
  train_validation_split: split_at = floor(n * (1 - split))).
- One JSON object per line on stdout: a "config" line, one "epoch" line per
  epoch, a "test" line (see README.md beside this file).
"""
import gzip
import json
import math
import os
import platform
import struct
import sys

import numpy as np

DATA_DIR = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    if (magic >> 8) != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#x})")
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist():
    """(x_train, y_train, x_test, y_test): float32 [N,784] in [0,1], int32 [N]."""
    def part(kind, name):
        for ext in (".gz", ""):
            p = os.path.join(DATA_DIR, f"{name}-{kind}-ubyte{ext}")
            if os.path.exists(p):
                return read_idx(p)
        sys.exit(f"missing {name}-{kind}-ubyte[.gz] in {DATA_DIR}: "
                 "apt-get install dataset-fashion-mnist (or set FASHION_MNIST_DIR)")
    xs, ys = [], []
    for name in ("train", "t10k"):
        x = part("images-idx3", name)
        xs.append(x.reshape(x.shape[0], -1).astype(np.float32) / np.float32(255.0))
        ys.append(part("labels-idx1", name).astype(np.int32))
    return xs[0], ys[0], xs[1], ys[1]


def validation_split(x, y, split):
    n = x.shape[0]
    at = int(math.floor(n * (1.0 - split)))
    return x[:at], y[:at], x[at:], y[at:]


def glorot_uniform(rng, fan_in, fan_out):
    lim = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-lim, lim, (fan_in, fan_out)).astype(np.float32)


def emit(**kw):
    print(json.dumps(kw, sort_keys=False), flush=True)


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cpus_online": os.cpu_count(), "python": platform.python_version()}


def add_args(p):
    p.add_argument("--units", type=int, default=64, help="width of the two hidden layers (seed: 4096)")
    p.add_argument("--batch-size", type=int, default=128, help="seed: 8192")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--validation-split", type=float, default=0.2)
    p.add_argument("--policy", default="float32",
                   choices=["float32", "mixed_float16", "mixed_bfloat16"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop each epoch after this many steps (0: all); for quick tries only")
