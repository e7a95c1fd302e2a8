#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the weights (.safetensors) and inputs (.npy) of the models built
to fail in tests/check/ (standard library only; run by hand from this
directory, the outputs are committed): python3 make_data.py"""
import json
import struct


def safetensors(path, tensors):
    """tensors: list of (key, shape, flat float list), stored F32."""
    header, data = {}, b""
    for key, shape, vals in tensors:
        raw = struct.pack("<%df" % len(vals), *vals)
        header[key] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def npy(path, shape, vals):
    """A float32 .npy file (format 1.0)."""
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join("%d," % d for d in shape)
    hdr = hdr.encode()
    hdr += b" " * (-(10 + len(hdr) + 1) % 64) + b"\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr + struct.pack("<%df" % len(vals), *vals))


# overflow: dense_1's unit 2 sums 50000 + 25000 = 75000 > 65504 in f16;
# dense_2 reads dense_1's values through a cast to f16, so it must stay f32 too.
safetensors("overflow.safetensors", [
    ("dense_1.kernel", [4, 4], [1, 2e4, 5e4, 0,
                                1, 2e4, 5e4, 0,
                                1, 0, 0, 0,
                                1, 0, 0, 1]),
    ("dense_2.kernel", [4, 4], [1e-3 * (1 + (i + j) % 3) for i in range(4) for j in range(4)]),
    ("dense_3.kernel", [4, 3], [1e-2 * (1 + (i * 3 + j) % 4) for i in range(4) for j in range(3)]),
])
npy("overflow_x.npy", [1, 4], [1, 0.5, 0.25, 0.125])

# underflow: dense_2's weights (|w| <= 2e-8) flush to zero in f16.
safetensors("underflow.safetensors", [
    ("dense_1.kernel", [4, 4], [0.5 if i == j else 0.125 for i in range(4) for j in range(4)]),
    ("dense_2.kernel", [4, 2], [1e-8, -2e-8, 2e-8, 1e-8, -1e-8, 2e-8, 2e-8, -1e-8]),
])

# logits: logits near 2000 (500) are 2 (0.25) apart in f16, so the softmax
# after them (in f32) is far off; dense_0 (powers of two) is exact in f16.
safetensors("logits.safetensors", [
    ("dense_0.kernel", [4, 4], [0.5 if i == j else 0 for i in range(4) for j in range(4)]),
    ("dense_logits.kernel", [4, 3], [1.3, 0.7, 2.1,
                                     0.9, -1.1, 0.3,
                                     4000.6, 4002.2, 4003.4,
                                     2.2, 1.4, -0.6]),
])
npy("logits_x.npy", [2, 4], [0.5, -0.25, 1, 0.75, 1, 0.5, 0.25, 0.125])

# a NaN in the input, at row 1, column 1 (flat index 5)
npy("nan_x.npy", [2, 4], [0.5, -0.25, 1, 0.75, 1, float("nan"), 0.25, 0.125])
npy("wrong_shape_x.npy", [2, 5], [0.5] * 10)
