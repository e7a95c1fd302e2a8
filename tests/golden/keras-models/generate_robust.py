"""Bad .keras files for the robustness cases of ../keras-errors (issue 41).
Run by hand, never by CI or the build (h5py for the weights files):

    /tmp/kvenv/bin/python tests/golden/keras-models/generate_robust.py

Every archive is written byte by byte here (struct), so that its sizes
and headers are exactly what each case needs:

  robust_claim_4g.keras       a 3 KB archive whose deflated model.weights.h5
                              claims 4,294,967,280 bytes in both headers
  robust_bomb.keras           model.weights.h5: 16 MiB of zeros deflated to
                              16 KB (a deflate bomb, ratio about 1000)
  robust_empty.keras          an empty ZIP archive (only its end record)
  robust_no_weights.keras     InputLayer [4, 4, 1] + Flatten: no weights
  robust_flatten_df.keras     Flatten with data_format "channels_middle"
  robust_pool_same.keras      MaxPooling2D 2^20 x 2^20, padding "same", on 4x4
  robust_attr_int.keras       resume-adam-float32.keras with an integer
                              attribute on /layers/dense (h5py: attrs = 3)
  robust_iterations.keras     resume-adam-float32.keras with iterations -5
  robust_lr_nan.keras         resume-adam-float32.keras with learning rate NaN
  robust_lr_1e400.keras       resume-adam-float32.keras whose compile_config
                              says learning_rate 1e400
"""
import io
import json
import os
import struct
import zipfile
import zlib

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
META = json.dumps({"keras_version": "3.15.1", "date_saved": "2026-11-29@00:00:00"}).encode()


def archive(path, members, claim=None):
    """members: (name, data, deflate); claim: {name: uncompressed size to state}."""
    out, central = bytearray(), bytearray()
    for name, data, deflate in members:
        comp = data
        if deflate:
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            comp = c.compress(data) + c.flush()
        crc = zlib.crc32(data)
        size = (claim or {}).get(name, len(data))
        n = name.encode()
        off = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8 if deflate else 0, 0, 0, crc, len(comp), size,
                           len(n), 0) + n + comp
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8 if deflate else 0, 0, 0, crc,
                               len(comp), size, len(n), 0, 0, 0, 0, 0, off) + n
    cd = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), cd, 0)
    with open(os.path.join(HERE, path), "wb") as f:
        f.write(out)


def empty_h5():
    b = io.BytesIO()
    with h5py.File(b, "w", libver="earliest"):
        pass
    return b.getvalue()


def config(layers):
    inp = {"module": "keras.layers", "class_name": "InputLayer",
           "config": {"batch_shape": [None, 4, 4, 1], "dtype": "float32", "name": "in"}}
    return json.dumps({"module": "keras", "class_name": "Sequential",
                       "config": {"name": "m", "trainable": True, "dtype": "float32",
                                  "layers": [inp] + layers}}).encode()


def flatten(df="channels_last"):
    return {"module": "keras.layers", "class_name": "Flatten", "config": {"name": "f", "data_format": df}}


def small(path, cfg, h5=None, claim=None, deflate_h5=False):
    archive(path, [("metadata.json", META, False), ("config.json", cfg, False),
                   ("model.weights.h5", h5 if h5 is not None else empty_h5(), deflate_h5)], claim)


def from_resume(path, edit_h5=None, edit_cfg=None):
    with zipfile.ZipFile(os.path.join(HERE, "resume-adam-float32.keras")) as z:
        cfg, h5 = z.read("config.json"), z.read("model.weights.h5")
    if edit_h5:
        b = io.BytesIO(h5)
        with h5py.File(b, "r+") as f:
            edit_h5(f)
        h5 = b.getvalue()
    if edit_cfg:
        cfg = edit_cfg(cfg)
    small(path, cfg, h5)


def main():
    small("robust_claim_4g.keras", config([flatten()]), b"\0" * 2048, {"model.weights.h5": 0xFFFFFFF0}, True)
    small("robust_bomb.keras", config([flatten()]), bytes(16 << 20), None, True)
    with open(os.path.join(HERE, "robust_empty.keras"), "wb") as f:
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0, 0, 0, 0, 0))
    small("robust_no_weights.keras", config([flatten()]))
    small("robust_flatten_df.keras", config([flatten("channels_middle")]))
    pool = {"module": "keras.layers", "class_name": "MaxPooling2D",
            "config": {"name": "p", "pool_size": [1 << 20, 1 << 20], "padding": "same", "strides": [1, 1],
                       "data_format": "channels_last"}}
    small("robust_pool_same.keras", config([pool]))

    def attr_int(f):
        f["layers/dense"].attrs["count"] = np.int64(3)

    def iterations(f):
        f["optimizer/vars/0"][()] = -5

    def lr_nan(f):
        f["optimizer/vars/1"][()] = np.float32("nan")

    def lr_1e400(cfg):
        key = b'"learning_rate": 0.009999999776482582'
        assert cfg.count(key) == 1
        return cfg.replace(key, b'"learning_rate": 1e400')

    from_resume("robust_attr_int.keras", attr_int)
    from_resume("robust_iterations.keras", iterations)
    from_resume("robust_lr_nan.keras", lr_nan)
    from_resume("robust_lr_1e400.keras", edit_cfg=lr_1e400)


if __name__ == "__main__":
    main()
