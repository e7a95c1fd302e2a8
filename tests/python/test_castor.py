# SPDX-License-Identifier: Apache-2.0
"""test_castor.py BUILD_DIR SRCDIR TMPDIR [CLASS...]: the Python module (python/castor)
against the castor CLI, its oracle here: the same model, inputs and options
give bit-identical outputs, the same dump and check texts, the same training
losses and weights file. Also: no-copy passing, dtype conversions, errors
as castor.Error subclasses with castor's located message, AOT builds, and
`pip install` of python/. Run with Debian's python3 and python3-numpy;
exits 77 (skipped) without numpy. The module is found on PYTHONPATH
(build/python from the build tree).
"""
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

try:
    import numpy as np
except ImportError:
    print("skipped: numpy is not installed (Debian: apt-get install python3-numpy)")
    sys.exit(77)

# before `import castor` loads the library: a sanitized libcastor.so aborts
# a python3 that was not started with the sanitizer runtime first
if os.environ.get("CASTOR_TEST_SANITIZED"):
    print("skipped: a sanitized libcastor.so cannot be loaded into python3 without the sanitizer runtime "
          "(the release build runs this test)")
    sys.exit(77)

import castor  # noqa: E402
from castor import _core  # noqa: E402

BIN, SRC, TMP = (os.path.abspath(a) for a in sys.argv[1:4])
ONLY = sys.argv[4:]  # test classes to run (ctest splits the suite in two); none: all
CASTOR = os.path.join(BIN, "castor")
SMALL = os.path.join(SRC, "samples", "mnist_mlp_small.cast")
MLP = os.path.join(SRC, "samples", "mnist_mlp.cast")
CNN = os.path.join(SRC, "samples", "fashion_cnn.cast")
os.makedirs(TMP, exist_ok=True)


def cli(*args, ok=True):
    p = subprocess.run([CASTOR] + [str(a) for a in args], capture_output=True, text=True, timeout=600)
    if ok and p.returncode != 0:
        raise AssertionError("castor %s: %s" % (" ".join(map(str, args)), p.stderr))
    return p


def tmp(name):
    return os.path.join(TMP, name)


def rand(shape, seed=1, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(dtype)


class Run(unittest.TestCase):
    def test_issue_example(self):
        # the issue's done-when: compile the MLP sample and call it
        m = castor.compile(MLP)
        x = rand((4, 784))
        self.assertEqual(m(x).shape, (4, 10))

    def test_outputs_bit_identical_to_castor_run(self):
        for policy in ("float32", "mixed_float16"):
            m = castor.compile(CNN, policy=policy, threads=2)
            x = rand((5, 28, 28, 1), seed=7)
            np.save(tmp("cnn_x.npy"), x)
            cli("run", CNN, "--policy", policy, "--input", tmp("cnn_x.npy"), "--output", tmp("cnn_y.npy"))
            want = np.load(tmp("cnn_y.npy"))
            got = m(x)
            self.assertEqual(got.dtype, np.float32)
            self.assertTrue(np.array_equal(got, want), "policy %s: max diff %g" % (policy, abs(got - want).max()))

    def test_specs_and_batch(self):
        m = castor.compile(SMALL)
        self.assertEqual([(s.name, s.dtype, s.shape) for s in m.inputs], [("digits", np.float32, (None, 784))])
        self.assertEqual([(s.name, s.shape) for s in m.outputs], [("predictions", (None, 10))])
        for b in (1, 3, 64):
            self.assertEqual(m(rand((b, 784))).shape, (b, 10))
        mb = castor.compile(SMALL, batch=3)  # static shapes
        self.assertEqual(mb.inputs[0].shape, (3, 784))
        x = rand((3, 784))
        self.assertTrue(np.array_equal(mb(x), m(x)))
        with self.assertRaises(castor.InvalidArgumentError):
            mb(rand((4, 784)))

    def test_text_model(self):
        with open(SMALL) as f:
            text = f.read()
        x = rand((2, 784))
        self.assertTrue(np.array_equal(castor.compile(text)(x), castor.compile(SMALL)(x)))


class Layout(unittest.TestCase):
    def test_structs_match_castor_h(self):
        """Every ctypes mirror of a castor.h options struct has the C
        compiler's size and field offsets: a field added to castor.h and not
        to python/castor/_lib.py made castor_load_options_init write past
        the Python struct (a heap corruption, a crash at exit)."""
        from castor import _lib
        cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
        if not cc:
            self.skipTest("no C compiler")
        structs = {"castor_compile_options": _lib.CompileOptions, "castor_load_options": _lib.LoadOptions,
                   "castor_check_options": _lib.CheckOptions, "castor_train_options": _lib.TrainOptions,
                   "castor_tensor_info": _lib.TensorInfo}
        lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "castor.h"', "int main(void) {"]
        for cname, py in structs.items():
            lines.append('  printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
            for f in py._fields_:
                lines.append('  printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (cname, f[0], cname, f[0]))
        lines += ["  return 0;", "}"]
        src, exe = tmp("layout.c"), tmp("layout")
        with open(src, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        p = subprocess.run([cc, "-I", os.path.join(SRC, "include"), src, "-o", exe], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = dict(l.split() for l in subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split("\n") if l)
        for cname, py in structs.items():
            self.assertEqual(int(got[cname]), ctypes.sizeof(py), "sizeof(%s)" % cname)
            for f in py._fields_:
                self.assertEqual(int(got["%s.%s" % (cname, f[0])]), getattr(py, f[0]).offset, "%s.%s" % (cname, f[0]))


class NoCopy(unittest.TestCase):
    def test_aligned_inputs_are_passed_as_they_are(self):
        spec = castor.compile(SMALL).inputs[0]
        a = castor.empty((2, 784))
        a[...] = rand((2, 784))
        self.assertEqual(a.ctypes.data % 64, 0)
        self.assertIs(_core.as_input(a, spec.dtype_id, spec.name), a)
        # a copy where the layout or dtype does not allow one
        for other in (a.astype(np.float64), np.asfortranarray(rand((2, 784))), rand((2, 1568))[:, ::2]):
            b = _core.as_input(other, spec.dtype_id, spec.name)
            self.assertIsNot(b, other)
            self.assertTrue(b.flags.c_contiguous and b.dtype == np.float32 and b.ctypes.data % 64 == 0)
        raw = np.empty(2 * 784 + 1, np.float32)
        off = 1 if raw.ctypes.data % 64 == 0 else 0  # a misaligned view: copied
        c = raw[off:off + 2 * 784].reshape(2, 784)
        if c.ctypes.data % 64:
            self.assertIsNot(_core.as_input(c, spec.dtype_id, spec.name), c)

    def test_the_program_reads_and_writes_the_arrays(self):
        m = castor.compile(SMALL)
        x = castor.empty((3, 784))
        x[...] = rand((3, 784))
        out = castor.empty((3, 10))
        y = m(x, out=out)
        self.assertIs(y, out)
        self.assertTrue(np.array_equal(out, m(x)))
        x[0] = 0  # the next run reads the array's memory: its change shows
        self.assertFalse(np.array_equal(m(x)[0], out[0]))
        self.assertEqual(m(x).ctypes.data % 64, 0)  # outputs are aligned, written in place
        with self.assertRaises(castor.InvalidArgumentError):
            m(x, out=np.empty((3, 10), np.float64))


class Dtypes(unittest.TestCase):
    def test_conversions(self):
        m = castor.compile(SMALL)
        x = rand((2, 784))
        y = m(x)
        for dt in (np.float64, np.float16):
            xd = x.astype(dt)
            self.assertTrue(np.array_equal(m(xd), m(xd.astype(np.float32))), dt)
        self.assertTrue(np.array_equal(m(x.astype(np.float64)), y))
        xi = (x * 10).astype(np.int32)
        self.assertTrue(np.array_equal(m(xi), m(xi.astype(np.float32))))
        self.assertTrue(np.array_equal(m(x.tolist()), y))  # lists too
        with self.assertRaises(castor.InvalidArgumentError) as e:
            m(np.array([["a"] * 784]))
        self.assertIn("input 'digits': expected a numeric array", str(e.exception))

    def test_16bit_outputs(self):
        text = "model t\npolicy mixed_float16\nx = input(shape=[8])\ny = dense(x, units=4, name=d)\noutput y\n"
        m = castor.compile(text, keep_16bit_outputs=True)
        self.assertEqual(m.outputs[0].dtype, np.float16)
        x = rand((2, 8))
        y = m(x)
        self.assertEqual(y.dtype, np.float16)
        self.assertEqual(castor.compile(text)(x).dtype, np.float32)
        self.assertTrue(np.array_equal(castor.compile(text)(x), y.astype(np.float32)))


class Errors(unittest.TestCase):
    def test_missing_file(self):
        with self.assertRaises(castor.IOError) as e:
            castor.compile(tmp("no_such_model.cast"))
        self.assertIsInstance(e.exception, castor.Error)
        self.assertIsInstance(e.exception, OSError)
        self.assertEqual(e.exception.status, "CASTOR_ERR_IO")
        self.assertIn("no_such_model.cast", str(e.exception))

    def test_located_parse_error(self):
        text = "model bad\nx = input(shape=[4])\ny = dense(x, units=oops)\noutput y\n"
        with self.assertRaises(castor.ParseError) as e:
            castor.compile(text)
        msg = e.exception.message
        self.assertRegex(msg, r"^<string>:3:\d+: error: ")
        self.assertIn("y = dense(x, units=oops)", msg)  # the source line, with a caret under it
        self.assertIn("^", msg)

    def test_options(self):
        with self.assertRaises(castor.Error) as e:
            castor.compile(SMALL, policy="float8")
        self.assertIn("float8", str(e.exception))
        with self.assertRaises(castor.InvalidArgumentError):
            castor.compile(SMALL, target="tpu")
        with self.assertRaises(castor.InvalidArgumentError):
            castor.compile(SMALL, threads=0)
        with self.assertRaises(castor.InvalidArgumentError) as e:
            castor.compile(SMALL, fp32_layers="no_such_layer")
        self.assertIn("no_such_layer", str(e.exception))
        with self.assertRaises(castor.InvalidArgumentError):
            castor.compile(42)

    def test_run_errors(self):
        m = castor.compile(SMALL)
        with self.assertRaises(castor.InvalidArgumentError) as e:
            m(rand((2, 783)))
        self.assertEqual(str(e.exception), "error: input 'digits': expected f32[N,784], got f32[2,783]")
        with self.assertRaises(castor.InvalidArgumentError):
            m()
        with self.assertRaises(castor.InvalidArgumentError):
            m.dump(emit="pdf")


class Texts(unittest.TestCase):
    def test_dump_and_summary_match_the_cli(self):
        m = castor.compile(CNN, policy="mixed_float16")
        self.assertEqual(m.dump(casts=True), cli("dump", CNN, "--policy", "mixed_float16", "--casts").stdout)
        self.assertEqual(m.dump(), cli("dump", CNN, "--policy", "mixed_float16").stdout)
        self.assertEqual(m.summary(), cli("summary", CNN, "--policy", "mixed_float16").stdout)
        self.assertIn("weight 'conv2d_1.kernel'", m.warnings)  # float16 flushes some weights: a warning
        self.assertTrue(m.dump(emit="dot").startswith("digraph"))

    def test_check_report_as_data(self):
        m = castor.compile(SMALL, policy="mixed_float16")
        got = m.check(batch=2)
        want = json.loads(cli("check", SMALL, "--policy", "mixed_float16", "--batch", "2", "--json").stdout)
        self.assertIsInstance(got, dict)
        self.assertEqual(got, want)
        self.assertIsInstance(got["layers"], list)
        self.assertIn(got["verdict"], ("ok", "fix", "no-fix", "reference-not-finite", "off"))
        with self.assertRaises(castor.InvalidArgumentError):
            m.check(layers="nope")


class Train(unittest.TestCase):
    def test_losses_and_weights_match_castor_train(self):
        rng = np.random.default_rng(5)
        x = rng.uniform(0, 1, size=(150, 784)).astype(np.float32)
        y = rng.integers(0, 10, size=150).astype(np.int32)
        np.save(tmp("tx.npy"), x)
        np.save(tmp("ty.npy"), y)
        out = cli("train", SMALL, "--x", tmp("tx.npy"), "--y", tmp("ty.npy"), "--epochs", 3, "--batch-size", 16,
                  "--validation-split", 0.2, "--seed", 3, "--optimizer", "adam", "--save", tmp("cli.safetensors"),
                  "--threads", 2).stdout
        want = [tuple(map(float, m)) for m in re.findall(r"loss: ([0-9.]+) - accuracy: ([0-9.]+) - val_loss: "
                                                          r"([0-9.]+) - val_accuracy: ([0-9.]+)", out)]
        self.assertEqual(len(want), 3, out)
        seen = []
        t = castor.train(SMALL, x, y, epochs=3, batch_size=16, validation_split=0.2, seed=3, optimizer="adam",
                         threads=2, callback=lambda e, logs: seen.append((e, logs)))
        h = t.history
        got = list(zip(h["loss"], h["accuracy"], h["val_loss"], h["val_accuracy"]))
        for g, w in zip(got, want):
            self.assertEqual(tuple(round(v, 4) for v in g), w)
        self.assertEqual([e for e, _ in seen], [0, 1, 2])
        self.assertEqual(seen[2][1]["loss"], h["loss"][2])
        t.save(tmp("py.safetensors"))
        with open(tmp("cli.safetensors"), "rb") as a, open(tmp("py.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read(), "the trained weights differ from castor train's")
        self.assertEqual(int(t.state("optimizer.iterations")), 3 * 8)  # 120 samples in batches of 16
        # the trained model for inference: castor run with the saved weights
        xi = x[:4]
        np.save(tmp("xi.npy"), xi)
        cli("run", SMALL, "--weights", tmp("cli.safetensors"), "--input", tmp("xi.npy"), "--output", tmp("yi.npy"))
        self.assertTrue(np.array_equal(t.model()(xi), np.load(tmp("yi.npy"))))

    def test_dense_targets_and_the_models_compile_line(self):
        # mean squared error from the model's compile line: float targets,
        # no accuracy, the CLI's losses
        path = tmp("mse.cast")
        with open(path, "w") as f:
            f.write("model mse\ncompile loss=mean_squared_error, optimizer=sgd\nx = input(shape=[8])\n"
                    "h = dense(x, units=16, activation=tanh, name=h)\ny = dense(h, units=4, name=y)\noutput y\n")
        rng = np.random.default_rng(9)
        x = rng.uniform(-1, 1, size=(50, 8)).astype(np.float32)
        y = rng.uniform(-1, 1, size=(50, 4)).astype(np.float32)
        np.save(tmp("mx.npy"), x)
        np.save(tmp("my.npy"), y)
        out = cli("train", path, "--x", tmp("mx.npy"), "--y", tmp("my.npy"), "--epochs", 2, "--batch-size", 8).stdout
        want = [float(v) for v in re.findall(r"loss: ([0-9.]+)", out)]
        t = castor.train(path, x, y, epochs=2, batch_size=8)
        self.assertNotIn("accuracy", t.history)
        self.assertEqual([round(v, 4) for v in t.history["loss"]], want, out)
        with self.assertRaises(castor.InvalidArgumentError):
            castor.train(path, x, y[:, :3])

    def test_callback_stops_and_errors(self):
        rng = np.random.default_rng(2)
        x = rng.uniform(0, 1, size=(40, 784)).astype(np.float32)
        y = rng.integers(0, 10, size=40)
        t = castor.train(SMALL, x, y, epochs=5, callback=lambda e, logs: e < 1)
        self.assertEqual(len(t.history["loss"]), 2)
        with self.assertRaises(castor.InvalidArgumentError) as e:
            castor.train(SMALL, x, y + 10)
        self.assertIn("not a class index in [0, 10)", str(e.exception))
        with self.assertRaises(castor.InvalidArgumentError):
            castor.train(SMALL, x[:, :700], y)
        with self.assertRaises(castor.InvalidArgumentError):
            castor.train(SMALL, x, y, optimizer="adam", no_such_option=1)
        with self.assertRaises(castor.InvalidArgumentError) as e:
            castor.train(SMALL, x, y, optimizer="adam", beta_1=2.0)
        self.assertIn("beta_1", str(e.exception))


class Build(unittest.TestCase):
    def test_build_executable(self):
        if not shutil.which(os.environ.get("CC", "cc")):
            self.skipTest("no C compiler")
        m = castor.compile(SMALL, policy="mixed_float16")
        exe = m.build(tmp("small_exe"))
        x = rand((3, 784))
        np.save(tmp("bx.npy"), x)
        subprocess.run([exe, "--input", tmp("bx.npy"), "--output", tmp("by.npy")], check=True, capture_output=True)
        self.assertTrue(np.array_equal(np.load(tmp("by.npy")), m(x)))
        m.build(tmp("small.o"), emit="obj")
        self.assertTrue(os.path.exists(tmp("small.o")) and os.path.exists(tmp("small.h")))
        with self.assertRaises(castor.Error) as e:
            m.build(tmp("no/such/dir/exe"))
        self.assertIn("error", str(e.exception))


class Pip(unittest.TestCase):
    def test_pip_install(self):
        # pip install of python/ (a copy: pip writes build files beside the
        # sources), with Debian's setuptools, into a target directory; the
        # installed module finds libcastor through CASTOR_LIB
        if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            self.skipTest("no pip (Debian: apt-get install python3-pip)")
        src = tmp("python_src")
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(os.path.join(SRC, "python"), src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        target = tmp("pip_target")
        shutil.rmtree(target, ignore_errors=True)
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                            "--target", target, src], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        env = dict(os.environ, PYTHONPATH=target, CASTOR_LIB=os.path.join(BIN, "lib", "libcastor.so.0"))
        code = ("import castor, numpy as np; m = castor.compile(%r); print(m(np.ones((2, 784), np.float32)).shape, "
                "castor.__file__)" % SMALL)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=TMP)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith("(2, 10) " + target), p.stdout)
        # pyproject.toml's version is the library's (include/castor.h), by this check
        with open(os.path.join(SRC, "python", "pyproject.toml")) as f:
            pv = re.search(r'^version = "([^"]+)"', f.read(), re.M)[1]
        self.assertEqual(pv, castor.__version__, "python/pyproject.toml's version is not castor.h's")
        # without a library to load: an ImportError that says what to do
        env = dict(os.environ, PYTHONPATH=target, CASTOR_LIB=tmp("nowhere/libcastor.so.0"))
        p = subprocess.run([sys.executable, "-c", "import castor"], capture_output=True, text=True, env=env, cwd=TMP)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("cannot find libcastor", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"] + ONLY)
