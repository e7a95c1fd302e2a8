#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Golden dtype placements from real Keras 3, for castor's autocast tests.

Run by hand, never by CI or the build (it needs Keras and JAX):

    python3 -m venv /tmp/kvenv && /tmp/kvenv/bin/pip install keras jax jaxlib
    KERAS_BACKEND=jax /tmp/kvenv/bin/python tests/golden/keras/generate.py

It builds each model of MODELS below in Keras under each of the five global
dtype policies, runs it once on a small random batch (no training), and
writes, beside this script:

  placements.txt   one line per layer and per model output (format below)
  <model>.cast     the same model in castor's language, with the same layer
                   names, so a C test can match the lines to IR values

The .cast files and the Keras models come from the same table, so they
cannot drift apart. castor's own expected placement (the castor_* columns)
is derived here from castor's DOCUMENTED rules (README.md beside this file),
not from castor's code: it is the specification the autocast pass is tested
against, and the "rules" column names the documented difference from Keras
that explains each line where the two disagree.
"""

import datetime
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jaxlib  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = ["float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16"]
COMPUTE = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
           "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
# Policy written on each .cast file's `policy` line; the C test overrides it
# (castor_compile_options.policy / --policy) with each of the five.
CAST_POLICY = "mixed_float16"

# ---- the models: one table drives Keras and the .cast text ----
# (var, layer, inputs, attrs). attrs: shape, units, activation, name, dtype.
# Every non-input layer carries its Keras name in "name"; cast_name=False
# leaves name= out of the .cast line (castor's automatic name must then be
# the same, as it is for the sample's `activation`).

MODELS = [
    ("mnist_mlp",
     "samples/mnist_mlp.cast: 784 -> 4096 -> 4096 -> 10 -> softmax (dtype=float32)",
     [
         ("digits", "input", [], {"shape": 784}),
         ("x", "dense", ["digits"], {"units": 4096, "activation": "relu", "name": "dense_1"}),
         ("x", "dense", ["x"], {"units": 4096, "activation": "relu", "name": "dense_2"}),
         ("logits", "dense", ["x"], {"units": 10, "name": "dense_logits"}),
         ("predictions", "activation", ["logits"],
          {"activation": "softmax", "dtype": "float32", "name": "activation", "cast_name": False}),
     ],
     ["predictions"]),
    ("residual",
     "a residual block: the input is added back after two dense layers",
     [
         ("features", "input", [], {"shape": 32}),
         ("h1", "dense", ["features"], {"units": 32, "activation": "gelu", "name": "h1"}),
         ("h2", "dense", ["h1"], {"units": 32, "name": "h2"}),
         ("res", "add", ["h2", "features"], {"name": "res"}),
         ("act", "activation", ["res"], {"activation": "relu", "name": "act"}),
         ("logits", "dense", ["act"], {"units": 5, "name": "logits"}),
         ("probs", "activation", ["logits"], {"activation": "softmax", "name": "probs"}),
     ],
     ["probs"]),
    ("shared_value",
     "one value (shared) feeds three dense layers, merged by add and multiply",
     [
         ("x", "input", [], {"shape": 16}),
         ("shared", "dense", ["x"], {"units": 16, "activation": "relu", "name": "shared"}),
         ("a", "dense", ["shared"], {"units": 16, "activation": "tanh", "name": "a"}),
         ("b", "dense", ["shared"], {"units": 16, "activation": "relu", "name": "b"}),
         ("c", "dense", ["shared"], {"units": 16, "activation": "sigmoid", "name": "c"}),
         ("ab", "add", ["a", "b"], {"name": "ab"}),
         ("gated", "multiply", ["ab", "c"], {"name": "gated"}),
         ("y", "dense", ["gated"], {"units": 4, "name": "y"}),
     ],
     ["y"]),
    ("overrides",
     "per-layer dtype= overrides inside a global policy (mixed_float16 in the .cast)",
     [
         ("features", "input", [], {"shape": 16}),
         ("d1", "dense", ["features"], {"units": 16, "activation": "relu", "name": "d1"}),
         ("dense_2", "dense", ["d1"],
          {"units": 16, "activation": "relu", "name": "dense_2", "dtype": "float32"}),
         ("d3", "dense", ["dense_2"], {"units": 16, "activation": "gelu", "name": "d3"}),
         ("d4", "dense", ["d3"], {"units": 16, "name": "d4"}),
         ("skip", "add", ["d4", "d3"], {"name": "skip"}),
         ("d5", "dense", ["skip"], {"units": 16, "activation": "tanh", "name": "d5"}),
         ("d6", "dense", ["d5"], {"units": 16, "name": "d6", "dtype": "mixed_bfloat16"}),
         ("gate", "activation", ["d6"],
          {"activation": "sigmoid", "name": "gate", "dtype": "bfloat16"}),
         ("d7", "dense", ["gate"], {"units": 8, "name": "d7"}),
         ("tail", "activation", ["d7"], {"activation": "tanh", "name": "tail"}),
         ("probs", "dense", ["d7"], {"units": 4, "activation": "softmax", "name": "probs"}),
         ("p3", "dense", ["d7"], {"units": 4, "name": "p3"}),
         ("attn", "multiply", ["probs", "p3"], {"name": "attn"}),
         ("out", "dense", ["attn"], {"units": 2, "name": "out"}),
     ],
     ["out", "tail"]),
]

KERAS_CLASS = {"input": "InputLayer", "dense": "Dense", "activation": "Activation",
               "add": "Add", "multiply": "Multiply"}


def layer_name(var, layer, attrs):
    return var if layer == "input" else attrs["name"]


# ---- Keras ----

def build_keras(spec):
    _, _, rows, outputs = spec
    env, layer_of = {}, {}
    inputs = []
    for var, layer, srcs, a in rows:
        kw = {"name": layer_name(var, layer, a)}
        if "dtype" in a:
            kw["dtype"] = a["dtype"]
        ins = [env[s] for s in srcs]
        if layer == "input":
            t = keras.Input(shape=(a["shape"],), **kw)
            inputs.append(t)
        elif layer == "dense":
            t = layers.Dense(a["units"], activation=a.get("activation"), **kw)(ins[0])
        elif layer == "activation":
            t = layers.Activation(a["activation"], **kw)(ins[0])
        elif layer == "add":
            t = layers.Add(**kw)(ins)
        elif layer == "multiply":
            t = layers.Multiply(**kw)(ins)
        else:
            raise ValueError(layer)
        env[var] = t
        layer_of[var] = kw["name"]
    model = keras.Model(inputs, [env[o] for o in outputs])
    return model, env


def keras_placements(spec):
    """Per layer: (class, compute, output, variable), from the layer
    objects, the symbolic outputs, and an eager run that must agree."""
    model, env = build_keras(spec)
    rows = spec[2]
    want = [layer_name(v, l, a) for v, l, _, a in rows]
    got = [l.name for l in model.layers]
    assert sorted(got) == sorted(want), f"{spec[0]}: keras names {got} != {want}"
    # Eager run of every layer output at once, to check the symbolic dtypes.
    probe = keras.Model(model.inputs, [l.output for l in model.layers])
    rng = np.random.default_rng(0)
    x = [rng.standard_normal((2,) + tuple(i.shape[1:])).astype("float32") for i in model.inputs]
    eager = probe(x)
    out = {}
    for l, e in zip(model.layers, eager):
        sym = keras.backend.standardize_dtype(l.output.dtype)
        run = keras.backend.standardize_dtype(e.dtype)
        assert sym == run, f"{spec[0]}/{l.name}: symbolic {sym} but eager {run}"
        cls = l.__class__.__name__
        if cls == "InputLayer":
            compute = "-"
        else:
            compute = keras.backend.standardize_dtype(l.compute_dtype)
        vdt = sorted({keras.backend.standardize_dtype(v.dtype) for v in l.weights})
        assert len(vdt) <= 1, f"{l.name}: several variable dtypes {vdt}"
        out[l.name] = (cls, compute, run, vdt[0] if vdt else "-")
    model_out = [keras.backend.standardize_dtype(t.dtype) for t in model.outputs]
    eager_out = model(x)
    if not isinstance(eager_out, (list, tuple)):
        eager_out = [eager_out]
    assert [keras.backend.standardize_dtype(t.dtype) for t in eager_out] == model_out
    return out, model_out


# ---- castor's documented rules (README.md, "where castor differs") ----

def is_softmax(row):
    _, layer, _, a = row
    return layer in ("dense", "activation") and a.get("activation") == "softmax"


def is_eltwise(row):
    # A standalone elementwise layer whose dtype autocast infers (rule c).
    _, layer, _, a = row
    return layer in ("activation", "add", "multiply") and "dtype" not in a and not is_softmax(row)


def castor_placements(spec, policy):
    """Per layer (castor_compute, castor_output); per output castor's dtype."""
    _, _, rows, outputs = spec
    by_var = {}  # latest definition, in file order (the .cast scoping rule)
    srcs_of, users_of = {}, {}
    order = []
    for i, (var, layer, srcs, a) in enumerate(rows):
        srcs_of[i] = [by_var[s] for s in srcs]
        for s in srcs_of[i]:
            users_of.setdefault(s, []).append(i)
        by_var[var] = i
        order.append(i)

    def own_policy(i):
        return rows[i][3].get("dtype", policy)

    def matmul_dtype(i):  # a dense layer's compute dtype
        return COMPUTE[own_policy(i)]

    def reach(i, step, stop):
        """Layers reachable from i through rule-(c) elementwise layers;
        returns the set of non-elementwise layers where the walk stops."""
        seen, ends, todo = set(), set(), list(step(i))
        while todo:
            j = todo.pop()
            if j in seen:
                continue
            seen.add(j)
            if is_eltwise(rows[j]):
                todo.extend(step(j))
            else:
                ends.add(j)
        return ends

    up = lambda i: srcs_of[i]  # noqa: E731
    down = lambda i: users_of.get(i, [])  # noqa: E731
    res = {}
    for i in order:
        var, layer, _, a = rows[i]
        name = layer_name(var, layer, a)
        if layer == "input":
            res[name] = ("-", "float32")
        elif layer == "dense":
            c = matmul_dtype(i)
            res[name] = (c, "float32" if is_softmax(rows[i]) else c)
        elif not is_eltwise(rows[i]):  # own dtype=, or a softmax
            c = "float32" if is_softmax(rows[i]) else COMPUTE[own_policy(i)]
            res[name] = (c, c)
        else:
            ups, downs = reach(i, up, None), reach(i, down, None)
            low = lambda j: rows[j][1] == "dense" and matmul_dtype(j) != "float32"  # noqa: E731
            denied = any(is_softmax(rows[j]) for j in ups)
            between = any(low(j) for j in ups) and any(low(j) for j in downs)
            c = "float32"
            if between and not denied and COMPUTE[policy] != "float32":
                c = COMPUTE[policy]
                # The models avoid cases the rule leaves open: a layer
                # between 16-bit matmuls of another 16-bit type.
                for j in list(ups) + list(downs):
                    if low(j):
                        assert matmul_dtype(j) == c, f"{name}: ambiguous 16-bit type"
            res[name] = (c, c)
    out = {o: "float32" for o in outputs}
    return res, out


def rules_for(keras_row, castor_row, row):
    """The documented difference(s) explaining castor != Keras, or '-'."""
    _, compute, output, _ = keras_row
    ccompute, coutput = castor_row
    if (compute, output) == (ccompute, coutput):
        return "-"
    if is_softmax(row):
        return "a"
    if is_eltwise(row):
        return "c"
    raise AssertionError(f"undocumented difference at {row}: keras {keras_row} castor {castor_row}")


# ---- .cast text ----

def cast_text(spec):
    name, desc, rows, outputs = spec
    lines = [
        f"# {desc}.",
        "# Generated by tests/golden/keras/generate.py from the same table as the Keras",
        "# model; layer names match placements.txt. Tests override the policy line",
        "# with each of the five policies.",
        f"model {name}",
        f"policy {CAST_POLICY}",
        "",
    ]
    width = max(len(r[0]) for r in rows)
    for var, layer, srcs, a in rows:
        if layer == "input":
            args = [f"shape=[{a['shape']}]"]
        else:
            args = list(srcs)
            if layer == "dense":
                args.append(f"units={a['units']}")
                if a.get("activation"):
                    args.append(f"activation={a['activation']}")
            elif layer == "activation":
                args.append(a["activation"])
            if a.get("cast_name", True):
                args.append(f"name={a['name']}")
        if "dtype" in a:
            args.append(f"dtype={a['dtype']}")
        lines.append(f"{var:<{width}} = {layer}({', '.join(args)})")
    lines.append("output " + ", ".join(outputs))
    return "\n".join(lines) + "\n"


HEADER_RULES = """\
# Columns: model policy layer class compute output variable castor_compute castor_output rules
#   model, layer   the .cast file (tests/golden/keras/<model>.cast) and the layer
#                  name, which is also the IR value castor gives the layer's result
#   policy         the GLOBAL policy (set_global_policy / the .cast policy line);
#                  per-layer dtype= overrides are in the .cast file
#   class          the Keras layer class; "Output" lines are model outputs,
#                  named as the .cast `output` statement names them
#   compute        Keras's layer.compute_dtype ("-" for inputs and outputs)
#   output         dtype of the layer's output tensor in Keras (symbolic and
#                  eager runs agree)
#   variable       dtype of the layer's weights in Keras ("-" without weights)
#   castor_compute castor_output
#                  what castor's DOCUMENTED rules give (not castor's code; see
#                  README.md). For a dense layer castor_compute is its matmul's
#                  dtype and castor_output the dtype of the layer's IR value.
#   rules          "-" where castor == Keras for compute and output, else the
#                  letters of the documented differences below.
#   All dtypes are Keras names: float32, float16, bfloat16.
#
# Where castor DELIBERATELY differs from Keras:
#  (a) softmax always computes in float32 in castor (a deny op), even without
#      dtype="float32", while Keras computes it in the layer's policy. This
#      covers an activation(softmax) layer and a dense layer's softmax
#      activation (its matmul keeps the policy's compute dtype; the layer's
#      value is float32).
#  (b) model outputs are float32 in castor (a final cast is inserted), while
#      Keras outputs the last layer's dtype ("Output" lines).
#  (c) castor follows TensorFlow's auto-mixed-precision "infer" rule for
#      standalone elementwise layers (activation/add/multiply without a dtype=
#      of their own): they compute in the policy's 16-bit dtype only when they
#      lie between 16-bit matmuls (upstream and downstream, through other such
#      elementwise layers) and are not downstream of a float32-only op
#      (softmax); otherwise in float32. Keras computes every layer in its
#      policy's compute dtype. Dense layers and any layer with its own dtype=
#      compute in their policy's compute dtype, as in Keras; a dense layer's
#      own bias add and activation follow its matmul's dtype, except a softmax
#      activation (a).
#  (d) for mixed policies castor stores the weights once in the compute dtype
#      (cast at compile time); the policy's variable dtype is still float32,
#      and the variable column reports Keras's variable dtype as is (castor
#      agrees with it; no line is marked d).
"""


def main():
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    lines = [
        f"# generated by tests/golden/keras/generate.py with keras {keras.__version__} "
        f"(backend jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
        f"numpy {np.__version__}) on {stamp}",
        HEADER_RULES.rstrip("\n"),
        "#",
        "# model policy layer class compute output variable castor_compute castor_output rules",
    ]
    summary = {}
    for spec in MODELS:
        with open(os.path.join(HERE, spec[0] + ".cast"), "w") as f:
            f.write(cast_text(spec))
        for policy in POLICIES:
            keras.backend.clear_session()
            keras.mixed_precision.set_global_policy(policy)
            kp, kout = keras_placements(spec)
            cp, cout = castor_placements(spec, policy)
            for row in spec[2]:
                name = layer_name(row[0], row[1], row[3])
                k, c = kp[name], cp[name]
                r = rules_for(k, c, row)
                if r != "-":
                    summary.setdefault((spec[0], name, r), []).append(policy)
                lines.append(" ".join([spec[0], policy, name, *k, *c, r]))
            for o, kd in zip(spec[3], kout):
                r = "-" if kd == cout[o] else "b"
                if r != "-":
                    summary.setdefault((spec[0], o + " (output)", r), []).append(policy)
                lines.append(" ".join([spec[0], policy, o, "Output", "-", kd, "-", "-", cout[o], r]))
    keras.mixed_precision.set_global_policy("float32")
    with open(os.path.join(HERE, "placements.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote placements.txt ({sum(1 for l in lines if not l.startswith('#'))} lines) "
          f"and {len(MODELS)} .cast files; differences from Keras:", file=sys.stderr)
    for (m, n, r), ps in summary.items():
        print(f"  {m}/{n}: ({r}) under {', '.join(ps)}", file=sys.stderr)


if __name__ == "__main__":
    main()
