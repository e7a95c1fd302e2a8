#!/usr/bin/env python3
"""make_seeds.py: writes the hand-made seeds of the binary fuzz targets
(seeds/safetensors, seeds/npy, seeds/cli) and the dictionaries (dict/)
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

def dictionary(name, toks):
    def esc(t):
        return "".join(c if 0x20 <= b < 0x7f and c not in '"\\' else "\\" + c if c in '"\\' else "\\x%02x" % b
                       for b in t for c in [chr(b)])
    os.makedirs(os.path.join(here, "dict"), exist_ok=True)
    with open(os.path.join(here, "dict", name), "w") as f:
        f.write("# libFuzzer dictionary, written by make_seeds.py\n")
        for t in toks:
            f.write('"%s"\n' % esc(t if isinstance(t, bytes) else t.encode()))

dictionary("cast.dict", ["model", "policy", "weights", "output", "input", "dense", "activation", "add",
    "multiply", "layer_normalization", "shape=", "units=", "activation=", "use_bias=", "name=", "dtype=",
    "true", "false", "linear", "relu", "sigmoid", "tanh", "gelu", "silu", "softmax", "float32", "float16", "bfloat16",
    "mixed_float16", "mixed_bfloat16", "[", "]", "(", ")", ",", "=", "#", "\"", "\n", "-",
    "9223372036854775807", "\\\"", "\\\\"])
import re
with open(os.path.join(here, "..", "..", "ir", "ir_ops.def")) as f:  # every op of the table
    ops = re.findall(r"^IR_OP\(\w+,\s*(\w+)", f.read(), re.M)
dictionary("ir.dict", ["graph", "output", "policy=", "%", "= ", "f32", "f16", "bf16", "i32", "i64", "i1",
    "[N,", "[]", "N", "{", "}", "index=", "weight=", "acc=", "to=", "shape=", "axis=", "epsilon=", "1e-05",
    "#", "# autocast: ", "float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16", "(", ")",
    ",", "\\x00", "\n"] + [o + "(" for o in ops])
# the training targets: grad (text IR through the grad pass) gets the IR's tokens and every
# attribute key of ir_attrs.def; cast_train and train the .cast tokens and the compile statement's
with open(os.path.join(here, "..", "..", "ir", "ir_attrs.def")) as f:
    attrs = re.findall(r"^IR_ATTR\((\w+),", f.read(), re.M)
ir_toks = ["graph", "output", "policy=", "%", "= ", "f32", "f16", "bf16", "i32", "i64", "i1",
    "[N,", "[]", "N", "{", "}", "#", "float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16",
    "(", ")", ",", "\n", "layer=", "rule=", "kind=weight", "kind=nontrainable", "kind=slot", "kind=scalar",
    "init=0", "value=1", "1e-07"] + [a + "=" for a in attrs] + [o + "(" for o in ops]
dictionary("grad.dict", ir_toks)
dictionary("cast_train.dict", ["model", "policy", "weights", "output", "input", "dense", "activation",
    "add", "multiply", "layer_normalization", "shape=", "units=", "activation=", "use_bias=", "name=",
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
dictionary("cli.dict", ["run", "dump", "build", "--input", "--output", "--batch", "--seed", "--weights-seed",
    "--weights", "--policy", "--fp32-ops", "--fp32-layers", "--keep-16bit-outputs", "--pad8", "--casts",
    "--passes", "--dump-after", "--dump-dir", "--emit", "--target", "--device", "--sm", "--threads",
    "--stats", "--repeat", "-O", "-h", "--help", "--version", "=", b"\x00", "cpu", "cuda", "ir", "llvm",
    "ptx", "all", "1024", "1025", "0", "-1", "9223372036854775808"])
