#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/train/subset.py: the first N training and M test images of
Fashion-MNIST as uint8 .npy files for `castor train` / `castor evaluate`
(which scale uint8 by 1/255, as the peers do), so that castor trains on the
same rows as the peers' --train-samples N --test-samples M.

    subset.py --train-samples N --test-samples M --out DIR
writes DIR/{x,y}_train.npy ([N, 28, 28] uint8, [N] uint8) and DIR/{x,y}_test.npy.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-samples", type=int, default=0, help="0: all 60000")
    ap.add_argument("--test-samples", type=int, default=0, help="0: all 10000")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for name, n in (("train", a.train_samples), ("t10k", a.test_samples)):
        x = None
        for ext in (".gz", ""):
            p = os.path.join(common.DATA_DIR, f"{name}-images-idx3-ubyte{ext}")
            if os.path.exists(p):
                x = common.read_idx(p)
                y = common.read_idx(os.path.join(common.DATA_DIR, f"{name}-labels-idx1-ubyte{ext}"))
                break
        if x is None:
            sys.exit(f"missing {name}-images-idx3-ubyte[.gz] in {common.DATA_DIR}")
        if n:
            x, y = x[:n], y[:n]
        tag = "train" if name == "train" else "test"
        np.save(os.path.join(a.out, f"x_{tag}.npy"), np.ascontiguousarray(x, np.uint8))
        np.save(os.path.join(a.out, f"y_{tag}.npy"), np.ascontiguousarray(y, np.uint8))


if __name__ == "__main__":
    main()
