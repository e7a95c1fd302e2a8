/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ref.c: the float64 reference interpreter (contract in ref.h).
 *
 * Each node gets a malloc'ed double array of its element count at the run's
 * batch, computed from its sources' arrays and then rounded to the node's
 * dtype by ref_round. Arrays are freed after their last use. Every size is
 * checked against the node types before a loop touches memory, so a
 * malformed graph is an error message, never an overrun.
 */
#include "tests/ref/ref.h"

#include "util/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values beyond this many bytes are refused (a test never needs them). */
#define REF_MAX_BYTES ((int64_t)1 << 34)

/* x rounded to nearest even in a binary format with `mant` fraction bits,
 * smallest normal exponent emin and largest finite value max, in one step
 * from double (no double rounding through float32). */
static double round_to_format(double x, int mant, int emin, double max) {
  if (!isfinite(x) || x == 0) return x;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  e -= 1;
  if (e < emin) e = emin;
  double q = ldexp(1.0, e - mant);
  double r = nearbyint(x / q) * q; /* default rounding mode: ties to even */
  if (fabs(r) > max) return x > 0 ? INFINITY : -INFINITY;
  return r;
}

double ref_round(double x, ir_dtype dtype) {
  switch (dtype) {
  case DT_F32: return (double)(float)x;
  case DT_F16: return round_to_format(x, 10, -14, 65504.0);
  case DT_BF16: return round_to_format(x, 7, -126, 0x1.fep127);
  case DT_I32:
  case DT_I64:
  case DT_I1:
  case DT_COUNT: break;
  }
  return x;
}

/* The per-value storage rounding: only 16-bit floats (see ref.h). */
static double store(double x, ir_dtype dtype) {
  return dtype == DT_F16 || dtype == DT_BF16 ? ref_round(x, dtype) : x;
}

static bool is16(ir_dtype dtype) { return dtype == DT_F16 || dtype == DT_BF16; }

/* sigmoid of an op of dtype: in 16 bits 1 / (1 + exp(-x)) with exp(-x) and
 * its sum rounded, as XLA's decomposition (cg_math.c, cg_emit_unary_in) */
static double sigmoid_in(double x, ir_dtype dtype) {
  if (!is16(dtype)) return 1.0 / (1.0 + exp(-x));
  return 1.0 / store(1.0 + store(exp(-x), dtype), dtype);
}

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

static bool const_values(const ir_node *n, double *y, int64_t count, char *err, size_t errlen) {
  const void *p = n->attr.data;
  if (!p) return FAIL("const %%%s (%s) has no data", n->name, n->attr.weight);
  for (int64_t i = 0; i < count; i++) {
    switch (n->type.dtype) {
    case DT_F32: y[i] = ((const float *)p)[i]; break;
    case DT_F16: y[i] = half_f16_to_f32(((const uint16_t *)p)[i]); break;
    case DT_BF16: y[i] = half_bf16_to_f32(((const uint16_t *)p)[i]); break;
    case DT_I32: y[i] = ((const int32_t *)p)[i]; break;
    case DT_I64: y[i] = (double)((const int64_t *)p)[i]; break;
    case DT_I1: y[i] = ((const uint8_t *)p)[i] != 0; break;
    case DT_COUNT:
      return FAIL("const %%%s has an invalid dtype", n->name);
    }
  }
  return true;
}

static bool cast_value(const ir_node *n, double x, double *out, char *err, size_t errlen) {
  ir_dtype to = n->attr.to;
  switch (to) {
  case DT_F32:
  case DT_F16:
  case DT_BF16: *out = ref_round(x, to); return true;
  case DT_I32:
  case DT_I64: {
    double lim = to == DT_I32 ? 0x1p31 : 0x1p63;
    double r = trunc(x); /* toward zero, as numpy's astype and ONNX's Cast */
    if (!(r >= -lim && r < lim))
      return FAIL("cast %%%s: %g does not fit %s", n->name, x, dtype_name(to));
    *out = r;
    return true;
  }
  case DT_I1: *out = x != 0; return true;
  case DT_COUNT: break;
  }
  return FAIL("cast %%%s: invalid target dtype", n->name);
}

/* integers and booleans: comparisons, logic, is_nan (eval_broadcast) */
#define CASTOR_REF_BOOL_OPS \
  case IR_OP_EQUAL: case IR_OP_LESS: case IR_OP_LESS_EQUAL: case IR_OP_LOGICAL_AND: case IR_OP_LOGICAL_OR: \
  case IR_OP_LOGICAL_XOR: case IR_OP_LOGICAL_NOT: case IR_OP_IS_NAN:

/* The training ops, for the inner switch over the unary ops. */
#define CASTOR_REF_TRAINING_OPS \
  case IR_OP_VARIABLE: case IR_OP_LITERAL: case IR_OP_MATMUL_NT: case IR_OP_MATMUL_TN: \
  case IR_OP_SUM_ROWS: case IR_OP_RELU_GRAD: case IR_OP_SIGMOID_GRAD: case IR_OP_TANH_GRAD: \
  case IR_OP_GELU_GRAD: case IR_OP_SILU_GRAD: case IR_OP_SOFTMAX_GRAD: case IR_OP_XENT: \
  case IR_OP_XENT_GRAD: case IR_OP_XENT_LOGITS: case IR_OP_XENT_LOGITS_GRAD: case IR_OP_MSE: \
  case IR_OP_MSE_GRAD: case IR_OP_ALL_FINITE: case IR_OP_SGD: case IR_OP_SGD_MOMENTUM: \
  case IR_OP_RMSPROP: case IR_OP_RMSPROP_MOMENTUM: case IR_OP_RMSPROP_CENTERED: \
  case IR_OP_RMSPROP_CENTERED_MOMENTUM: case IR_OP_ADAM: case IR_OP_COUNT_STEP: case IR_OP_LOSS_SCALE_UPDATE: \
  case IR_OP_ADAMW: case IR_OP_GRAD_NORM_SQ: case IR_OP_CLIP_SCALE: case IR_OP_CLIP_VALUE: \
  case IR_OP_LAYER_NORM_GRAD: case IR_OP_LAYER_NORM_XHAT: \
  case IR_OP_CONV2D: case IR_OP_CONV2D_INPUT_GRAD: case IR_OP_CONV2D_FILTER_GRAD: \
  case IR_OP_MAX_POOL2D: case IR_OP_AVG_POOL2D: case IR_OP_MAX_POOL2D_GRAD: case IR_OP_AVG_POOL2D_GRAD: \
  case IR_OP_BATCH_NORM: case IR_OP_BN_MEAN: case IR_OP_MOVING_UPDATE: \
  case IR_OP_GROUP_CONV2D: case IR_OP_GROUP_CONV2D_INPUT_GRAD: case IR_OP_GROUP_CONV2D_FILTER_GRAD: \
  case IR_OP_BATCH_MATMUL: /* general tensors: batched matmul */

static double gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }

/* The target t[r,j] of a loss: int32 class indices or a dense row. */
static double target(const ir_node *n, const double *t, int64_t r, int64_t j, int64_t c) {
  return n->srcs[1]->type.dtype == DT_I32 ? (double)((int64_t)t[r] == j) : t[r * c + j];
}

/* The losses and their gradients (ir_ops.def's semantics, in double). */
static bool eval_loss(const ir_node *n, double *const *src, const int64_t *n_src, double *y, char *err,
                      size_t errlen) {
  int64_t c = n->srcs[0]->type.dims[1], rows = c > 0 ? n_src[0] / c : 0;
  const double *a = src[0], *t = src[1];
  double eps = n->attr.epsilon, seed = n->n_srcs > 2 ? src[2][0] : 1, total = 0;
  for (int64_t r = 0; r < rows; r++) {
    const double *ar = a + r * c;
    double *yr = y + r * c;
    if (n->srcs[1]->type.dtype == DT_I32 && !(t[r] >= 0 && t[r] < (double)c))
      return FAIL("%s %%%s: label %g of row %lld is outside [0, %lld)", ir_op_name(n->op), n->name, t[r],
                  (long long)r, (long long)c);
    if (n->op == IR_OP_XENT || n->op == IR_OP_XENT_GRAD) {
      double sum = 0, dot = 0;
      for (int64_t j = 0; j < c; j++) sum += ar[j];
      for (int64_t j = 0; j < c; j++) {
        double q = ar[j] / sum, tj = target(n, t, r, j, c);
        bool inside = (q >= eps && q <= 1 - eps) || isnan(q); /* clip keeps NaN, as jnp.clip */
        if (n->op == IR_OP_XENT) total -= tj * log(inside ? q : q < eps ? eps : 1 - eps);
        else dot += (inside ? -tj / q : 0) * q;
        if (n->op == IR_OP_XENT_GRAD && isnan(q)) dot = NAN;
        if (n->op == IR_OP_XENT_GRAD && isnan(q)) dot = NAN;
      }
      for (int64_t j = 0; n->op == IR_OP_XENT_GRAD && j < c; j++) {
        double q = ar[j] / sum, tj = target(n, t, r, j, c);
        double g = (q >= eps && q <= 1 - eps) || isnan(q) ? -tj / q : 0;
        yr[j] = seed / (double)rows * q * (g - dot);
      }
    } else if (n->op == IR_OP_XENT_LOGITS || n->op == IR_OP_XENT_LOGITS_GRAD) {
      double mx = -INFINITY, se = 0, st = 0, tz = 0;
      for (int64_t j = 0; j < c; j++) mx = ar[j] > mx ? ar[j] : mx;
      for (int64_t j = 0; j < c; j++) se += exp(ar[j] - mx), st += target(n, t, r, j, c), tz += target(n, t, r, j, c) * ar[j];
      if (n->op == IR_OP_XENT_LOGITS) total += st * (mx + log(se)) - tz;
      for (int64_t j = 0; n->op == IR_OP_XENT_LOGITS_GRAD && j < c; j++)
        yr[j] = seed / (double)rows * (exp(ar[j] - mx) / se * st - target(n, t, r, j, c));
    } else { /* mse, mse_grad */
      for (int64_t j = 0; j < c; j++) {
        double d = ar[j] - t[r * c + j];
        if (n->op == IR_OP_MSE) total += d * d;
        else yr[j] = 2 * seed / ((double)rows * (double)c) * d;
      }
    }
  }
  if (n->op == IR_OP_XENT || n->op == IR_OP_XENT_LOGITS) y[0] = total / (double)rows;
  if (n->op == IR_OP_MSE) y[0] = total / ((double)rows * (double)c);
  return true;
}

/* An update op on its operand arrays, in place (ir_ops.def's semantics:
 * Keras 3's formulas, in double). */
static bool eval_update(const ir_node *n, double *const *src, const int64_t *n_src, int64_t batch) {
  (void)batch;
  const ir_attr *at = &n->attr;
  if (n->op == IR_OP_COUNT_STEP) {
    if (src[1][0] != 0) src[0][0] += 1;
    return true;
  }
  if (n->op == IR_OP_LOSS_SCALE_UPDATE) {
    double *scale = src[0], *count = src[1];
    if (src[2][0] != 0) {
      if (count[0] == (double)(at->period - 1)) scale[0] *= 2, count[0] = 0;
      else count[0] += 1;
    } else {
      scale[0] = scale[0] / 2 < at->min_scale ? at->min_scale : scale[0] / 2;
      count[0] = 0;
    }
    return true;
  }
  int w = ir_op_writes(n->op);
  int64_t len = n_src[0];
  for (int s = 1; s <= w; s++)
    if (n_src[s] != len) return false;
  double lr = src[w + 1][0], scale = src[w + 2][0];
  if (src[w + 3][0] == 0) return true; /* a skipped step */
  double *v = src[0], *g = src[w];
  for (int64_t i = 0; i < len; i++) {
    double gi = g[i] / scale;
    if (n->op == IR_OP_SGD) {
      v[i] -= lr * gi;
    } else if (n->op == IR_OP_SGD_MOMENTUM) {
      double *m = src[1];
      m[i] = at->momentum * m[i] - lr * gi;
      v[i] += at->nesterov ? at->momentum * m[i] - lr * gi : m[i];
    } else if (n->op != IR_OP_ADAM && n->op != IR_OP_ADAMW) { /* rmsprop: w, v, [a if centered], [m with momentum] */
      bool centered = n->op == IR_OP_RMSPROP_CENTERED || n->op == IR_OP_RMSPROP_CENTERED_MOMENTUM;
      bool momentum = n->op == IR_OP_RMSPROP_MOMENTUM || n->op == IR_OP_RMSPROP_CENTERED_MOMENTUM;
      double *vel = src[1];
      vel[i] = at->rho * vel[i] + (1 - at->rho) * gi * gi;
      double den = vel[i];
      if (centered) {
        double *a = src[2];
        a[i] = at->rho * a[i] + (1 - at->rho) * gi;
        den -= a[i] * a[i];
      }
      double inc = (lr * gi) / sqrt(den + at->epsilon);
      if (momentum) {
        double *m = src[w - 1];
        inc = m[i] = at->momentum * m[i] + inc;
      }
      v[i] -= inc;
    } else { /* adam */
      double *m = src[1], *vv = src[2], k = src[7][0] + 1;
      if (n->op == IR_OP_ADAMW) v[i] -= v[i] * at->weight_decay * lr; /* training options: AdamW */
      double alpha = lr * sqrt(1 - pow(at->beta_2, k)) / (1 - pow(at->beta_1, k));
      m[i] += (1 - at->beta_1) * (gi - m[i]);
      vv[i] += (1 - at->beta_2) * (gi * gi - vv[i]);
      v[i] -= alpha * m[i] / (sqrt(vv[i]) + at->epsilon);
    }
  }
  return true;
}

/* ---- general tensors: layout ops ---- */

#define CASTOR_REF_LAYOUT_OPS \
  case IR_OP_RESHAPE: case IR_OP_TRANSPOSE: case IR_OP_CONCAT: case IR_OP_STRIDED_SLICE: \
  case IR_OP_PAD_CONSTANT: case IR_OP_GATHER: case IR_OP_GATHER_GRAD:

/* t's dims with N = rows; their product. */
static int64_t concrete(const ir_type *t, int64_t rows, int64_t *d) {
  int64_t n = 1;
  for (int r = 0; r < t->rank; r++) d[r] = t->dims[r] == IR_DIM_BATCH ? rows : t->dims[r], n *= d[r];
  return n;
}

/* The layout ops, written from their semantics by coordinates (not the
 * index maps of codegen): y's coordinates c, x's coordinates from them. */
static bool eval_layout(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count,
                        int64_t batch, char *err, size_t errlen) {
  const ir_type *t = &n->type, *xt = &n->srcs[0]->type;
  int64_t yd[IR_MAX_RANK], xd[IR_MAX_RANK];
  if (concrete(t, batch, yd) != count) return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
  if (n->op == IR_OP_GATHER || n->op == IR_OP_GATHER_GRAD) {
    /* the table as [P, V, S], the gathered values as [P, Q, S] */
    const ir_type *tab = n->op == IR_OP_GATHER ? xt : t;
    int ax = ir_concat_axis(tab, n->attr.axis);
    int64_t P = 1, S = 1, V = tab->dims[ax], Q = n_src[1];
    for (int r = 0; r < ax; r++) P *= tab->dims[r];
    for (int r = ax + 1; r < tab->rank; r++) S *= tab->dims[r];
    int64_t ny = n->op == IR_OP_GATHER ? P * Q * S : P * V * S, nx = n->op == IR_OP_GATHER ? P * V * S : P * Q * S;
    if (ny != count || nx != n_src[0]) return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
    if (n->op == IR_OP_GATHER) {
      for (int64_t p = 0; p < P; p++)
        for (int64_t q = 0; q < Q; q++) {
          double v = src[1][q]; /* negative: from the end; then clamped into [0, V) */
          v = v < 0 ? v + (double)V : v;
          int64_t k = v < 0 ? 0 : v >= (double)V ? V - 1 : (int64_t)v;
          for (int64_t s = 0; s < S; s++) y[(p * Q + q) * S + s] = src[0][(p * V + k) * S + s];
        }
    } else {
      for (int64_t e = 0; e < count; e++) y[e] = 0;
      for (int64_t q = 0; q < Q; q++) {
        double v = src[1][q]; /* the row the gather read */
        v = v < 0 ? v + (double)V : v;
        int64_t k = v < 0 ? 0 : v >= (double)V ? V - 1 : (int64_t)v;
        for (int64_t p = 0; p < P; p++)
          for (int64_t s = 0; s < S; s++) y[(p * V + k) * S + s] += src[0][(p * Q + q) * S + s];
      }
    }
    return true;
  }
  if (n->op == IR_OP_RESHAPE) {
    if (n_src[0] != count) return FAIL("reshape %%%s: element counts differ", n->name);
    memcpy(y, src[0], (size_t)count * sizeof *y);
    return true;
  }
  int64_t starts[IR_MAX_RANK] = {0}, counts[IR_MAX_RANK];
  if (n->op == IR_OP_STRIDED_SLICE && !ir_strided_slice_bounds(xt, &n->attr, starts, counts, err, errlen))
    return false;
  int ax = n->op == IR_OP_CONCAT ? ir_concat_axis(xt, n->attr.axis) : -1;
  for (int s = 0; s < n->n_srcs; s++)
    if (concrete(&n->srcs[s]->type, batch, xd) != n_src[s])
      return FAIL("%s %%%s: operand %d's size differs", ir_op_name(n->op), n->name, s + 1);
  concrete(xt, batch, xd);
  for (int64_t i = 0; i < count; i++) {
    int64_t c[IR_MAX_RANK], xc[IR_MAX_RANK], rem = i;
    for (int r = t->rank; r-- > 0;) c[r] = rem % yd[r], rem /= yd[r];
    int k = 0;
    bool inside = true;
    if (n->op == IR_OP_TRANSPOSE) {
      for (int r = 0; r < t->rank; r++) xc[n->attr.perm.v[r]] = c[r];
    } else if (n->op == IR_OP_CONCAT) {
      for (int r = 0; r < t->rank; r++) xc[r] = c[r];
      while (xc[ax] >= n->srcs[k]->type.dims[ax]) xc[ax] -= n->srcs[k++]->type.dims[ax];
      concrete(&n->srcs[k]->type, batch, xd);
    } else if (n->op == IR_OP_STRIDED_SLICE) {
      for (int r = 0; r < t->rank; r++) xc[r] = starts[r] + c[r] * n->attr.steps.v[r];
    } else if (n->op == IR_OP_PAD_CONSTANT) {
      for (int r = 0; r < t->rank; r++) {
        int64_t rel = c[r] - n->attr.starts.v[r], step = n->attr.steps.v[r];
        inside &= rel >= 0 && rel % step == 0 && rel / step < xd[r];
        xc[r] = inside ? rel / step : 0;
      }
    } else {
      return FAIL("%%%s: not a layout op", n->name);
    }
    int64_t xi = 0;
    for (int r = 0; r < t->rank; r++) xi = xi * xd[r] + xc[r];
    y[i] = inside ? src[k][xi] : n->attr.value;
  }
  return true;
}

/* ---- general tensors: numpy broadcasting ---- */

/* The flat index in a tensor of shape st (broadcast to yt, numpy rules) of
 * the element at flat index i of yt; N is `batch`. */
static int64_t broadcast_index(const ir_type *yt, const ir_type *st, int64_t batch, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int d = yt->rank - 1, sd = st->rank - 1; d >= 0; d--, sd--) {
    int64_t dim = yt->dims[d] == IR_DIM_BATCH ? batch : yt->dims[d];
    int64_t coord = dim > 0 ? i % dim : 0;
    i = dim > 0 ? i / dim : 0;
    if (sd < 0) continue;
    int64_t sdim = st->dims[sd] == IR_DIM_BATCH ? batch : st->dims[sd];
    if (sdim != 1) off += coord * stride;
    stride *= sdim;
  }
  return off;
}

/* The element-wise ops of broadcast operands, in double (ir_ops.def). */
static bool eval_broadcast(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count,
                           int64_t batch, char *err, size_t errlen) {
  for (int s = 0; s < n->n_srcs; s++)
    for (int64_t i = 0; i < count; i += count - i > 1 ? count - i - 1 : 1) /* first and last element */
      if (broadcast_index(&n->type, &n->srcs[s]->type, batch, i) >= n_src[s])
        return FAIL("%s %%%s: operand %d of %lld elements does not broadcast to %lld", ir_op_name(n->op), n->name, s,
                    (long long)n_src[s], (long long)count);
  for (int64_t i = 0; i < count; i++) {
    double v[3] = {0};
    for (int s = 0; s < n->n_srcs && s < 3; s++) v[s] = src[s][broadcast_index(&n->type, &n->srcs[s]->type, batch, i)];
    double a = v[0], b = v[1], c = v[2], r;
    bool nan = isnan(a) || isnan(b);
    ir_op o = n->op;
    if (o == IR_OP_ADD) r = a + b;
    else if (o == IR_OP_MUL) r = a * b;
    else if (o == IR_OP_SUB) r = a - b;
    else if (o == IR_OP_DIV) r = a / b;
    else if (o == IR_OP_MAXIMUM) r = nan ? NAN : a >= b ? a : b;
    else if (o == IR_OP_MINIMUM) r = nan ? NAN : a <= b ? a : b;
    else if (o == IR_OP_POW) r = pow(a, b);
    else if (o == IR_OP_SELECT_GE) r = b >= c ? a : 0.0;
    else if (o == IR_OP_POW_GRAD) r = a * c * pow(b, c - 1);
    else if (o == IR_OP_POW_GRAD_EXP) r = b > 0 ? a * c * log(b) : 0.0;
    else if (o == IR_OP_EXP) r = exp(a);
    else if (o == IR_OP_LOG) r = log(a);
    else if (o == IR_OP_SQRT) r = sqrt(a);
    else if (o == IR_OP_RSQRT) r = 1.0 / sqrt(a);
    else if (o == IR_OP_NEG) r = -a;
    else if (o == IR_OP_ABS) r = fabs(a);
    else if (o == IR_OP_ERF) r = erf(a);
    else if (o == IR_OP_LEAKY_RELU) r = a >= 0 || isnan(a) ? a : n->attr.alpha * a;
    else if (o == IR_OP_ELU) r = a > 0 || isnan(a) ? a : n->attr.alpha * expm1(a);
    else if (o == IR_OP_SOFTPLUS) r = isnan(a) ? a : fmax(a, 0) + log1p(exp(-fabs(a)));
    else if (o == IR_OP_HARD_SIGMOID && is16(n->type.dtype)) /* relu6(x + 3) / 6, x + 3 rounded (XLA's, cg_math.c) */
      r = isnan(a) ? a : fmin(6.0, fmax(0.0, store(a + 3, n->type.dtype))) / 6;
    else if (o == IR_OP_HARD_SIGMOID) r = isnan(a) ? a : fmin(1.0, fmax(0.0, a / 6 + 0.5));
    else if (o == IR_OP_CLIP) r = isnan(a) ? a : fmin(fmax(a, n->attr.min_value), n->attr.max_value);
    else if (o == IR_OP_SELECT) r = a != 0 ? b : c;
    else if (o == IR_OP_ABS_GRAD) r = b > 0 ? a : b < 0 ? -a : 0.0;
    else if (o == IR_OP_ERF_GRAD) r = a * 1.1283791670955126 * exp(-b * b);
    else if (o == IR_OP_LEAKY_RELU_GRAD) r = b >= 0 ? a : n->attr.alpha * a;
    else if (o == IR_OP_ELU_GRAD) r = b > 0 ? a : a * n->attr.alpha * exp(b);
    else if (o == IR_OP_HARD_SIGMOID_GRAD) r = b > -3 && b < 3 ? a / 6 : 0.0;
    else if (o == IR_OP_CLIP_GRAD) r = b < n->attr.min_value || b > n->attr.max_value ? 0.0 : a;
    /* integers and booleans (C's comparisons are false for NaN) */
    else if (o == IR_OP_EQUAL) r = a == b;
    else if (o == IR_OP_LESS) r = a < b;
    else if (o == IR_OP_LESS_EQUAL) r = a <= b;
    else if (o == IR_OP_LOGICAL_AND) r = a != 0 && b != 0;
    else if (o == IR_OP_LOGICAL_OR) r = a != 0 || b != 0;
    else if (o == IR_OP_LOGICAL_XOR) r = (a != 0) != (b != 0);
    else if (o == IR_OP_LOGICAL_NOT) r = a == 0;
    else if (o == IR_OP_IS_NAN) r = isnan(a);
    else return FAIL("%s %%%s: not a broadcast op", ir_op_name(n->op), n->name);
    y[i] = r;
  }
  return true;
}

/* Computes node n into y (count elements) from its source arrays. */
static bool eval(const ir_node *n, double *const *src, const int64_t *n_src, double *y,
                 int64_t count, int64_t batch, const double *const *inputs, int n_inputs,
                 ref_state *state, char *err, size_t errlen) {
  const ir_type *t = &n->type;
  switch (n->op) {
  case IR_OP_VARIABLE: {
    int64_t have = 0;
    double *v = state ? ref_state_get(state, n->attr.weight, &have) : NULL;
    if (!v) return FAIL("variable %%%s (%s) has no state", n->name, n->attr.weight);
    if (have != count) return FAIL("variable %%%s: state holds %lld values, not %lld", n->name, (long long)have, (long long)count);
    memcpy(y, v, (size_t)count * sizeof *y);
    break;
  }
  case IR_OP_LITERAL: y[0] = n->attr.value; break;
  case IR_OP_MATMUL_NT:
  case IR_OP_MATMUL_TN: {
    /* nt: y[i,k] = sum_j a[i,j] b[k,j]; tn: y[k,j] = sum_i a[i,k] b[i,j] */
    bool nt = n->op == IR_OP_MATMUL_NT; /* general tensors: a (and tn's b) [.., last] flat */
    const ir_type *ta = &n->srcs[0]->type, *tb = &n->srcs[1]->type;
    int64_t inner_a = ta->dims[ta->rank - 1], inner_b = tb->dims[tb->rank - 1];
    int64_t rows = inner_a > 0 ? n_src[0] / inner_a : 0;
    const double *a = src[0], *b = src[1];
    if (nt) {
      int64_t kk = n->srcs[1]->type.dims[0];
      for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < kk; k++) {
          double acc = 0;
          for (int64_t j = 0; j < inner_a; j++) acc += a[i * inner_a + j] * b[k * inner_b + j];
          y[i * kk + k] = acc;
        }
    } else {
      for (int64_t e = 0; e < count; e++) y[e] = 0;
      for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < inner_a; k++)
          for (int64_t j = 0; j < inner_b; j++) y[k * inner_b + j] += a[i * inner_a + k] * b[i * inner_b + j];
    }
    break;
  }
  case IR_OP_SUM_ROWS: {
    int64_t c = count, rows = c > 0 ? n_src[0] / c : 0;
    for (int64_t j = 0; j < c; j++) y[j] = 0;
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < c; j++) y[j] += src[0][i * c + j];
    break;
  }
  case IR_OP_RELU_GRAD:
  case IR_OP_SIGMOID_GRAD:
  case IR_OP_TANH_GRAD:
  case IR_OP_GELU_GRAD:
  case IR_OP_SILU_GRAD:
    for (int64_t i = 0; i < count; i++) {
      double dy = src[0][i], x = src[1][i];
      double sg = 1.0 / (1.0 + exp(-x));
      if (n->op == IR_OP_RELU_GRAD) y[i] = x > 0 ? dy : 0.0;
      else if (n->op == IR_OP_SIGMOID_GRAD) y[i] = dy * x * (1 - x);
      else if (n->op == IR_OP_TANH_GRAD) y[i] = dy * (1 - x * x);
      else if (n->op == IR_OP_GELU_GRAD) y[i] = dy * (0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI));
      else y[i] = dy * sg * (1 + x * (1 - sg)); /* silu_grad */
    }
    break;
  case IR_OP_SOFTMAX_GRAD: {
    int64_t last = t->dims[t->rank - 1];
    for (int64_t r = 0; last > 0 && r < count / last; r++) {
      const double *dy = src[0] + r * last, *p = src[1] + r * last;
      double dot = 0;
      for (int64_t j = 0; j < last; j++) dot += dy[j] * p[j];
      for (int64_t j = 0; j < last; j++) y[r * last + j] = p[j] * (dy[j] - dot);
    }
    break;
  }
  case IR_OP_XENT:
  case IR_OP_XENT_GRAD:
  case IR_OP_XENT_LOGITS:
  case IR_OP_XENT_LOGITS_GRAD:
  case IR_OP_MSE:
  case IR_OP_MSE_GRAD:
    return eval_loss(n, src, n_src, y, err, errlen);
  case IR_OP_ALL_FINITE: {
    bool all = true;
    for (int s = 0; s < n->n_srcs; s++)
      for (int64_t i = 0; i < n_src[s]; i++) all &= n->srcs[s]->type.dtype == DT_I1 ? src[s][i] != 0 : isfinite(src[s][i]);
    y[0] = all;
    break;
  }
  case IR_OP_GRAD_NORM_SQ: { /* training options: gradient clipping */
    double q = 0;
    for (int s = 2; s < n->n_srcs; s++)
      for (int64_t i = 0; i < n_src[s]; i++) q += (src[s][i] / src[1][0]) * (src[s][i] / src[1][0]);
    y[0] = src[0][0] + q;
    break;
  }
  case IR_OP_CLIP_SCALE: {
    double norm = sqrt(src[1][0]), c = n->attr.clipnorm;
    y[0] = src[0][0] * (isnan(norm) || norm > c ? norm : c) / c;
    break;
  }
  case IR_OP_CLIP_VALUE: {
    double hi = n->attr.clipvalue * src[1][0];
    for (int64_t i = 0; i < count; i++) {
      double g = src[0][i];
      y[i] = g > hi ? hi : g < -hi ? -hi : g;
    }
    break;
  }
  case IR_OP_SGD:
  case IR_OP_SGD_MOMENTUM:
  case IR_OP_RMSPROP:
  case IR_OP_RMSPROP_MOMENTUM:
  case IR_OP_RMSPROP_CENTERED:
  case IR_OP_RMSPROP_CENTERED_MOMENTUM:
  case IR_OP_ADAM:
  case IR_OP_COUNT_STEP:
  case IR_OP_LOSS_SCALE_UPDATE:
  case IR_OP_ADAMW: /* training options */
    if (!eval_update(n, src, n_src, batch)) return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
    for (int w = 0; w < ir_op_writes(n->op); w++) { /* in place: the variables' state */
      int64_t have = 0;
      double *v = state ? ref_state_get(state, n->srcs[w]->attr.weight, &have) : NULL;
      if (!v || have != n_src[w]) return FAIL("%s %%%s: no state for %%%s", ir_op_name(n->op), n->name, n->srcs[w]->name);
      for (int64_t i = 0; i < have; i++) v[i] = src[w][i] = store(src[w][i], n->srcs[w]->type.dtype);
    }
    memcpy(y, src[0], (size_t)count * sizeof *y);
    break;
  case IR_OP_INPUT: {
    int k = n->attr.index;
    if (k < 0 || k >= n_inputs || !inputs[k])
      return FAIL("input %%%s: no data for input number %d", n->name, k);
    memcpy(y, inputs[k], (size_t)count * sizeof *y);
    break;
  }
  case IR_OP_CONST:
    if (ir_type_is_batched(t)) return FAIL("const %%%s has the batch dimension", n->name);
    if (!const_values(n, y, count, err, errlen)) return false;
    break;
  case IR_OP_MATMUL: {
    const ir_type *ta = &n->srcs[0]->type, *tb = &n->srcs[1]->type;
    if (ta->rank < 2 || tb->rank != 2 || t->rank != ta->rank) /* general tensors: a [.., K] flat */
      return FAIL("matmul %%%s: operands must be rank >= 2 and rank 2", n->name);
    int64_t k = tb->dims[0], nc = tb->dims[1];
    int64_t m = k > 0 ? n_src[0] / k : (nc > 0 ? count / nc : 0);
    if (ta->dims[ta->rank - 1] != k || n_src[0] != m * k || n_src[1] != k * nc || count != m * nc)
      return FAIL("matmul %%%s: inconsistent shapes", n->name);
    const double *a = src[0], *b = src[1];
    for (int64_t i = 0; i < m; i++) {
      double *row = y + i * nc;
      for (int64_t j = 0; j < nc; j++) row[j] = 0;
      for (int64_t p = 0; p < k; p++) {
        double av = a[i * k + p];
        const double *brow = b + p * nc;
        for (int64_t j = 0; j < nc; j++) row[j] += av * brow[j];
      }
    }
    break;
  }
  case IR_OP_ADD:
  case IR_OP_MUL:
  /* general tensors */
  case IR_OP_SUB:
  case IR_OP_DIV:
  case IR_OP_MAXIMUM:
  case IR_OP_MINIMUM:
  case IR_OP_POW:
  case IR_OP_SELECT_GE:
  case IR_OP_POW_GRAD:
  case IR_OP_POW_GRAD_EXP:
  case IR_OP_EXP:
  case IR_OP_LOG:
  case IR_OP_SQRT:
  case IR_OP_RSQRT:
  case IR_OP_NEG:
  case IR_OP_ABS:
  case IR_OP_ERF:
  case IR_OP_LEAKY_RELU:
  case IR_OP_ELU:
  case IR_OP_SOFTPLUS:
  case IR_OP_HARD_SIGMOID:
  case IR_OP_CLIP:
  case IR_OP_SELECT:
  case IR_OP_ABS_GRAD:
  case IR_OP_ERF_GRAD:
  case IR_OP_LEAKY_RELU_GRAD:
  case IR_OP_ELU_GRAD:
  case IR_OP_HARD_SIGMOID_GRAD:
  case IR_OP_CLIP_GRAD:
  CASTOR_REF_BOOL_OPS
    return eval_broadcast(n, src, n_src, y, count, batch, err, errlen);
  case IR_OP_BATCH_MATMUL: { /* general tensors: the definition, leading dimensions broadcast */
    const ir_type *ta = &n->srcs[0]->type, *tb = &n->srcs[1]->type;
    bool tra = n->attr.transpose_a, trb = n->attr.transpose_b;
    int R = t->rank;
    int64_t M = t->dims[R - 2], Nc = t->dims[R - 1], K = ta->dims[ta->rank - (tra ? 2 : 1)];
    int64_t items = M * Nc > 0 ? count / (M * Nc) : 0;
    for (int64_t it = 0; it < items; it++) {
      /* the item's coordinates in y's leading dimensions, then a's and b's item (1s broadcast) */
      int64_t rest = it, ai = 0, bi = 0, astride = 1, bstride = 1;
      for (int d = R - 3; d >= 0; d--) {
        int64_t od = t->dims[d] == IR_DIM_BATCH ? batch : t->dims[d], c = rest % od;
        rest /= od;
        int da = d - (R - ta->rank), db = d - (R - tb->rank);
        if (da >= 0) {
          int64_t ad = ta->dims[da] == IR_DIM_BATCH ? batch : ta->dims[da];
          ai += (ad == 1 ? 0 : c) * astride, astride *= ad;
        }
        if (db >= 0) {
          int64_t bd = tb->dims[db] == IR_DIM_BATCH ? batch : tb->dims[db];
          bi += (bd == 1 ? 0 : c) * bstride, bstride *= bd;
        }
      }
      if ((ai + 1) * M * K > n_src[0] || (bi + 1) * K * Nc > n_src[1])
        return FAIL("batch_matmul %%%s: inconsistent shapes", n->name);
      const double *A = src[0] + ai * M * K, *Bm = src[1] + bi * K * Nc;
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < Nc; j++) {
          double acc = 0;
          for (int64_t k = 0; k < K; k++) acc += (tra ? A[k * M + i] : A[i * K + k]) * (trb ? Bm[j * K + k] : Bm[k * Nc + j]);
          y[(it * M + i) * Nc + j] = acc;
        }
    }
    break;
  }
  case IR_OP_SUM_TO: {
    for (int64_t i = 0; i < count; i++) y[i] = 0;
    for (int64_t i = 0; i < n_src[0]; i++) { /* x's elements in order */
      int64_t o = broadcast_index(&n->srcs[0]->type, t, batch, i);
      if (o < 0 || o >= count) return FAIL("sum_to %%%s: inconsistent shapes", n->name);
      y[o] += src[0][i];
    }
    break;
  }
  case IR_OP_RELU:
  case IR_OP_SIGMOID:
  case IR_OP_TANH:
  case IR_OP_GELU:
  case IR_OP_SILU:
  case IR_OP_CAST:
    if (n_src[0] != count) return FAIL("%s %%%s: operand size differs", ir_op_name(n->op), n->name);
    for (int64_t i = 0; i < count; i++) {
      double x = src[0][i];
      switch (n->op) {
      case IR_OP_RELU: y[i] = x > 0 || isnan(x) ? x : 0.0; break;
      case IR_OP_SIGMOID: y[i] = sigmoid_in(x, n->type.dtype); break;
      case IR_OP_TANH: y[i] = tanh(x); break;
      case IR_OP_GELU: y[i] = gelu(x); break;
      case IR_OP_SILU: y[i] = is16(n->type.dtype) ? x * store(sigmoid_in(x, n->type.dtype), n->type.dtype) : x / (1.0 + exp(-x)); break;
      case IR_OP_CAST:
        if (!cast_value(n, x, &y[i], err, errlen)) return false;
        break;
      case IR_OP_INPUT:
      case IR_OP_CONST:
      case IR_OP_MATMUL:
      case IR_OP_ADD:
      case IR_OP_MUL:
      case IR_OP_SUB:
      case IR_OP_DIV:
      case IR_OP_MAXIMUM:
      case IR_OP_MINIMUM:
      case IR_OP_POW:
      case IR_OP_SELECT_GE:
      case IR_OP_POW_GRAD:
      case IR_OP_POW_GRAD_EXP:
      case IR_OP_SUM_TO:
      case IR_OP_EXP:
      case IR_OP_LOG:
      case IR_OP_SQRT:
      case IR_OP_RSQRT:
      case IR_OP_NEG:
      case IR_OP_ABS:
      case IR_OP_ERF:
      case IR_OP_LEAKY_RELU:
      case IR_OP_ELU:
      case IR_OP_SOFTPLUS:
      case IR_OP_HARD_SIGMOID:
      case IR_OP_CLIP:
      case IR_OP_SELECT:
      case IR_OP_ABS_GRAD:
      case IR_OP_ERF_GRAD:
      case IR_OP_LEAKY_RELU_GRAD:
      case IR_OP_ELU_GRAD:
      case IR_OP_HARD_SIGMOID_GRAD:
      case IR_OP_CLIP_GRAD:
      case IR_OP_SOFTMAX:
      case IR_OP_LAYER_NORM:
      case IR_OP_PAD:
      case IR_OP_SLICE:
      CASTOR_REF_TRAINING_OPS
      CASTOR_REF_LAYOUT_OPS
      CASTOR_REF_TENSOR_OPS
      CASTOR_REF_RNN_OPS
      CASTOR_REF_BOOL_OPS
      case IR_OP_COUNT: CASTOR_UNREACHABLE();
      }
    }
    break;
  case IR_OP_SOFTMAX: {
    if (t->rank < 1) return FAIL("softmax %%%s needs rank >= 1", n->name);
    if (n_src[0] != count) return FAIL("softmax %%%s: operand size differs", n->name);
    int64_t last = t->dims[t->rank - 1];
    for (int64_t r = 0; last > 0 && r < count / last; r++) {
      const double *x = src[0] + r * last;
      double *row = y + r * last, mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < last; j++) mx = x[j] > mx ? x[j] : mx;
      for (int64_t j = 0; j < last; j++) sum += row[j] = exp(x[j] - mx);
      for (int64_t j = 0; j < last; j++) row[j] /= sum;
    }
    break;
  }
  case IR_OP_LAYER_NORM:
  case IR_OP_LAYER_NORM_XHAT:
  case IR_OP_LAYER_NORM_GRAD: {
    /* two-pass mean and biased variance over each block of the normalized
     * (trailing) dimensions, gamma and beta over the block; xhat without
     * them; the gradient (1/sigma) (g - mean g - xhat mean(g xhat)), g =
     * dy gamma, dy (operand 2) shaped like x */
    int first = ir_norm_first_dim(t, n->attr.axis);
    int64_t inner = 1;
    for (int r = first < 0 ? t->rank : first; r < t->rank; r++) inner *= t->dims[r];
    bool sizes = first >= 0 && n_src[0] == count && inner > 0 && count % inner == 0;
    if (n->op == IR_OP_LAYER_NORM) sizes &= n_src[1] == inner && n_src[2] == inner;
    if (n->op == IR_OP_LAYER_NORM_GRAD) sizes &= n_src[1] == inner && n_src[2] == count;
    if (!sizes) return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
    for (int64_t r = 0; r < count / inner; r++) {
      const double *x = src[0] + r * inner;
      double *row = y + r * inner, mean = 0, var = 0;
      for (int64_t j = 0; j < inner; j++) mean += x[j];
      mean /= (double)inner;
      for (int64_t j = 0; j < inner; j++) var += (x[j] - mean) * (x[j] - mean);
      var /= (double)inner;
      double inv = 1.0 / sqrt(var + n->attr.epsilon);
      if (n->op == IR_OP_LAYER_NORM) {
        for (int64_t j = 0; j < inner; j++) row[j] = (x[j] - mean) * inv * src[1][j] + src[2][j];
      } else if (n->op == IR_OP_LAYER_NORM_XHAT) {
        for (int64_t j = 0; j < inner; j++) row[j] = (x[j] - mean) * inv;
      } else {
        const double *dy = src[2] + r * inner, *gamma = src[1];
        double mg = 0, mgx = 0;
        for (int64_t j = 0; j < inner; j++) mg += dy[j] * gamma[j], mgx += dy[j] * gamma[j] * (x[j] - mean) * inv;
        mg /= (double)inner, mgx /= (double)inner;
        for (int64_t j = 0; j < inner; j++) row[j] = inv * (dy[j] * gamma[j] - mg - (x[j] - mean) * inv * mgx);
      }
    }
    break;
  }
  /* convolutional networks */
  case IR_OP_CONV2D: {
    /* the definition: every output element a sum over the window, x read
     * as 0 outside it */
    const ir_type *xt = &n->srcs[0]->type, *wt = &n->srcs[1]->type;
    int64_t H = xt->dims[1], W = xt->dims[2], C = xt->dims[3], KH = wt->dims[0], KW = wt->dims[1], O = wt->dims[3];
    int64_t OH = t->dims[1], OW = t->dims[2], img = H * W * C;
    if (img <= 0 || n_src[0] % img || n_src[1] != KH * KW * C * O || count != n_src[0] / img * OH * OW * O)
      return FAIL("conv2d %%%s: inconsistent sizes", n->name);
    const int64_t *st = n->attr.strides.v, *dl = n->attr.dilations.v, *pd = n->attr.pads.v;
    for (int64_t b = 0; b < n_src[0] / img; b++)
      for (int64_t i = 0; i < OH; i++)
        for (int64_t j = 0; j < OW; j++)
          for (int64_t o = 0; o < O; o++) {
            double sum = 0;
            for (int64_t p = 0; p < KH; p++)
              for (int64_t q = 0; q < KW; q++) {
                int64_t ih = i * st[0] - pd[0] + p * dl[0], iw = j * st[1] - pd[2] + q * dl[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                for (int64_t c = 0; c < C; c++)
                  sum += src[0][((b * H + ih) * W + iw) * C + c] * src[1][((p * KW + q) * C + c) * O + o];
              }
            y[((b * OH + i) * OW + j) * O + o] = sum;
          }
    break;
  }
  case IR_OP_MAX_POOL2D_GRAD:
  case IR_OP_AVG_POOL2D_GRAD: {
    /* each window's dy to its winner (max: the tap the forward scan ends
     * on, replacing on v > best or a NaN v) or spread over its taps inside
     * x (avg) */
    const ir_type *dyt = &n->srcs[0]->type;
    int64_t H = t->dims[1], W = t->dims[2], C = t->dims[3], OH = dyt->dims[1], OW = dyt->dims[2], img = H * W * C;
    if (img <= 0 || count % img || n_src[0] != count / img * OH * OW * C || n_src[1] != count)
      return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
    const int64_t *pl = n->attr.pool.v, *st = n->attr.strides.v, *pd = n->attr.pads.v;
    bool mx = n->op == IR_OP_MAX_POOL2D_GRAD;
    const double *dy = src[0], *x = src[1];
    for (int64_t i = 0; i < count; i++) y[i] = 0;
    for (int64_t b = 0; b < count / img; b++)
      for (int64_t i = 0; i < OH; i++)
        for (int64_t j = 0; j < OW; j++)
          for (int64_t c = 0; c < C; c++) {
            double best = -INFINITY, g = dy[((b * OH + i) * OW + j) * C + c];
            int64_t win = -1, cnt = 0;
            for (int pass = 0; pass < 2; pass++)
              for (int64_t p = 0; p < pl[0]; p++)
                for (int64_t q = 0; q < pl[1]; q++) {
                  int64_t ih = i * st[0] - pd[0] + p, iw = j * st[1] - pd[2] + q;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  int64_t xi = ((b * H + ih) * W + iw) * C + c;
                  if (pass == 0) {
                    cnt++;
                    if (mx && (x[xi] > best || isnan(x[xi]))) best = x[xi], win = xi;
                  } else if (!mx) {
                    y[xi] += g / (double)cnt;
                  }
                }
            if (mx && win >= 0) y[win] += g;
          }
    break;
  }
  case IR_OP_MAX_POOL2D:
  case IR_OP_AVG_POOL2D: {
    const ir_type *xt = &n->srcs[0]->type;
    int64_t H = xt->dims[1], W = xt->dims[2], C = xt->dims[3], OH = t->dims[1], OW = t->dims[2], img = H * W * C;
    if (img <= 0 || n_src[0] % img || count != n_src[0] / img * OH * OW * C)
      return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
    const int64_t *pl = n->attr.pool.v, *st = n->attr.strides.v, *pd = n->attr.pads.v;
    bool mx = n->op == IR_OP_MAX_POOL2D;
    /* a bf16 average rounds its running sum to bf16 after each tap, unless
     * its window is the whole image (ir_ops.def; cg_index_map.c) */
    bool global = !pd[0] && !pd[1] && !pd[2] && !pd[3] && pl[0] == H && pl[1] == W;
    bool sum16 = !mx && !global && t->dtype == DT_BF16;
    for (int64_t b = 0; b < n_src[0] / img; b++)
      for (int64_t i = 0; i < OH; i++)
        for (int64_t j = 0; j < OW; j++)
          for (int64_t c = 0; c < C; c++) {
            double acc = mx ? -INFINITY : 0;
            int64_t cnt = 0;
            for (int64_t p = 0; p < pl[0]; p++)
              for (int64_t q = 0; q < pl[1]; q++) {
                int64_t ih = i * st[0] - pd[0] + p, iw = j * st[1] - pd[2] + q;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                double v = src[0][((b * H + ih) * W + iw) * C + c];
                cnt++;
                if (!mx) acc = sum16 ? ref_round(acc + v, DT_BF16) : acc + v;
                else if (v > acc || isnan(v)) acc = isnan(acc) ? acc : v;
              }
            y[((b * OH + i) * OW + j) * C + c] = mx ? acc : acc / (double)cnt;
          }
    break;
  }
  case IR_OP_CONV2D_INPUT_GRAD:
  case IR_OP_CONV2D_FILTER_GRAD: {
    /* the forward conv2d's sums transposed: each product
     * x[n,ih,iw,c] * w[p,q,c,o] of the forward pass adds dy[n,i,j,o] * w to
     * dx, or x * dy to dw (a scatter here: the reference has no threads) */
    bool input = n->op == IR_OP_CONV2D_INPUT_GRAD;
    const ir_type *xt = input ? t : &n->srcs[0]->type, *wt = input ? &n->srcs[1]->type : t;
    const ir_type *dyt = &n->srcs[input ? 0 : 1]->type;
    int64_t H = xt->dims[1], W = xt->dims[2], C = xt->dims[3], KH = wt->dims[0], KW = wt->dims[1], O = wt->dims[3];
    int64_t OH = dyt->dims[1], OW = dyt->dims[2], img = OH * OW * O;
    const double *dy = src[input ? 0 : 1], *other = src[input ? 1 : 0];
    int64_t nb = img > 0 ? n_src[input ? 0 : 1] / img : 0;
    if (img <= 0 || n_src[input ? 0 : 1] % img || count != (input ? nb * H * W * C : KH * KW * C * O))
      return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
    const int64_t *st = n->attr.strides.v, *dl = n->attr.dilations.v, *pd = n->attr.pads.v;
    for (int64_t i = 0; i < count; i++) y[i] = 0;
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < OH; i++)
        for (int64_t j = 0; j < OW; j++)
          for (int64_t p = 0; p < KH; p++)
            for (int64_t q = 0; q < KW; q++) {
              int64_t ih = i * st[0] - pd[0] + p * dl[0], iw = j * st[1] - pd[2] + q * dl[1];
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              for (int64_t c = 0; c < C; c++)
                for (int64_t o = 0; o < O; o++) {
                  int64_t xi = ((b * H + ih) * W + iw) * C + c, wi = ((p * KW + q) * C + c) * O + o;
                  double g = dy[((b * OH + i) * OW + j) * O + o];
                  if (input) y[xi] += g * other[wi];
                  else y[wi] += g * other[xi];
                }
            }
    break;
  }
  case IR_OP_PAD:
  case IR_OP_SLICE: {
    /* y[c] = x[c] where c lies inside x, else 0 (pad); slice reads the
     * leading block. Shapes made concrete with the batch of this run. */
    const ir_type *xt = &n->srcs[0]->type;
    int64_t inner = 1, rows = 1, yd[IR_MAX_RANK], xd[IR_MAX_RANK], xn = 1, yn = 1;
    if (xt->rank != t->rank || !ir_type_inner_numel(t, &inner) || inner <= 0)
      return FAIL("%s %%%s: bad shapes", ir_op_name(n->op), n->name);
    if (ir_type_is_batched(t)) rows = count / inner;
    for (int r = 0; r < t->rank; r++) {
      yd[r] = t->dims[r] == IR_DIM_BATCH ? rows : t->dims[r];
      xd[r] = xt->dims[r] == IR_DIM_BATCH ? rows : xt->dims[r];
      yn *= yd[r], xn *= xd[r];
    }
    if (yn != count || xn != n_src[0]) return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
    for (int64_t i = 0; i < count; i++) {
      int64_t rem = i, c[IR_MAX_RANK], xi = 0;
      bool inside = true;
      for (int r = t->rank; r-- > 0;) c[r] = rem % yd[r], rem /= yd[r];
      for (int r = 0; r < t->rank; r++) inside &= c[r] < xd[r], xi = xi * xd[r] + (c[r] < xd[r] ? c[r] : 0);
      y[i] = inside ? src[0][xi] : 0.0;
    }
    break;
  }
  /* general tensors: layout ops */
  CASTOR_REF_LAYOUT_OPS
    return eval_layout(n, src, n_src, y, count, batch, err, errlen);
  /* CNN: batch normalization */
  case IR_OP_BATCH_NORM: /* the definition: (x - mean) / sqrt(var + eps) * gamma + beta */
    for (int s = 0; s < 5; s++)
      for (int64_t i = 0; i < count; i += count - i > 1 ? count - i - 1 : 1)
        if (broadcast_index(t, &n->srcs[s]->type, batch, i) >= n_src[s])
          return FAIL("batch_norm %%%s: operand %d does not broadcast", n->name, s);
    for (int64_t i = 0; i < count; i++) {
      double v[5];
      for (int s = 0; s < 5; s++) v[s] = src[s][broadcast_index(t, &n->srcs[s]->type, batch, i)];
      y[i] = (v[0] - v[3]) / sqrt(v[4] + n->attr.epsilon) * v[1] + v[2];
    }
    break;
  case IR_OP_BN_MEAN: {
    double *cnt = calloc((size_t)(count > 0 ? count : 1), sizeof *cnt);
    if (!cnt) return FAIL("bn_mean %%%s: out of memory", n->name);
    for (int64_t i = 0; i < count; i++) y[i] = 0;
    for (int64_t i = 0; i < n_src[0]; i++) {
      int64_t o = broadcast_index(&n->srcs[0]->type, t, batch, i);
      if (o < 0 || o >= count) {
        free(cnt);
        return FAIL("bn_mean %%%s: inconsistent shapes", n->name);
      }
      y[o] += src[0][i], cnt[o] += 1;
    }
    for (int64_t i = 0; i < count; i++) y[i] = cnt[i] > 0 ? y[i] / cnt[i] : NAN;
    free(cnt);
    break;
  }
  case IR_OP_MOVING_UPDATE: {
    if (n_src[1] != n_src[0] || count != n_src[0]) return FAIL("moving_update %%%s: inconsistent sizes", n->name);
    int64_t have = 0;
    double *v = state ? ref_state_get(state, n->srcs[0]->attr.weight, &have) : NULL;
    if (!v || have != n_src[0]) return FAIL("moving_update %%%s: no state for %%%s", n->name, n->srcs[0]->name);
    for (int64_t i = 0; i < count; i++) {
      src[0][i] = store(src[0][i] * n->attr.momentum + src[1][i] * (1 - n->attr.momentum), n->srcs[0]->type.dtype);
      v[i] = y[i] = src[0][i];
    }
    break;
  }
  CASTOR_REF_TENSOR_OPS /* general tensors: dropout, reductions (ref_tensor.c) */
    return ref_eval_tensor(n, src, n_src, y, count, batch, err, errlen);
  CASTOR_REF_RNN_OPS /* recurrent layers (ref_rnn.c) */
    return ref_eval_rnn(n, src, n_src, y, count, batch, err, errlen);
  /* convolutional networks: grouped convolution, from its definition: every
   * product x[b,ih,iw,g*Cg+c] * w[p,q,c,o] of output o's group g = o/(O/G)
   * goes to y (forward), or dy times it to dx or dw (a scatter here) */
  case IR_OP_GROUP_CONV2D:
  case IR_OP_GROUP_CONV2D_INPUT_GRAD:
  case IR_OP_GROUP_CONV2D_FILTER_GRAD: {
    int kind = n->op == IR_OP_GROUP_CONV2D ? 0 : n->op == IR_OP_GROUP_CONV2D_INPUT_GRAD ? 1 : 2;
    const ir_type *xt = kind == 1 ? t : &n->srcs[0]->type, *wt = kind == 2 ? t : &n->srcs[1]->type;
    const ir_type *yt = kind == 0 ? t : &n->srcs[kind == 1 ? 0 : 1]->type;
    int64_t H = xt->dims[1], W = xt->dims[2], C = xt->dims[3], KH = wt->dims[0], KW = wt->dims[1], Cg = wt->dims[2];
    int64_t O = wt->dims[3], OH = yt->dims[1], OW = yt->dims[2], img = OH * OW * O;
    int64_t G = Cg > 0 ? C / Cg : 0, Og = G > 0 ? O / G : 0;
    int64_t ny = kind == 0 ? count : n_src[kind == 1 ? 0 : 1], nb = img > 0 ? ny / img : 0;
    if (img <= 0 || Og <= 0 || ny % img || (kind != 1 && n_src[0] != nb * H * W * C) ||
        (kind != 2 && n_src[1] != KH * KW * Cg * O) || (kind == 1 && count != nb * H * W * C) ||
        (kind == 2 && count != KH * KW * Cg * O))
      return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
    const int64_t *st = n->attr.strides.v, *dl = n->attr.dilations.v, *pd = n->attr.pads.v;
    const double *xs = kind == 1 ? NULL : src[0], *ws = kind == 2 ? NULL : src[1];
    const double *dy = kind == 0 ? NULL : src[kind == 1 ? 0 : 1];
    for (int64_t i = 0; i < count; i++) y[i] = 0;
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < OH; i++)
        for (int64_t j = 0; j < OW; j++)
          for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < KH; p++)
              for (int64_t q = 0; q < KW; q++) {
                int64_t ih = i * st[0] - pd[0] + p * dl[0], iw = j * st[1] - pd[2] + q * dl[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                int64_t yi = ((b * OH + i) * OW + j) * O + o;
                for (int64_t c = 0; c < Cg; c++) {
                  int64_t xi = ((b * H + ih) * W + iw) * C + o / Og * Cg + c, wi = ((p * KW + q) * Cg + c) * O + o;
                  if (kind == 0) y[yi] += xs[xi] * ws[wi];
                  else if (kind == 1) y[xi] += dy[yi] * ws[wi];
                  else y[wi] += dy[yi] * xs[xi];
                }
              }
    break;
  }
  case IR_OP_COUNT:
    return FAIL("%%%s: op %d is not an op", n->name, (int)n->op);
  }
  return true;
}

/* Schedule position of s among nodes [0, before), or -1. */
static int position(const ir_graph *g, const ir_node *s, int before) {
  if (s->id >= 0 && s->id < before && g->nodes[s->id] == s) return s->id;
  for (int i = 0; i < before; i++)
    if (g->nodes[i] == s) return i;
  return -1;
}

bool ref_run(const ir_graph *g, int64_t batch, const double *const *inputs,
             double **out_outputs, char *err, size_t errlen) {
  return ref_run_state(g, batch, inputs, NULL, out_outputs, err, errlen);
}

bool ref_run_state(const ir_graph *g, int64_t batch, const double *const *inputs, ref_state *state,
                   double **out_outputs, char *err, size_t errlen) {
  if (batch < 0) return FAIL("batch %lld is negative", (long long)batch);
  int nn = g->n_nodes, n_inputs = ir_graph_num_inputs(g);
  double **val = xcalloc((size_t)nn + 1, sizeof *val);
  int64_t *numel = xcalloc((size_t)nn + 1, sizeof *numel);
  int *last_use = xcalloc((size_t)nn + 1, sizeof *last_use);
  int *srcpos = xcalloc((size_t)nn * IR_MAX_SRCS + 1, sizeof *srcpos);
  bool ok = true;

  for (int i = 0; ok && i < nn; i++) {
    const ir_node *n = g->nodes[i];
    last_use[i] = -1;
    if (!ir_op_arity_ok(n->op, n->n_srcs))
      ok = FAIL("%%%s: %s with %d sources", n->name, ir_op_name(n->op), n->n_srcs);
    for (int s = 0; ok && s < n->n_srcs; s++) {
      int p = position(g, n->srcs[s], i);
      if (p < 0) ok = FAIL("%%%s uses %%%s before it is defined", n->name, n->srcs[s]->name);
      else last_use[p] = i, srcpos[i * IR_MAX_SRCS + s] = p;
    }
  }
  int *outpos = xcalloc((size_t)g->n_outputs + 1, sizeof *outpos);
  for (int k = 0; ok && k < g->n_outputs; k++) {
    outpos[k] = position(g, g->outputs[k].value, nn);
    if (outpos[k] < 0) ok = FAIL("output %s is not in the schedule", g->outputs[k].name);
    else last_use[outpos[k]] = nn;
  }

  for (int i = 0; ok && i < nn; i++) {
    const ir_node *n = g->nodes[i];
    int64_t bytes;
    if (!ir_type_numel(&n->type, batch, &numel[i]) ||
        !size_mul_ok(numel[i], (int64_t)sizeof(double), &bytes) || bytes > REF_MAX_BYTES) {
      ok = FAIL("%%%s: too large for the reference interpreter", n->name);
      break;
    }
    val[i] = malloc(bytes ? (size_t)bytes : 1);
    if (!val[i]) {
      ok = FAIL("%%%s: out of memory (%lld bytes)", n->name, (long long)bytes);
      break;
    }
    double *src[IR_MAX_SRCS] = {0};
    int64_t n_src[IR_MAX_SRCS] = {0};
    for (int s = 0; s < n->n_srcs; s++) {
      int p = srcpos[i * IR_MAX_SRCS + s];
      src[s] = val[p], n_src[s] = numel[p];
    }
    ok = eval(n, src, n_src, val[i], numel[i], batch, inputs, n_inputs, state, err, errlen);
    if (!ok) break;
    for (int64_t e = 0; e < numel[i]; e++) val[i][e] = store(val[i][e], n->type.dtype);
    for (int s = 0; s < n->n_srcs; s++) {
      int p = srcpos[i * IR_MAX_SRCS + s];
      if (last_use[p] == i) free(val[p]), val[p] = NULL;
    }
    if (last_use[i] < 0) free(val[i]), val[i] = NULL; /* dead value */
  }

  for (int k = 0; ok && k < g->n_outputs; k++) {
    int p = outpos[k];
    size_t bytes = (size_t)numel[p] * sizeof(double);
    out_outputs[k] = xmalloc(bytes ? bytes : 1); /* an empty output: a valid pointer to nothing */
    if (bytes) memcpy(out_outputs[k], val[p], bytes);
  }
  for (int i = 0; i < nn; i++) free(val[i]);
  free(val), free(numel), free(last_use), free(srcpos), free(outpos);
  return ok;
}

#undef FAIL

/* ---- state ---- */

void ref_state_init(ref_state *s, const ir_graph *g) {
  memset(s, 0, sizeof *s);
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    int64_t count = 0;
    if (n->op != IR_OP_VARIABLE || ref_state_get(s, n->attr.weight, &count)) continue;
    CASTOR_ASSERT(ir_type_numel(&n->type, 1, &count));
    s->names = xrealloc(s->names, (size_t)(s->n + 1) * sizeof *s->names);
    s->values = xrealloc(s->values, (size_t)(s->n + 1) * sizeof *s->values);
    s->counts = xrealloc(s->counts, (size_t)(s->n + 1) * sizeof *s->counts);
    double *v = xmalloc((size_t)count * sizeof *v + 1);
    char err[64];
    if (!n->attr.data || !const_values(n, v, count, err, sizeof err))
      for (int64_t e = 0; e < count; e++) v[e] = n->attr.init;
    s->names[s->n] = xstrdup(n->attr.weight), s->values[s->n] = v, s->counts[s->n] = count;
    s->n++;
  }
}

double *ref_state_get(ref_state *s, const char *name, int64_t *count) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->names[i], name) == 0) return *count = s->counts[i], s->values[i];
  return NULL;
}

void ref_state_fini(ref_state *s) {
  for (int i = 0; i < s->n; i++) free((char *)s->names[i]), free(s->values[i]);
  free(s->names), free(s->values), free(s->counts);
  memset(s, 0, sizeof *s);
}

void ref_outputs_free(double **outputs, int n) {
  for (int i = 0; i < n; i++) free(outputs[i]), outputs[i] = NULL;
}

/* ---- conversions ---- */

double *ref_from_f32(const float *x, int64_t n) {
  double *y = xmalloc((size_t)n * sizeof *y);
  for (int64_t i = 0; i < n; i++) y[i] = x[i];
  return y;
}

double *ref_from_f16(const uint16_t *x, int64_t n) {
  double *y = xmalloc((size_t)n * sizeof *y);
  for (int64_t i = 0; i < n; i++) y[i] = half_f16_to_f32(x[i]);
  return y;
}

double *ref_from_bf16(const uint16_t *x, int64_t n) {
  double *y = xmalloc((size_t)n * sizeof *y);
  for (int64_t i = 0; i < n; i++) y[i] = half_bf16_to_f32(x[i]);
  return y;
}

/* ---- comparison ---- */

/* |got - want| with the NaN/inf rules of ref.h. */
static double abs_diff(double got, double want) {
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want) ? 0 : INFINITY;
  if (isinf(got) || isinf(want)) return got == want ? 0 : INFINITY;
  return fabs(got - want);
}

ref_cmp ref_compare_rel(const float *got, const double *want, int64_t n, double floor) {
  ref_cmp c = {0, -1, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    double d = abs_diff(got[i], want[i]), den = fmax(fabs(want[i]), floor);
    double e = d == 0 ? 0 : d / den;
    if (c.index < 0 || e > c.error) c = (ref_cmp){e, i, got[i], want[i]};
  }
  return c;
}

ref_cmp ref_compare_normalized(const float *got, const double *want, int64_t n) {
  ref_cmp c = {0, -1, 0, 0};
  double max_want = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = abs_diff(got[i], want[i]);
    if (isfinite(want[i])) max_want = fmax(max_want, fabs(want[i]));
    if (c.index < 0 || d > c.error) c = (ref_cmp){d, i, got[i], want[i]};
  }
  if (max_want > 0) c.error /= max_want;
  return c;
}

double ref_max_rel_error(const float *got, const double *want, int64_t n, double floor) {
  return ref_compare_rel(got, want, n, floor).error;
}

double ref_normalized_error(const float *got, const double *want, int64_t n) {
  return ref_compare_normalized(got, want, n).error;
}

const char *ref_cmp_str(const ref_cmp *c, char *buf, size_t len) {
  if (c->index < 0) snprintf(buf, len, "error 0 (no elements)");
  else
    snprintf(buf, len, "error %.3g at [%lld]: got %.9g, want %.17g", c->error,
             (long long)c->index, c->got, c->want);
  return buf;
}
