#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make_seeds.py: writes the hand-made seeds of the binary fuzz targets
(seeds/safetensors, seeds/npy, seeds/dataset, seeds/cli) and the dictionaries (dict/)
with the standard library only.
The text targets (cast, ir, passes) take their seeds from the test inputs
(samples/, tests/golden/), gathered by run.sh and by CMake. Run by hand
after changing it; the outputs are committed."""
import json, os, struct

here = os.path.dirname(os.path.abspath(__file__))

def write(sub, name, data):
    d = os.path.join(here, "seeds", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def safetensors(tensors, meta=None):
    header, blob = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for key, (dtype, shape, data) in tensors.items():
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob

f32 = lambda *v: struct.pack("<%df" % len(v), *v)
write("safetensors", "dense_f32", safetensors({
    "dense_1.kernel": ("F32", [2, 3], f32(1, -2, 3.5, 0, 1e-3, -7)),
    "dense_1.bias": ("F32", [3], f32(0.5, 0, -0.5))}, {"format": "pt"}))
write("safetensors", "f16_bf16", safetensors({
    "a.kernel": ("F16", [2, 2], struct.pack("<4H", 0x3c00, 0xbc00, 0x7c00, 0x7e00)),
    "a.bias": ("BF16", [2], struct.pack("<2H", 0x3f80, 0xff80))}))
write("safetensors", "empty_tensor", safetensors({"e": ("F32", [0, 4], b""), "s": ("F32", [], f32(2))}))
write("safetensors", "empty_header", struct.pack("<Q", 2) + b"{}")
write("safetensors", "nan_weights", safetensors({"w.kernel": ("F32", [1, 2], f32(float("nan"), float("inf")))}))

def npy(descr, shape, data, version=(1, 0)):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    lenbytes = 2 if version[0] == 1 else 4
    pad = -(6 + 2 + lenbytes + len(h) + 1) % 64
    h = (h + " " * pad + "\n").encode("latin1")
    return b"\x93NUMPY" + bytes(version) + struct.pack("<H" if lenbytes == 2 else "<I", len(h)) + h + data

write("npy", "f4_2x3", npy("<f4", [2, 3], f32(1, 2, 3, 4, 5, 6)))
write("npy", "f4_nan", npy("<f4", [3], f32(float("nan"), float("-inf"), 1)))
write("npy", "f8_2x2", npy("<f8", [2, 2], struct.pack("<4d", 1.5, -2, 1e300, 5e-324)))
write("npy", "f2_4", npy("<f2", [4], struct.pack("<4H", 0x3c00, 0x0001, 0x7bff, 0xfc00)))
write("npy", "i4_v2", npy("<i4", [2], struct.pack("<2i", -1, 7), (2, 0)))
write("npy", "i8_v3", npy("<i8", [1], struct.pack("<q", 1 << 40), (3, 0)))
write("npy", "b1_2x2", npy("|b1", [2, 2], bytes([1, 0, 0, 1])))
write("npy", "scalar", npy("<f4", [], f32(3.25)))
write("npy", "empty", npy("<f4", [0, 3], b""))

# fuzz_dataset: a 6-byte prefix (flags, features, classes, X's length LE16,
# shape nibbles; see fuzz_dataset.c), then X's bytes, then Y's
import gzip as _gzip
def idx(code, dims, data):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data
def gz(b):
    return _gzip.compress(b, 9, mtime=0)
def ds(x, y, flags=0, features=0, classes=0, shape=0):
    return bytes([flags, features, classes, len(x) & 255, len(x) >> 8, shape]) + x + y
img = idx(0x08, [3, 2, 2], bytes(range(0, 240, 20)))
lab = idx(0x08, [3], bytes([0, 2, 1]))
write("dataset", "idx_plain", ds(img, lab, 0, 4, 3))
write("dataset", "idx_wrapped", ds(img, lab, 3, 4, 3))
write("dataset", "idx_gzip_raw", ds(gz(img), gz(lab), 0, 4, 3))
write("dataset", "idx_gzip_members", ds(gz(img[:7]) + gz(img[7:]), lab, 0, 0, 0))
write("dataset", "idx_shape_2x2x1", ds(img, lab, 16, 0, 3, 0x11))
write("dataset", "npy_dense", ds(npy("<f4", [2, 3], f32(1, 2, 3, 4, 5, 6)), npy("<f8", [2, 2], struct.pack("<4d", 1, 0, 0, 1)), 8, 3, 2))
write("dataset", "npy_sparse_i8", ds(npy("<f2", [2, 1], struct.pack("<2H", 0x3c00, 0x4000)), npy("<i8", [2, 1], struct.pack("<2q", 1, 0)), 4, 1, 2))
write("dataset", "npy_u1_gzip", ds(gz(npy("|u1", [2, 2], bytes([0, 255, 7, 9]))), npy(">i2", [2], struct.pack(">2h", 1, 1)), 0, 0, 0))
write("dataset", "idx_zero_features", ds(idx(0x08, [0xffffffff, 0], b""), lab, 0, 0, 0))

for i, args in enumerate([
        ["run", "m.cast"],
        ["run", "m.cast", "--batch", "4", "--seed=7", "--threads", "2", "--repeat=3", "--stats"],
        ["run", "m.cast", "--input", "x.npy", "--output=y.npy", "-O3", "--weights", "w.safetensors"],
        ["dump", "m.cast", "--emit=llvm", "--passes=verify,dce", "--dump-after=all", "--dump-dir", "d"],
        ["dump", "m.cast", "--casts", "--policy", "mixed_float16", "--fp32-ops=gelu,add", "--fp32-layers=d"],
        ["run", "m.cast", "--target=cuda", "--device", "1", "--sm=sm_90", "--pad8", "--keep-16bit-outputs"],
        ["run", "m.cast", "-O", "1", "--weights-seed=3"],
        ["--help"], ["--version"], ["run"], ["bogus", "m.cast"], ["run", "m.cast", "--batch"]]):
    write("cli", "args%02d" % i, b"\0".join(a.encode() for a in args))

# zip: archives as Keras writes them (stored) and deflated, one with a comment
import io, shutil, zipfile
for i, (method, comment) in enumerate([(zipfile.ZIP_STORED, b""), (zipfile.ZIP_DEFLATED, b""),
                                       (zipfile.ZIP_STORED, b"a comment")]):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", method) as z:
        z.comment = comment
        for n, data in [("metadata.json", b'{"keras_version": "3.6.0"}'),
                        ("config.json", b'{"class_name": "Sequential", "config": {"layers": []}}' * 3),
                        ("model.weights.h5", bytes(range(256)))]:
            z.writestr(zipfile.ZipInfo(n, date_time=(2026, 1, 1, 0, 0, 0)), data, method)
    write("zip", "keras%d.zip" % i, b.getvalue())
# a large archive (past libFuzzer's default 4 KB inputs): 1,200 members, the
# duplicate-name check and the member table at scale
b = io.BytesIO()
with zipfile.ZipFile(b, "w", zipfile.ZIP_STORED) as z:
    for k in range(1200):
        z.writestr(zipfile.ZipInfo("m%04d" % k, date_time=(2026, 1, 1, 0, 0, 0)),
                   bytes([k % 251]) * 8)
write("zip", "many_members.zip", b.getvalue())
# hdf5: the small files of tests/data/hdf5 (written by h5py there)
for name in ["weights.h5", "compact.h5", "chunked.h5", "latest.h5"]:
    with open(os.path.join(here, "..", "data", "hdf5", name), "rb") as f:
        write("hdf5", name, f.read())

# keras: config.json and model.weights.h5 of the golden .keras files, as
# fuzz_keras.c splits its input (a 4-byte config length first)
for name in ["dag-float32", "seq-mixed_float16", "overrides-mixed_bfloat16", "residual-bfloat16",
             "cnn-float32", "merge-mixed_float16", "embed-mixed_bfloat16"]:
    with zipfile.ZipFile(os.path.join(here, "..", "golden", "keras-models", name + ".keras")) as z:
        cfg, h5 = z.read("config.json"), z.read("model.weights.h5")
    write("keras", name, struct.pack("<I", len(cfg)) + cfg + h5)
# with an optimizer's saved state (the resume path) and the robustness
# cases of issue 41: a non-string attribute, iterations -5, a NaN learning rate
for name in ["resume-adam-float32", "robust_attr_int", "robust_iterations", "robust_lr_nan"]:
    with zipfile.ZipFile(os.path.join(here, "..", "golden", "keras-models", name + ".keras")) as z:
        cfg, h5 = z.read("config.json"), z.read("model.weights.h5")
    write("keras", name, struct.pack("<I", len(cfg)) + cfg + h5)

def dictionary(name, toks):
    def esc(t):
        return "".join(c if 0x20 <= b < 0x7f and c not in '"\\' else "\\" + c if c in '"\\' else "\\x%02x" % b
                       for b in t for c in [chr(b)])
    os.makedirs(os.path.join(here, "dict"), exist_ok=True)
    with open(os.path.join(here, "dict", name), "w") as f:
        f.write("# libFuzzer dictionary, written by make_seeds.py\n")
        for t in toks:
            f.write('"%s"\n' % esc(t if isinstance(t, bytes) else t.encode()))

import re
# every layer of the .cast vocabulary and every argument it takes (frontend/cast/layers.def)
with open(os.path.join(here, "..", "..", "frontend", "cast", "layers.def")) as f:
    rows = re.findall(r"^LAYER\((.*?)\)\s*$", re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S), re.M | re.S)
cast_layers, cast_keys = [], []
for row in rows:
    q = re.findall(r'"([^"]*)"', row)
    cast_layers.append(q[0])
    q = q[3:] if q[2:3] and q[2][:1].isupper() else q[2:]  # after the Keras class, when there is one
    cast_keys += [k + "=" for k in q if k + "=" not in cast_keys]
# and the layers .cast spells from the layer library's table (frontend/layers/layers.def; layers.c's
# FE_LAYER_LIBRARY): Keras's to_snake_case of each class without a row above, but the op nodes; and
# every library row's config keys that .cast takes (table.c's fl_row_cast_key)
with open(os.path.join(here, "..", "..", "frontend", "cast", "layers.def")) as f:
    cast_classes = set(re.findall(r'^LAYER\(\w+,\s*"\w+",[^,]+,\s*"[^"]*",\s*"(\w+)"', f.read(), re.M))
with open(os.path.join(here, "..", "..", "frontend", "layers", "layers.def")) as f:
    lib_rows = re.findall(r"^LAYER\((\w+),\s*(\w+),(.*?)\)\s*$", re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S),
                          re.M | re.S)
OP_NODES = {"fl_lower_true_divide", "fl_lower_not_equal", "fl_lower_any", "fl_lower_cast_op", "fl_lower_input"}
for cls, lower, keys in lib_rows:
    if lower in OP_NODES:
        continue
    if cls not in cast_classes:
        cast_layers.append(re.sub(r"([a-z])([A-Z])", r"\1_\2", re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", cls)).lower())
    cast_keys += [k + "=" for k, rule in re.findall(r'\{"(\w+)",\s*(\w+)\}', keys)
                  if rule != "KEY_NULL" and not k.endswith("_initializer") and k + "=" not in cast_keys
                  and k not in ("unit_forget_bias", "backward_layer")]

# fuzz_cast's own seeds (the golden .cast files are the others): every layer .cast spells from the
# library's table, without a weights file (Keras's initializers, LayerScale's init_values), and the
# same layers with bad keywords and values
write("cast", "library_layers", b"""model m
x = input(shape=[6, 5, 3])
a = rescaling(x, scale=[0.5, 1, 2], offset=-1)
b = normalization(a, mean=[0.1, 0.2, 0.3], variance=[1, 2, 4], invert=true)
c = re_lu(b, max_value=6, negative_slope=0.1, threshold=0.2)
d = cropping2d(c, cropping=[[1, 0], [0, 2]])
e = up_sampling2d(d, size=[2, 1])
f = conv2d_transpose(e, filters=4, kernel_size=3, strides=2, padding=same, output_padding=1, activation=relu)
g = group_normalization(f, groups=2, center=false)
h = layer_scale(g, init_values=0.1, projection_dim=4, dtype=mixed_bfloat16)
i = spatial_dropout2d(h, rate=0.3, seed=7)
j = custom_scale_layer(i, h, scale=0.2)
k = up_sampling2d(j, interpolation=bilinear)
l = normalization(k)
output l
""")
write("cast", "library_layers_bad", b"""model m
x = input(shape=[6, 5, 3])
a = re_lu(x, max_valu=6)
b = re_lu(x, max_value=-1, threshold=[1])
c = cropping2d(x, cropping=[[3, 3], [0, 0]])
d = up_sampling2d(x, size=[4097, 1], interpolation=area)
e = layer_scale(x, init_values=0.1, projection_dim=4)
f = custom_scale_layer(x, x, x, scale=0.1)
g = conv2d_transpose(x, filters=2, kernel_size=3, output_padding=[5, 5], strides=2, data_format=channels_first)
h = group_normalization(x, groups=-1, axis=1)
i = rescaling(x, scale="a", offset=[1, 2])
output i
""")

dictionary("cast.dict", ["model", "policy", "weights", "output"] + cast_layers + cast_keys + [
    "0.5", "1e-3", "-1.5E+2", "0.9.9",
    "true", "false", "linear", "relu", "sigmoid", "tanh", "gelu", "silu", "softmax", "float32", "float16", "bfloat16",
    "mixed_float16", "mixed_bfloat16", "[", "]", "(", ")", ",", "=", "#", "\"", "\n", "-",
    "9223372036854775807", "\\\"", "\\\\"])
import re
with open(os.path.join(here, "..", "..", "ir", "ir_ops.def")) as f:  # every op of the table
    ops = re.findall(r"^IR_OP\(\w+,\s*(\w+)", f.read(), re.M)
dictionary("ir.dict", ["graph", "output", "policy=", "%", "= ", "f32", "f16", "bf16", "i32", "i64", "i1",
    "[N,", "[]", "N", "{", "}", "index=", "weight=", "acc=", "to=", "shape=", "axis=", "epsilon=", "1e-05",
    "#", "# autocast: ", "float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16", "(", ")",
    ",", "\\x00", "\n", "compute=policy", "trainable=false"] + [o + "(" for o in ops])
# the training targets: grad (text IR through the grad pass) gets the IR's tokens and every
# attribute key of ir_attrs.def; cast_train and train the .cast tokens and the compile statement's
with open(os.path.join(here, "..", "..", "ir", "ir_attrs.def")) as f:
    attrs = re.findall(r"^IR_ATTR\((\w+),", f.read(), re.M)
ir_toks = ["graph", "output", "policy=", "%", "= ", "f32", "f16", "bf16", "i32", "i64", "i1",
    "[N,", "[]", "N", "{", "}", "#", "float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16",
    "(", ")", ",", "\n", "layer=", "rule=", "kind=weight", "kind=nontrainable", "kind=slot", "kind=scalar",
    "init=0", "value=1", "1e-07", "compute=policy", "trainable=false"] + [a + "=" for a in attrs] + [o + "(" for o in ops]
dictionary("grad.dict", ir_toks)
dictionary("cast_train.dict", ["model", "policy", "weights", "output"] + cast_layers + cast_keys + ["0.5",
    "relu", "softmax", "linear", "float32", "mixed_float16", "mixed_bfloat16", "[", "]", "(", ")", ",", "=",
    "\n", "compile", "loss=", "optimizer=", "metrics=", "[accuracy]", "from_logits=", "true", "false",
    "sparse_categorical_crossentropy", "categorical_crossentropy", "mean_squared_error", "mse",
    "sgd", "rmsprop", "adam"])
dictionary("safetensors.dict", ["{", "}", "[", "]", ":", ",", '"dtype"', '"shape"', '"data_offsets"',
    '"__metadata__"', '"F32"', '"F16"', '"BF16"', '"F64"', '"I32"', "true", "false", "null", "\\u0000",
    "\\ud800\\udc00", "1e5", "-0", "18446744073709551615", "9223372036854775807",
    b"\x08\x00\x00\x00\x00\x00\x00\x00"])
dictionary("npy.dict", [b"\x93NUMPY", b"\x01\x00", b"\x02\x00", b"\x03\x00", "{", "}", "'descr'",
    "'fortran_order'", "'shape'", "'<f4'", "'<f2'", "'<f8'", "'<i4'", "'<i8'", "'|b1'", "'>f4'", "'=f4'",
    "False", "True", "(", ")", ",", "L", "\n"])
dictionary("dataset.dict", [b"\x1f\x8b\x08\x00", b"\x00\x00\x08\x01", b"\x00\x00\x08\x03", b"\x00\x00\x0d\x02",
    b"\x00\x00\x0e\x02", b"\x00\x00\x0b\x01", b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x93NUMPY",
    b"\x01\x00", "{", "}", "'descr'", "'fortran_order'", "'shape'", "'<f4'", "'|u1'", "'<i8'", "'<f8'", "'<f2'",
    "'>i2'", "False", "True", "(", ")", ",", "\n"])
dictionary("cli.dict", ["run", "dump", "build", "--input", "--output", "--batch", "--seed", "--weights-seed",
    "--weights", "--policy", "--fp32-ops", "--fp32-layers", "--keep-16bit-outputs", "--pad8", "--casts",
    "--passes", "--dump-after", "--dump-dir", "--emit", "--target", "--device", "--sm", "--threads",
    "--stats", "--repeat", "-O", "-h", "--help", "--version", "=", b"\x00", "cpu", "cuda", "ir", "llvm",
    "ptx", "all", "1024", "1025", "0", "-1", "9223372036854775808"])
dictionary("zip.dict", [b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07",
    b"\xff\xff\xff\xff", b"\xff\xff", b"\x00\x00\x00\x00", b"\x08\x00", b"\x01\x00\x18\x00",
    "config.json", "model.weights.h5", "metadata.json"])
dictionary("hdf5.dict", [b"\x89HDF\r\n\x1a\n", "TREE", "SNOD", "HEAP", "GCOL", b"\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\x01\x00", b"\x03\x00", b"\x08\x00", b"\x0c\x00", b"\x10\x00", b"\x11\x00", b"\x0b\x00",
    "bfloat16", "dtype", "name", "vars", "layers"])
dictionary("keras.dict", ['"class_name"', '"config"', '"layers"', '"inbound_nodes"', '"args"', '"kwargs"',
    '"keras_history"', '"__keras_tensor__"', '"input_layers"', '"output_layers"', '"batch_shape"', '"dtype"',
    '"name"', '"units"', '"activation"', '"use_bias"', '"epsilon"', '"axis"', '"Sequential"', '"Functional"',
    '"InputLayer"', '"Dense"', '"Activation"', '"ReLU"', '"Softmax"', '"Add"', '"Multiply"',
    '"LayerNormalization"', '"DTypePolicy"', '"mixed_float16"', '"mixed_bfloat16"', '"bfloat16"', '"float16"',
    '"compile_config"', '"optimizer"', '"loss"', '"metrics"', '"LossScaleOptimizer"', '"inner_optimizer"',
    '"learning_rate"', "null", "true", "false", "-1", "[null, 4]", "/layers/dense/vars",
    '"Subtract"', '"Maximum"', '"Minimum"', '"Concatenate"', '"Flatten"', '"Reshape"', '"Permute"',
    '"Embedding"', '"Conv2D"', '"MaxPooling2D"', '"AveragePooling2D"', '"Dropout"', '"target_shape"', '"dims"',
    '"input_dim"', '"output_dim"', '"mask_zero"', '"filters"', '"kernel_size"', '"strides"', '"padding"',
    '"dilation_rate"', '"groups"', '"data_format"', '"pool_size"', '"rate"', '"same"', '"valid"',
    '"channels_last"', '"channels_first"', '"int32"', "[2, 2]", "[1, 2]", "[-1]",
    '"BatchNormalization"', '"momentum"', '"epsilon"', '"center"', '"scale"', '"seed"', '"noise_shape"',
    '"GlobalAveragePooling2D"', '"GlobalMaxPooling2D"', '"GlobalAveragePooling1D"', '"ZeroPadding2D"',
    '"keepdims"', "[[1, 2], [0, 1]]",
    # general tensors: MultiHeadAttention and its call arguments
    '"MultiHeadAttention"', '"num_heads"', '"key_dim"', '"value_dim"', '"attention_axes"', '"use_causal_mask"',
    '"attention_mask"', '"return_attention_scores"', '"key"', "/layers/multi_head_attention/query_dense/vars"])
