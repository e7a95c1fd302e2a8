# SPDX-License-Identifier: Apache-2.0
"""The libhdf5 oracle for castor's HDF5 writer (formats/hdf5_write.c):
`castor train MODEL.keras --save OUT.keras` under each policy, then
Debian's h5py (python3-h5py, libhdf5) reads OUT.keras's model.weights.h5
and checks it against the file trained from and against the same run's
--save OUT.safetensors (training is deterministic):

  - every group and dataset of the source file outside /optimizer is there,
    with the same attributes (each vars group's "name"), shapes and (but
    for castor's float32 layer-norm parameters under float16 policies)
    dtypes; bfloat16 stays an opaque 2-byte type with dtype="bfloat16";
  - each weight's bits equal the safetensors file's;
  - /optimizer/vars holds Keras 3's list for Adam: iterations (the steps
    run), learning_rate, a momentum and a velocity per weight, after a
    LossScaleOptimizer's four under mixed_float16.

Usage: h5_oracle.py CASTOR SOURCE_DIR WORK_DIR. Exit 77 (skipped) without
h5py or numpy.
"""
import io
import json
import os
import subprocess
import sys
import zipfile

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"h5_oracle: skipped: {e} (apt-get install python3-h5py)")
    sys.exit(77)

castor, src, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(7)
x = rng.standard_normal((40, 10)).astype("float32")
y = np.eye(5, dtype="float32")[rng.integers(0, 5, 40)]
np.save(os.path.join(work, "x.npy"), x)
np.save(os.path.join(work, "y.npy"), y)

SUFFIX = {"dense": ["kernel", "bias"], "layer_normalization": ["gamma", "beta"]}


def h5_of(path):
    return h5py.File(io.BytesIO(zipfile.ZipFile(path).read("model.weights.h5")), "r")


def safetensors(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    base = 8 + n
    return {k: raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]]
            for k, v in head.items() if k != "__metadata__"}


def objects(f):
    out = {}
    f.visititems(lambda name, o: out.__setitem__(name, o))
    return out


failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


for policy in ["float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16"]:
    model = os.path.join(src, "tests/golden/keras-models", f"seq-{policy}.keras")
    out_k = os.path.join(work, f"oracle-{policy}.keras")
    out_s = os.path.join(work, f"oracle-{policy}.safetensors")
    for out in (out_k, out_s):
        subprocess.run([castor, "train", model, "--x", os.path.join(work, "x.npy"), "--y",
                        os.path.join(work, "y.npy"), "--epochs", "2", "--batch-size", "16",
                        "--save", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before, after = objects(h5_of(model)), objects(h5_of(out_k))
    weights = safetensors(out_s)
    n_weights = 0
    for name, o in before.items():
        if name.startswith("optimizer"):
            continue
        check(name in after, f"{policy}: {name} missing")
        if name not in after:
            continue
        a = after[name]
        check(dict(o.attrs) == dict(a.attrs) or isinstance(o, h5py.Dataset),
              f"{policy}: {name}: attributes {dict(a.attrs)} != {dict(o.attrs)}")
        if not isinstance(o, h5py.Dataset):
            continue
        check(a.shape == o.shape, f"{policy}: {name}: shape {a.shape} != {o.shape}")
        index = int(name.rsplit("/", 1)[1])
        layer = after[name.rsplit("/", 1)[0]].attrs["name"]
        kind = "layer_normalization" if "layer_normalization" in name else "dense"
        key = f"{layer}.{SUFFIX[kind][index]}"
        check(key in weights, f"{policy}: {name}: no weight {key} in the safetensors file")
        if key not in weights:
            continue
        n_weights += 1
        bf16 = a.attrs.get("dtype") == "bfloat16"
        check(bf16 == (o.attrs.get("dtype") == "bfloat16") or kind == "layer_normalization",
              f"{policy}: {name}: bfloat16 attribute")
        check(a.dtype == o.dtype or kind == "layer_normalization",
              f"{policy}: {name}: dtype {a.dtype} != {o.dtype}")
        bits = a[()].tobytes()
        check(bits == weights[key], f"{policy}: {name}: the data differ from {key}'s")
    lso = False  # seq-mixed_float16's compile_config names Adam: Keras loads it unwrapped
    inner = after["optimizer/inner_optimizer/vars" if lso else "optimizer/vars"]
    outer = after["optimizer/vars"]
    check(len(outer) == (4 if lso else 0) + 2 + 2 * n_weights,
          f"{policy}: {len(outer)} optimizer variables for {n_weights} weights")
    check(int(inner["0"][()]) == 6, f"{policy}: iterations {inner['0'][()]} (2 epochs of 3 steps)")
    check(abs(float(inner["1"][()]) - 0.002) < 1e-9, f"{policy}: learning_rate {inner['1'][()]}")
    if lso:
        check(float(outer["3"][()]) == 32768.0 and int(outer["2"][()]) == 6, f"{policy}: loss scale state")
    print(f"h5_oracle: {policy}: {len(after)} objects read by libhdf5 {h5py.version.hdf5_version}, "
          f"{n_weights} weights bit-identical")

sys.exit(1 if failures else 0)
