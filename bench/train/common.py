# SPDX-License-Identifier: Apache-2.0
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
import struct
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


def subset(x, y, n):
    """The first n rows (0: all), as Keras would see a smaller dataset."""
    if n and n < x.shape[0]:
        return x[:n], y[:n]
    return x, y


def keras_fans(shape):
    """Keras's compute_fans: rank 2 (in, out); higher ranks (a convolution's
    HWIO kernel, MultiHeadAttention's [D, heads, key_dim]) multiply the
    leading dimensions into both fans."""
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    rf = 1
    for d in shape[:-2]:
        rf *= d
    return shape[-2] * rf, shape[-1] * rf


def glorot_uniform_shape(rng, shape):
    fan_in, fan_out = keras_fans(shape)
    lim = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-lim, lim, shape).astype(np.float32)


def orthogonal(rng, shape):
    """Keras's Orthogonal initializer (gain 1) with NumPy's generator: QR of a
    standard-normal [max, min] matrix, Q's columns signed by R's diagonal,
    transposed when the tensor has fewer rows than columns (an LSTM's
    [units, 4 units] recurrent kernel: orthonormal rows)."""
    rows, cols = shape
    a = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    return (q.T if rows < cols else q).astype(np.float32)


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


def read_safetensors(path):
    """{key: float32 array} of an F32-only safetensors file (what
    init_weights.py writes)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    if len(data) < 8:
        sys.exit(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    n, = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + n]) if 8 + n <= len(data) else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        sys.exit(f"{path}: not a safetensors file (no JSON header of {n} bytes after byte 8)")
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        try:
            if v["dtype"] != "F32":
                sys.exit(f"{path}: {k}: dtype {v['dtype']}, expected F32")
            a, b = v["data_offsets"]
            if not 0 <= a <= b <= len(data) - 8 - n:
                sys.exit(f"{path}: {k}: data_offsets [{a}, {b}] outside the file's {len(data) - 8 - n} data bytes")
            out[k] = np.frombuffer(data[8 + n + a:8 + n + b], np.float32).reshape(v["shape"]).copy()
        except (KeyError, TypeError, ValueError) as e:
            sys.exit(f"{path}: {k}: bad tensor entry ({e})")
    return out


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
    p.add_argument("--model", default="mlp", choices=["mlp", "fashion_cnn", "fashion_vit", "fashion_lstm"],
                   help="mlp: samples/mnist_mlp*.cast (RMSprop); fashion_cnn, fashion_vit, "
                        "fashion_lstm: samples/fashion_*.cast (Adam, weights from --init)")
    p.add_argument("--init", help="initial weights (init_weights.py's safetensors); "
                                  "required for fashion_cnn and fashion_vit; fashion_lstm "
                                  "without it starts from Keras's own seeded initializers")
    p.add_argument("--train-samples", type=int, default=0,
                   help="use the first N training images (0: all 60000); the validation "
                        "split is taken from them")
    p.add_argument("--test-samples", type=int, default=0,
                   help="evaluate on the first N test images (0: all 10000)")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop each epoch after this many steps (0: all); for quick tries only")


def steady(steps, t1, t_end, c1, c_end):
    """Wall and CPU ms per step after the first step (which holds XLA's
    compile in Keras): the epoch's steps 2..n."""
    if steps < 2:
        return {"steady_step_ms": None, "steady_cpu_ms": None}
    return {"steady_step_ms": (t_end - t1) / (steps - 1) * 1e3,
            "steady_cpu_ms": (c_end - c1) / (steps - 1) * 1e3}


def summary(rows):
    """The test line's timing: medians over epochs 2.. (epoch 1 alone when
    there is one)."""
    def med(k):
        v = [r[k] for r in rows if r.get(k) is not None]
        v = v[1:] or v
        return float(np.median(v)) if v else None
    return {"step_ms_median_after_first": med("step_ms"), "cpu_ms_median_after_first": med("cpu_ms"),
            "steady_step_ms": med("steady_step_ms"), "steady_cpu_ms": med("steady_cpu_ms")}
