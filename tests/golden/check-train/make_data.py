#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the data of these golden cases (stdlib only: the .npy format by
hand). Run by hand; the files are committed. tiny_x.npy: features near
1e-9, whose gradients flush to zero in float16 unscaled."""
import struct


def save(path, dtype, shape, values):
    descr = {"f4": "<f4", "i8": "<i8"}[dtype]
    fmt = {"f4": "f", "i8": "q"}[dtype]
    shape_txt = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_txt)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


n, features = 16, 4
x = [(1 if (i * 5 + j) % 3 else -1) * (1 + ((i * 7 + j * 3) % 11) / 11.0) for i in range(n) for j in range(features)]
save("x.npy", "f4", (n, features), x)
save("tiny_x.npy", "f4", (n, features), [v * 1e-9 for v in x])
save("y.npy", "i8", (n,), [i % 2 for i in range(n)])
save("y_out_of_range.npy", "i8", (n,), [i % 2 if i != 9 else 2 for i in range(n)])
