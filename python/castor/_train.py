# SPDX-License-Identifier: Apache-2.0
"""_train.py: castor.train, the fit loop of `castor train` over castor.h's
training entry points (castor_compile_train: one run is one step;
castor_compile_eval for validation; castor_program_copy_weights between
them), on NumPy arrays.

The loop is the CLI's (tools/castor_train.c), so the same data, options and
seed give the same losses: the validation split taken from the end before
shuffling (floor(n * (1 - split)) samples train), the shuffle of
train/batch.c (splitmix64 + Fisher-Yates, seeded by (seed, epoch)),
batches of batch_size with a smaller last one, the epoch's loss the mean
over samples of each step's loss (before its update), accuracy by argmax.
"""
import ctypes
import math
import os
import time

import numpy as np

from . import _lib
from ._core import (_LIB, _NP, Error, InvalidArgumentError, _bytes, _check, _Context, _program_specs, aligned_empty,
                    compile_options, model_source, run_program)

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def shuffle_order(seed, epoch, n):
    """train/batch.c's rt_shuffle_order: the sample order of an epoch."""
    state = (seed ^ _mix64(((epoch + 1) * _GOLDEN) & _M64)) & _M64
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        m = i + 1
        threshold = ((1 << 64) - m) % m
        while True:
            state = (state + _GOLDEN) & _M64
            r = _mix64(state)
            if r >= threshold:
                break
        j = r % m
        order[i], order[j] = order[j], order[i]
    return order


_TRAIN_FIELDS = {
    "loss": "s", "from_logits": "b", "optimizer": "s", "learning_rate": "f", "momentum": "f", "nesterov": "b",
    "centered": "b", "loss_scale": "s", "loss_scale_min": "f", "beta_1": "f", "beta_2": "f", "epsilon": "f",
    "weight_decay": "f", "loss_scale_initial": "f", "loss_scale_growth_steps": "i", "clipnorm": "f",
    "clipvalue": "f", "global_clipnorm": "f", "lr_schedule": "s", "decay_steps": "i", "decay_rate": "f",
    "staircase": "b", "alpha": "f", "warmup_target": "f", "warmup_steps": "i",
}


def train_options(keep, boundaries=None, values=None, **kw):
    """castor_train_options from keyword arguments under castor.h's field
    names (castor train's options with '_' for '-')."""
    o = _lib.TrainOptions()
    _LIB.castor_train_options_init(ctypes.byref(o))
    for k, v in kw.items():
        if k not in _TRAIN_FIELDS:
            raise InvalidArgumentError("train: unknown option %r (options: %s)" % (k, ", ".join(sorted(_TRAIN_FIELDS))))
        if v is None:
            continue
        kind = _TRAIN_FIELDS[k]
        if kind == "s":
            b = _bytes(v)
            keep.append(b)
            setattr(o, k, b)
        else:
            setattr(o, k, {"b": lambda x: int(bool(x)), "i": int, "f": float}[kind](v))
    if boundaries is not None:
        arr = (ctypes.c_int64 * len(boundaries))(*boundaries)
        keep.append(arr)
        o.boundaries, o.n_boundaries = arr, len(boundaries)
    if values is not None:
        arr = (ctypes.c_double * len(values))(*values)
        keep.append(arr)
        o.values, o.n_values = arr, len(values)
    return o


class Training:
    """What castor.train returns: the history (a dict of per-epoch lists,
    Keras's History.history), the trained weights (save, model) and the
    training program's state (state)."""

    def __init__(self, ctx, m, step, topts, keep, source, copts_kw):
        self._ctx, self._m, self._step, self._topts, self._keep = ctx, m, step, topts, keep
        self._source, self._copts_kw = source, copts_kw
        self.history = {}

    def save(self, path):
        """Writes the trained weights: a .safetensors file the model's
        weights line loads, or (a model loaded from .keras) a .keras file.
        The file is replaced atomically."""
        p = _bytes(path)
        if os.fsdecode(p).endswith(".keras"):
            st = _LIB.castor_program_save_keras(self._step, self._m, ctypes.byref(self._topts), p)
        else:
            st = _LIB.castor_program_save_weights(self._step, p)
        _check(st, self._ctx.h)
        return path

    def state(self, name):
        """A state of the training program as an array: a weight
        ("dense.kernel"), a slot, or "optimizer.iterations"..."""
        t = ctypes.c_void_p()
        _check(_LIB.castor_program_get_state(self._step, _bytes(name), ctypes.byref(t)), self._ctx.h)
        try:
            return _tensor_to_array(t)
        finally:
            _LIB.castor_tensor_destroy(t)

    def model(self, **compile_kw):
        """The trained model compiled for inference (castor.compile's
        options; default: those train compiled with)."""
        import tempfile
        kw = dict(self._copts_kw)
        kw.update(compile_kw)
        with tempfile.TemporaryDirectory(prefix="castor-train-") as d:
            w = os.path.join(d, "weights.safetensors")
            self.save(w)
            src = self._source
            text = src["text"]
            from ._core import compile as _compile
            if text is not None:
                return _compile(text, weights=w, **kw)
            return _compile(os.fsdecode(src["path"]), weights=w, **kw)

    def __del__(self):
        if getattr(self, "_step", None) is not None and _LIB:
            _LIB.castor_program_destroy(self._step)
            _LIB.castor_model_destroy(self._m)
            self._step = self._m = None


def _tensor_to_array(t):
    """A copy of castor tensor t as an array."""
    dt = _NP[_LIB.castor_tensor_dtype(t)]
    rank = _LIB.castor_tensor_rank(t)
    dims = _LIB.castor_tensor_dims(t)
    shape = tuple(int(dims[r]) for r in range(rank))
    n = _LIB.castor_tensor_nbytes(t)
    buf = (ctypes.c_char * n).from_address(_LIB.castor_tensor_data(t)) if n else b""
    return np.frombuffer(bytes(buf), dtype=dt).reshape(shape).copy()


def _epoch(ctx, prog, x, y, specs, batch_size, order, accuracy, classes):
    """One pass: (mean loss, accuracy) over the samples in `order`."""
    in_specs, out_specs = specs
    n = len(order)
    sum_loss, seen, correct = 0.0, 0, 0
    sparse = in_specs[1].dtype_id == 3  # int32 class indices
    for first in range(0, n, batch_size):
        idx = order[first:first + batch_size]
        # the batch gathered straight into aligned arrays the step reads in place
        xb = aligned_empty((len(idx),) + x.shape[1:], x.dtype)
        yb = aligned_empty((len(idx),) + y.shape[1:], y.dtype)
        np.take(x, idx, axis=0, out=xb)
        np.take(y, idx, axis=0, out=yb)
        outs = run_program(ctx, prog, [xb, yb], in_specs, out_specs)
        loss = float(outs[1].reshape(-1)[0])
        rows = len(idx)
        sum_loss += loss * rows
        seen += rows
        if accuracy:
            p = outs[0].reshape(rows, -1)
            want = yb.reshape(rows) if sparse else yb.reshape(rows, -1).argmax(axis=1)
            correct += int((p.argmax(axis=1) == want).sum())
    return (sum_loss / seen if seen else math.nan), (correct / seen if seen else math.nan)


def train(model, x, y, epochs=1, batch_size=32, validation_split=0.0, validation_data=None, shuffle=True, seed=1,
          callback=None, policy=None, target="cpu", threads=None, cpu=None, weights=None, weights_seed=0,
          fp32_layers=None, fp32_ops=None, boundaries=None, values=None, verbose=False, **train_kw):
    """Trains `model` (a .cast or .keras file, or .cast text) on arrays x
    (samples first, the model's input shape after) and y (int class
    indices [n] for sparse categorical cross-entropy, else float targets),
    as castor train does. Training options are castor train's, by
    castor_train_options' names: loss, optimizer, learning_rate, momentum,
    ..., lr_schedule with decay_steps ... or boundaries/values; the model's
    compile line gives the defaults.

    callback(epoch, logs) runs after each epoch (epoch from 0; logs: loss,
    accuracy, val_loss, val_accuracy as castor train prints them, and
    loss_scale under a dynamic scale); returning False stops training.
    Returns a Training: .history (dict of per-epoch lists), .save(path),
    .model() (the trained model compiled for inference), .state(name)."""
    copts_kw = dict(policy=policy, target=target, threads=threads, cpu=cpu, fp32_layers=fp32_layers,
                    fp32_ops=fp32_ops)
    co, keep = compile_options(**copts_kw)
    src = model_source(model, weights, weights_seed)
    keep += src["keep"]
    ctx = _Context()
    m = ctypes.c_void_p()
    if src["text"] is not None:
        _check(_LIB.castor_model_load_string(ctx.h, src["name"], src["text"], len(src["text"]),
                                             ctypes.byref(src["load"]), ctypes.byref(m)), ctx.h)
    else:
        _check(_LIB.castor_model_load_file(ctx.h, src["path"], ctypes.byref(src["load"]), ctypes.byref(m)), ctx.h)
    to = train_options(keep, boundaries, values, **train_kw)
    step, ev = ctypes.c_void_p(), ctypes.c_void_p()
    st = _LIB.castor_compile_train(m, ctypes.byref(co), ctypes.byref(to), ctypes.byref(step))
    if st != 0:
        err_ctx = ctx
        _LIB.castor_model_destroy(m)
        _check(st, err_ctx.h)
    result = Training(ctx, m, step, to, keep, src, {k: v for k, v in copts_kw.items() if v is not None})
    _check(_LIB.castor_compile_eval(m, ctypes.byref(co), ctypes.byref(to), ctypes.byref(ev)), ctx.h)
    try:
        step_specs, eval_specs = _program_specs(step), _program_specs(ev)
        if len(step_specs[0]) != 2:
            raise InvalidArgumentError("train: training needs a model with one input, it has %d" %
                                       (len(step_specs[0]) - 1))
        x, y = np.asarray(x), np.asarray(y)
        xs, ys = step_specs[0]
        if x.ndim < 1 or y.ndim < 1 or x.shape[0] != y.shape[0]:
            raise InvalidArgumentError("train: x and y must hold the same number of samples (first dimension), got "
                                       "shapes %s and %s" % (x.shape, y.shape))
        want = tuple(d for d in xs.shape[1:])
        if x.shape[1:] != want:
            raise InvalidArgumentError("train: x has samples of shape %s; the model's input '%s' takes %s" %
                                       (x.shape[1:], xs.name, want))
        classes = step_specs[1][0].shape[-1] if step_specs[1][0].shape else 1
        x = np.ascontiguousarray(x, dtype=np.float32)
        if ys.dtype_id == 3:  # sparse labels: int32 [n], each in [0, classes)
            if y.dtype.kind not in "iu" and not (y.dtype.kind == "f" and np.all(np.floor(y) == y)):
                raise InvalidArgumentError("train: the loss takes class indices (int32 [n]); y has dtype %s" % y.dtype)
            y = y.reshape(y.shape[0]) if y.ndim == 2 and y.shape[1] == 1 else y
            if y.ndim != 1:
                raise InvalidArgumentError("train: the loss takes one class index per sample; y has shape %s (one-hot "
                                           "labels go with loss='categorical_crossentropy')" % (y.shape,))
            bad = (y < 0) | (y >= classes)
            if bad.any():
                i = int(np.argmax(bad))
                raise InvalidArgumentError("train: label %s of sample %d is not a class index in [0, %d)" %
                                           (y[i], i, classes))
            y = y.astype(np.int32)
        else:
            y = np.ascontiguousarray(y, dtype=np.float32)
            if y.shape[1:] != tuple(ys.shape[1:]):
                raise InvalidArgumentError("train: targets of shape %s per sample; the loss takes %s" %
                                           (y.shape[1:], tuple(ys.shape[1:])))
        n = x.shape[0]
        xv = yv = None
        if validation_data is not None and validation_split:
            raise InvalidArgumentError("train: validation_split and validation_data exclude each other")
        if validation_split:
            if not 0 <= validation_split < 1:
                raise InvalidArgumentError("validation_split must be in [0, 1), got %g" % validation_split)
            split = int(math.floor(n * (1.0 - validation_split)))
            if split <= 0 or split >= n:
                raise InvalidArgumentError("the dataset has %d sample%s, too few to split into training and "
                                           "validation sets with validation_split=%g" %
                                           (n, "" if n == 1 else "s", validation_split))
            x, xv, y, yv = x[:split], x[split:], y[:split], y[split:]
        elif validation_data is not None:
            xv = np.ascontiguousarray(validation_data[0], dtype=np.float32)
            yv = np.asarray(validation_data[1]).astype(y.dtype)
        n = x.shape[0]
        if n == 0:
            raise InvalidArgumentError("train: no training samples")
        if int(batch_size) < 1:
            raise InvalidArgumentError("train: batch_size must be a positive integer, got %r" % (batch_size,))
        loss_name = train_kw.get("loss")
        if loss_name is None:  # the model's compile line, as castor_compile_train takes it
            mo = _lib.TrainOptions()
            _LIB.castor_model_train_options(m, ctypes.byref(mo))
            loss_name = mo.loss.decode() if mo.loss else None
        accuracy = loss_name is None or loss_name not in ("mean_squared_error", "mse")
        hist = result.history
        for e in range(int(epochs)):
            t0 = time.monotonic()
            order = shuffle_order(int(seed), e, n) if shuffle else list(range(n))
            loss, acc = _epoch(ctx, step, x, y, step_specs, int(batch_size), order, accuracy, classes)
            logs = {"loss": loss}
            if accuracy:
                logs["accuracy"] = acc
            if xv is not None:
                _check(_LIB.castor_program_copy_weights(ev, step), ctx.h)
                vl, va = _epoch(ctx, ev, xv, yv, eval_specs, int(batch_size), list(range(xv.shape[0])), accuracy,
                                classes)
                logs["val_loss"] = vl
                if accuracy:
                    logs["val_accuracy"] = va
            try:
                logs["loss_scale"] = float(result.state("optimizer.loss_scale").reshape(-1)[0])
            except Error:  # no dynamic loss scale: no such state
                pass
            logs["seconds"] = time.monotonic() - t0
            for k, v in logs.items():
                hist.setdefault(k, []).append(v)
            if verbose:
                print("Epoch %d/%d - %s" % (e + 1, epochs, " - ".join("%s: %.4f" % kv for kv in logs.items())))
            if callback is not None and callback(e, dict(logs)) is False:
                break
    finally:
        _LIB.castor_program_destroy(ev)
    return result
