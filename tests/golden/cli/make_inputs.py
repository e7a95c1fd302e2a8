# SPDX-License-Identifier: Apache-2.0
"""make_inputs.py: the input files of the --input cases here (NumPy; PNGs by hand).

Each holds the same values [[0, 1, 2, 3], [4, 5, 6, 250]] (bool: nonzero)
in another dtype or format, so their outputs must agree; the int_* files
feed an int32 input and must fail (not whole, out of int32's range).
"""
import gzip
import zlib
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


# PNG images (written by hand with zlib: no imaging library needed)
def png(w, h, ctype, depth, rows):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    raw = b"".join(b"\0" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


gray = png(2, 2, 0, 8, [bytes([0, 1]), bytes([2, 250])])
open("in_gray.png", "wb").write(gray)                                    # [1, 2, 2]
open("in_gray_alpha.png", "wb").write(png(2, 1, 4, 8, [bytes([0, 1, 2, 250])]))  # [1, 1, 2, 2]
open("in_gray16.png", "wb").write(png(2, 2, 0, 16, [struct.pack(">HH", 0, 1), struct.pack(">HH", 2, 250)]))
open("in_28x28.png", "wb").write(png(28, 28, 0, 8, [bytes((x * 9 + y * 5) % 256 for x in range(28))
                                                     for y in range(28)]))
open("bad_truncated.png", "wb").write(gray[:40])
b = bytearray(gray)
b[45] ^= 0xff  # inside the compressed IDAT data
open("bad_crc.png", "wb").write(bytes(b))
