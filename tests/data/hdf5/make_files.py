#!/usr/bin/env python3
"""Writes the HDF5 files tests/unit/check_hdf5.c reads, with h5py (pip install
h5py numpy; run once, the files are committed). Each file is small; the
expected values are stated in check_hdf5.c.

  weights.h5     what Keras 3 writes: groups layers/dense/vars (attribute
                 name="dense", a variable-length UTF-8 string), float32,
                 float16 and bfloat16 datasets (bfloat16 as Keras stores it:
                 opaque 2-byte elements, attribute dtype="bfloat16"), an int64
                 scalar, an empty dataset; values v[i] = i * 0.25 - 1
  many.h5        a group of 300 datasets (a B-tree of more than one level)
  chunked.h5     one chunked dataset          (refused: chunked storage)
  gzip.h5        one gzip-compressed dataset  (refused: chunked, filtered)
  compact.h5     one compact dataset          (refused: compact storage)
  latest.h5      libver='latest'              (refused: superblock version)
  userblock.h5   weights.h5's content after a 512-byte user block (h5py's
                 userblock_size; addresses relative to the superblock)

Run with file names as arguments to write only those.
"""
import sys

import h5py
import numpy as np

only = set(sys.argv[1:])


def wanted(name):
    return not only or name in only


def vals(n, dtype):
    return (np.arange(n, dtype=np.float64) * 0.25 - 1).astype(dtype)


def keras_layout(f):
    v = f.create_group("layers/dense/vars")
    v.attrs["name"] = "dense"
    v.create_dataset("0", data=vals(12, np.float32).reshape(4, 3))
    v.create_dataset("1", data=vals(3, np.float16))
    b = f.create_group("layers/dense_1/vars")
    b.attrs["name"] = "dense_2"
    bits = (vals(6, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    ds = b.create_dataset("0", data=bits.view(np.dtype("V2")).reshape(2, 3))
    ds.attrs["dtype"] = "bfloat16"
    f.create_group("optimizer/vars").create_dataset("0", data=np.int64(7))
    f.create_group("vars").create_dataset("empty", shape=(0, 4), dtype=np.float32)


if wanted("weights.h5"):
    with h5py.File("weights.h5", "w") as f:
        keras_layout(f)
if wanted("userblock.h5"):
    with h5py.File("userblock.h5", "w", userblock_size=512) as f:
        keras_layout(f)
    with open("userblock.h5", "r+b") as f:
        f.write(b"a user block: castor skips it\n")

if wanted("many.h5"):
    with h5py.File("many.h5", "w") as f:
        g = f.create_group("vars")
        for i in range(300):
            g.create_dataset(str(i), data=np.float32([i]))

if wanted("chunked.h5"):
    with h5py.File("chunked.h5", "w") as f:
        f.create_dataset("w", data=vals(16, np.float32), chunks=(4,))
if wanted("gzip.h5"):
    with h5py.File("gzip.h5", "w") as f:
        f.create_dataset("w", data=vals(16, np.float32), compression="gzip")
if wanted("compact.h5"):
    with h5py.File("compact.h5", "w") as f:
        sid = h5py.h5s.create_simple((4,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        dsid = h5py.h5d.create(f.id, b"w", h5py.h5t.NATIVE_FLOAT, sid, dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, vals(4, np.float32))
if wanted("latest.h5"):
    with h5py.File("latest.h5", "w", libver="latest") as f:
        f.create_dataset("w", data=vals(4, np.float32))
