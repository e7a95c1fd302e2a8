# SPDX-License-Identifier: Apache-2.0
"""_core.py: castor.compile and the Model it returns, over castor.h.

A Model owns one castor context (castor.h: a context and what it created are
used from one thread at a time), the loaded model and its compiled program.
Calling it runs the program on NumPy arrays: an input array that is
C-contiguous, of the input's dtype and 64-byte aligned is passed to the
program as it is (castor_tensor_wrap: no copy); any other array is converted
into an aligned copy first (as castor run converts .npy inputs). Outputs are
new NumPy arrays the program writes into directly.
"""
import ctypes
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

from . import _lib

_LIB, LIBRARY_PATH = _lib.load()

# castor_status -> exception class (castor.h's enum order)
OK = 0


class Error(Exception):
    """A castor failure: `status` is castor.h's status name, `message` the
    full diagnostic text (file:line:col: error: ... with the source line)."""

    status = "CASTOR_ERR"

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class InvalidArgumentError(Error, ValueError):
    status = "CASTOR_ERR_INVALID_ARGUMENT"


class ParseError(Error):
    status = "CASTOR_ERR_PARSE"


class IOError(Error, OSError):  # noqa: A001 (castor's status name; also an OSError)
    status = "CASTOR_ERR_IO"


class UnsupportedError(Error):
    status = "CASTOR_ERR_UNSUPPORTED"


class CodegenError(Error):
    status = "CASTOR_ERR_CODEGEN"


class DeviceError(Error):
    status = "CASTOR_ERR_DEVICE"


class NoMemoryError(Error, MemoryError):
    status = "CASTOR_ERR_NOMEM"


class InternalError(Error):
    status = "CASTOR_ERR_INTERNAL"


_BY_STATUS = [None, InvalidArgumentError, ParseError, IOError, UnsupportedError, CodegenError, DeviceError,
              NoMemoryError, InternalError]


def _raise(status, ctx=None, what=""):
    text = ""
    if ctx:
        text = (_LIB.castor_context_last_error(ctx) or b"").decode("utf-8", "replace").rstrip("\n")
    if not text:
        text = "%s%s" % (what + ": " if what else "", _LIB.castor_status_string(status).decode())
    cls = _BY_STATUS[status] if 0 < status < len(_BY_STATUS) else Error
    err = cls(text)
    # OSError's constructor does not keep our message as str(): set it
    err.args = (text,)
    raise err


def _check(status, ctx=None, what=""):
    if status != OK:
        _raise(status, ctx, what)


# castor_dtype <-> numpy. bfloat16 has no NumPy dtype: its tensors are uint16
# arrays of the bits (as ml_dtypes' bfloat16 stores them).
F32, F16, BF16, I32, I64, BOOL = range(6)
DTYPE_NAMES = ["float32", "float16", "bfloat16", "int32", "int64", "bool"]
_NP = {F32: np.dtype(np.float32), F16: np.dtype(np.float16), BF16: np.dtype(np.uint16), I32: np.dtype(np.int32),
       I64: np.dtype(np.int64), BOOL: np.dtype(np.bool_)}

TARGETS = {"cpu": 0, "cuda": 1}


def aligned_empty(shape, dtype):
    """An uninitialized C-contiguous array whose data is 64-byte aligned."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + 64, dtype=np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + n].view(dtype).reshape(shape)


def _bytes(s):
    if s is None:
        return None
    if isinstance(s, (list, tuple)):
        s = ",".join(s)
    return os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode()


class _Context:
    """A castor context, destroyed last (after what was created from it)."""

    def __init__(self):
        h = ctypes.c_void_p()
        _check(_LIB.castor_context_create(ctypes.byref(h)))
        self.h = h

    def warnings(self):
        return (_LIB.castor_context_last_warnings(self.h) or b"").decode("utf-8", "replace")

    def __del__(self):
        if getattr(self, "h", None) and _LIB:
            _LIB.castor_context_destroy(self.h)
            self.h = None


class _Tensor:
    """A castor_tensor over a NumPy array's buffer (castor_tensor_wrap). The
    array is kept alive as long as the tensor."""

    def __init__(self, ctx, array, dtype_id):
        self.array = array
        dims = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
        h = ctypes.c_void_p()
        _check(_LIB.castor_tensor_wrap(ctx.h, dtype_id, array.ndim, dims, array.ctypes.data, ctypes.byref(h)), ctx.h)
        self.h = h

    def __del__(self):
        if getattr(self, "h", None) and _LIB:
            _LIB.castor_tensor_destroy(self.h)
            self.h = None


def as_input(x, dtype_id, name):
    """x as an array castor can read in place: itself when it already is one
    (no copy), else an aligned converted copy."""
    want = _NP[dtype_id]
    a = np.asarray(x)
    if dtype_id in (F32, F16) and not (a.dtype.kind in "fiub"):
        raise InvalidArgumentError("input '%s': expected a numeric array (converted to %s), got dtype %s" %
                                   (name, DTYPE_NAMES[dtype_id], a.dtype))
    if dtype_id in (I32, I64) and a.dtype.kind not in "iub":
        raise InvalidArgumentError("input '%s' is %s: expected an integer array, got dtype %s" %
                                   (name, DTYPE_NAMES[dtype_id], a.dtype))
    if dtype_id == BF16 and a.dtype != want:
        raise InvalidArgumentError("input '%s' is bfloat16: pass its bits as a uint16 array, got dtype %s" %
                                   (name, a.dtype))
    if a.dtype == want and a.flags.c_contiguous and a.ctypes.data % 64 == 0:
        return a
    out = aligned_empty(a.shape, want)
    out[...] = a
    return out


class TensorSpec:
    """An input or output of a compiled program: name, dtype (a NumPy dtype;
    uint16 for bfloat16), castor's dtype name and shape (None: the batch)."""

    def __init__(self, info):
        self.name = info.name.decode()
        self.dtype_name = DTYPE_NAMES[info.dtype]
        self.dtype = _NP[info.dtype]
        self.dtype_id = info.dtype
        self.shape = tuple(None if info.dims[r] < 0 else int(info.dims[r]) for r in range(info.rank))

    def __repr__(self):
        dims = ",".join("N" if d is None else str(d) for d in self.shape)
        return "TensorSpec(%r, %s[%s])" % (self.name, self.dtype_name, dims)


def _specs(prog, n, getter):
    out = []
    for i in range(n):
        info = _lib.TensorInfo()
        _check(getter(prog, i, ctypes.byref(info)))
        out.append(TensorSpec(info))
    return out


def _program_specs(prog):
    return (_specs(prog, _LIB.castor_program_num_inputs(prog), _LIB.castor_program_input_info),
            _specs(prog, _LIB.castor_program_num_outputs(prog), _LIB.castor_program_output_info))


def run_program(ctx, prog, inputs, in_specs, out_specs, outs=None):
    """Runs prog on arrays; returns the output arrays (new aligned ones, or
    `outs`' when given: written in place)."""
    if len(inputs) != len(in_specs):
        raise InvalidArgumentError("the program takes %d input(s) (%s), got %d" %
                                   (len(in_specs), ", ".join(s.name for s in in_specs), len(inputs)))
    arrays = [as_input(x, s.dtype_id, s.name) for x, s in zip(inputs, in_specs)]
    batch = None
    for a, s in zip(arrays, in_specs):
        if s.shape and s.shape[0] is None and a.ndim >= 1:
            batch = a.shape[0]
            break
    if outs is None:
        outs = []
        for s in out_specs:
            shape = tuple(batch if d is None else d for d in s.shape)
            if None in shape:  # a batch dimension with no batched input: as the runtime decides (1)
                shape = tuple(1 if d is None else d for d in shape)
            outs.append(aligned_empty(shape, s.dtype))
    else:
        for o, s in zip(outs, out_specs):
            if not (isinstance(o, np.ndarray) and o.dtype == s.dtype and o.flags.c_contiguous and
                    o.flags.writeable and o.ctypes.data % 64 == 0):
                raise InvalidArgumentError("output '%s': out= arrays must be writable, C-contiguous, 64-byte "
                                           "aligned %s arrays (castor.empty makes them)" % (s.name, s.dtype))
    t_in = [_Tensor(ctx, a, s.dtype_id) for a, s in zip(arrays, in_specs)]
    t_out = [_Tensor(ctx, o, s.dtype_id) for o, s in zip(outs, out_specs)]
    ins = (ctypes.c_void_p * max(len(t_in), 1))(*[t.h.value for t in t_in])
    ots = (ctypes.c_void_p * max(len(t_out), 1))(*[t.h.value for t in t_out])
    _check(_LIB.castor_program_run(prog, ins, len(t_in), ots, len(t_out)), ctx.h)
    return outs


class Model:
    """A compiled model: call it on NumPy arrays (one per input, in order).
    Returns one array for a single-output model, else a tuple."""

    def __init__(self, source, options, load_opts, keep):
        self._ctx = _Context()
        self._keep = keep  # the bytes the option structs point at
        self._copts = options
        self._source = source
        self._m = ctypes.c_void_p()
        self._p = ctypes.c_void_p()
        if source["text"] is not None:
            text = source["text"]
            st = _LIB.castor_model_load_string(self._ctx.h, source["name"], text, len(text), ctypes.byref(load_opts),
                                               ctypes.byref(self._m))
        else:
            st = _LIB.castor_model_load_file(self._ctx.h, source["path"], ctypes.byref(load_opts),
                                             ctypes.byref(self._m))
        _check(st, self._ctx.h)
        _check(_LIB.castor_compile(self._m, ctypes.byref(options), ctypes.byref(self._p)), self._ctx.h)
        self.warnings = self._ctx.warnings()
        self.inputs, self.outputs = _program_specs(self._p)

    def __call__(self, *inputs, out=None):
        outs = run_program(self._ctx, self._p, inputs, self.inputs, self.outputs,
                           None if out is None else (list(out) if isinstance(out, (list, tuple)) else [out]))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def dump(self, casts=False, emit="ir"):
        """What castor dump prints: the final IR (emit="ir"), the cast report
        (casts=True), "llvm", "ptx" (target cuda), "dot" or "summary"."""
        kinds = {"ir": 0, "casts": 1, "llvm": 2, "ptx": 3, "dot": 4, "summary": 5}
        kind = "casts" if casts else emit
        if kind not in kinds:
            raise InvalidArgumentError("dump: emit must be one of %s, got %r" % (", ".join(kinds), emit))
        text = ctypes.c_char_p()
        _check(_LIB.castor_model_dump_text(self._m, ctypes.byref(self._copts), kinds[kind], ctypes.byref(text)),
               self._ctx.h)
        return text.value.decode("utf-8", "replace")

    def summary(self):
        """The model summary (castor summary): layers, output shapes,
        parameters, compute dtypes and weight bytes under the policy."""
        return self.dump(emit="summary")

    def check(self, *inputs, tolerance=0.0, batch=1, seed=1, layers=None, search=True):
        """castor check: this build against float32, layer by layer. Returns
        the report as data (the dict `castor check --json` prints: verdict,
        summary, layers, fp32_layers fix). inputs: arrays, or none for
        seeded random inputs of `batch` rows."""
        o = _lib.CheckOptions()
        _LIB.castor_check_options_init(ctypes.byref(o))
        o.compile = self._copts
        o.tolerance, o.batch, o.seed, o.search = float(tolerance), int(batch), int(seed), int(bool(search))
        lb = _bytes(layers)
        o.layers = lb
        tensors = []
        if inputs:
            if len(inputs) != len(self.inputs):
                raise InvalidArgumentError("check: the model takes %d input(s), got %d" %
                                           (len(self.inputs), len(inputs)))
            tensors = [_Tensor(self._ctx, as_input(x, s.dtype_id, s.name), s.dtype_id)
                       for x, s in zip(inputs, self.inputs)]
        arr = (ctypes.c_void_p * max(len(tensors), 1))(*[t.h.value for t in tensors])
        rep = ctypes.c_void_p()
        _check(_LIB.castor_check(self._m, ctypes.byref(o), arr if tensors else None, len(tensors),
                                 ctypes.byref(rep)), self._ctx.h)
        try:
            text = _LIB.castor_check_report_format(rep, 1)  # CASTOR_CHECK_JSON
            return json.loads(text.decode("utf-8"))
        finally:
            _LIB.castor_check_report_destroy(rep)

    def build(self, path, emit="exe", cpu=None, prefix=None):
        """castor build: this model ahead of time into `path`, an executable
        (emit="exe", which needs a C compiler) or an object file and C
        header (emit="obj"), with the options it was compiled with. Runs the
        castor executable that belongs to this library (see docs/python.md).
        Returns path."""
        exe = castor_executable()
        tmp = None
        try:
            if self._source["text"] is not None:
                tmp = tempfile.mkdtemp(prefix="castor-build-")
                model = os.path.join(tmp, "model.cast")
                with open(model, "wb") as f:
                    f.write(self._source["text"])
            else:
                model = os.fsdecode(self._source["path"])
            cmd = [exe, "build", model, "-o", os.fspath(path), "--emit=" + emit] + self._cli_options()
            if cpu:
                cmd.append("--cpu=" + cpu)
            if prefix:
                cmd.append("--prefix=" + prefix)
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise Error(p.stderr.rstrip("\n") or "castor build exited %d" % p.returncode)
            return path
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)

    def _cli_options(self):
        o, args = self._copts, []
        if o.target != 0:
            raise UnsupportedError("build: the model was compiled for cuda; castor build makes CPU executables")
        for flag, v in (("--policy", o.policy), ("--fp32-ops", o.fp32_ops), ("--fp32-layers", o.fp32_layers)):
            if v:
                args.append("%s=%s" % (flag, v.decode()))
        if o.keep_16bit_outputs:
            args.append("--keep-16bit-outputs")
        if o.pad8:
            args.append("--pad8")
        if o.batch:
            args += ["--batch", str(o.batch)]
        args += ["-O", str(o.opt_level)]
        lo = self._source["load"]
        if lo.weights_path:
            args += ["--weights", lo.weights_path.decode()]
        if lo.seed:
            args += ["--weights-seed", str(lo.seed)]
        return args

    def __del__(self):
        if getattr(self, "_p", None) is not None and _LIB:
            _LIB.castor_program_destroy(self._p)
            _LIB.castor_model_destroy(self._m)
            self._p = self._m = None

    def __repr__(self):
        return "<castor.Model %s -> %s>" % (self.inputs, self.outputs)


def castor_executable():
    """The castor command line tool of this library: $CASTOR_CLI, else the
    one in the build tree or install prefix of libcastor, else on $PATH."""
    env = os.environ.get("CASTOR_CLI")
    if env:
        return env
    libdir = os.path.dirname(os.path.realpath(LIBRARY_PATH)) if os.path.sep in LIBRARY_PATH else ""
    for c in (os.path.join(libdir, "..", "castor"), os.path.join(libdir, "..", "bin", "castor"),
              os.path.join(libdir, "..", "..", "bin", "castor")):
        if libdir and os.access(c, os.X_OK) and os.path.isfile(c):
            return os.path.normpath(c)
    found = shutil.which("castor")
    if found:
        return found
    raise Error("cannot find the castor executable (for build): set CASTOR_CLI, or put castor on PATH")


def model_source(path_or_text, weights=None, weights_seed=0, batch=None, dims=None):
    """What compile loads: a file path, or model text (a str with a newline,
    or bytes), with the load options (batch and dims: an ONNX model's batch
    and named dimensions bound at import, as --batch and --dim); the dict
    keeps their bytes alive."""
    lo = _lib.LoadOptions()
    _LIB.castor_load_options_init(ctypes.byref(lo))
    lo.seed = int(weights_seed)
    wb = _bytes(weights)
    lo.weights_path = wb
    keep = [wb]
    if batch is not None:
        lo.batch = int(batch)
    if dims:
        if not isinstance(dims, dict):
            raise InvalidArgumentError("dims: expected a dict of name: size, got %s" % type(dims).__name__)
        names = (ctypes.c_char_p * len(dims))(*[_bytes(k) for k in dims])
        values = (ctypes.c_int64 * len(dims))(*[int(v) for v in dims.values()])
        lo.dim_names, lo.dim_values, lo.n_dims = names, values, len(dims)
        keep += [names, values]
    src = {"text": None, "path": None, "name": b"<string>", "load": lo, "keep": keep}
    if isinstance(path_or_text, bytes):
        src["text"] = path_or_text
    elif isinstance(path_or_text, str) and "\n" in path_or_text:
        src["text"] = path_or_text.encode()
    elif isinstance(path_or_text, (str, os.PathLike)):
        src["path"] = os.fsencode(path_or_text)
    else:
        raise InvalidArgumentError("compile: expected a model file path or model text, got %s" %
                                   type(path_or_text).__name__)
    return src


def compile_options(policy=None, target="cpu", batch=None, threads=None, cpu=None, fp32_ops=None, fp32_layers=None,
                    keep_16bit_outputs=False, pad8=False, opt_level=2, device=None, sm=None):
    """castor_compile_options from keyword arguments (castor.h documents
    each); returns (options, the bytes they point at)."""
    o = _lib.CompileOptions()
    _LIB.castor_compile_options_init(ctypes.byref(o))
    if target not in TARGETS:
        raise InvalidArgumentError("target must be 'cpu' or 'cuda', got %r" % (target,))
    keep = [_bytes(policy), _bytes(fp32_ops), _bytes(fp32_layers), _bytes(cpu), _bytes(sm)]
    o.target = TARGETS[target]
    o.policy, o.fp32_ops, o.fp32_layers, o.cpu, o.sm = keep
    o.opt_level = int(opt_level)
    o.keep_16bit_outputs, o.pad8 = int(bool(keep_16bit_outputs)), int(bool(pad8))
    if batch is not None:
        if int(batch) < 1:
            raise InvalidArgumentError("batch must be a positive integer, got %r" % (batch,))
        o.batch = int(batch)
    if threads is not None:
        if not 1 <= int(threads) <= 1024:
            raise InvalidArgumentError("threads must be from 1 to 1024, got %r" % (threads,))
        o.threads = int(threads)
    if device is not None:
        o.device = int(device)
    return o, keep


def compile(path_or_text, policy=None, target="cpu", batch=None, threads=None, weights=None, weights_seed=0,
            cpu=None, fp32_ops=None, fp32_layers=None, keep_16bit_outputs=False, pad8=False, opt_level=2,
            device=None, sm=None, dims=None):
    """Loads and compiles a model (.cast, .keras or .onnx file, or .cast
    text) as castor run does; returns a callable Model.

    policy: a Keras dtype policy overriding the model's ("mixed_float16",
    ...); target: "cpu" or "cuda"; batch: bind the batch (static shapes);
    threads: CPU threads a run uses (default all, or $CASTOR_NUM_THREADS);
    weights: a .safetensors file instead of the model's weights line;
    dims: an ONNX model's named dimensions bound at compile time
    ({"sequence": 128}, as --dim); the rest as castor_compile_options in
    castor.h. Raises a castor.Error
    subclass with castor's located message on failure."""
    o, keep = compile_options(policy, target, batch, threads, cpu, fp32_ops, fp32_layers, keep_16bit_outputs, pad8,
                              opt_level, device, sm)
    src = model_source(path_or_text, weights, weights_seed, batch, dims)
    return Model(src, o, src["load"], keep + src["keep"])


def empty(shape, dtype=np.float32):
    """A 64-byte aligned array: what castor reads and writes without a copy
    (for Model(..., out=...))."""
    return aligned_empty(tuple(shape), dtype)


def version():
    """"0.1.0 (LLVM 19.1.7)": castor_version() of the loaded library."""
    return _LIB.castor_version().decode()
