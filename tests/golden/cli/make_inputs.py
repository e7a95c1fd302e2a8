# SPDX-License-Identifier: Apache-2.0
"""make_inputs.py: the input files of the --input cases here (NumPy only).

Each holds the same values [[0, 1, 2, 3], [4, 5, 6, 250]] (bool: nonzero)
in another dtype or format, so their outputs must agree; the int_* files
feed an int32 input and must fail (not whole, out of int32's range).
"""
import gzip
import struct

import numpy as np

v = np.array([[0, 1, 2, 3], [4, 5, 6, 250]])
for dt in ["uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
           "float16", "float32", "float64", "bool"]:
    a = v.astype(dt) if dt != "int8" else np.array([[0, 1, 2, 3], [4, 5, 6, -6]], dtype="int8")
    np.save(f"in_{dt}.npy", a)
np.save("in_big_endian.npy", v.astype(">i4"))
# IDX (MNIST's format): ubyte [2, 2, 2], big-endian, plain and gzipped
idx = bytes([0, 0, 0x08, 3]) + struct.pack(">III", 2, 2, 2) + v.astype("uint8").tobytes()
open("in_idx.idx", "wb").write(idx)
with gzip.GzipFile("in_idx.idx.gz", "wb", mtime=0) as f:
    f.write(idx)
np.save("int_not_whole.npy", np.array([[1.0, 2.5, 3.0, 4.0]]))
np.save("int_too_big.npy", np.array([[1, 2, 2**40, 4]], dtype="int64"))
np.save("int_whole.npy", np.array([[1.0, 2.0, 3.0, 4.0]]))
