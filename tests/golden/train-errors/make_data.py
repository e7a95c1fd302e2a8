#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the small bad datasets of these golden cases (stdlib only: the
.npy format by hand). Run by hand; the files are committed."""
import math
import struct


def save(path, dtype, shape, values):
    descr = {"f4": "<f4", "i4": "<i4", "i8": "<i8"}[dtype]
    fmt = {"f4": "f", "i4": "i", "i8": "q"}[dtype]
    shape_txt = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_txt)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


def x_values(n, features):
    return [((i * 7 + j * 3) % 11) / 11.0 for i in range(n) for j in range(features)]


save("x.npy", "f4", (6, 12), x_values(6, 12))
save("y.npy", "i8", (6,), [0, 1, 2, 3, 4, 0])
save("y_out_of_range.npy", "i8", (6,), [0, 1, 2, 7, 4, 0])
save("y_short.npy", "i8", (5,), [0, 1, 2, 3, 4])
save("x_10_features.npy", "f4", (6, 10), x_values(6, 10))
nan_x = x_values(6, 12)
nan_x[2 * 12 + 5] = math.nan
save("x_nan.npy", "f4", (6, 12), nan_x)
save("x_empty.npy", "f4", (0, 12), [])
save("y_empty.npy", "i8", (0,), [])
