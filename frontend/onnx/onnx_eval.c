/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_eval.c: the constant evaluator's arithmetic (internal.h): element-wise
 * ops with numpy broadcasting, comparisons and logic, Where, Range, CumSum,
 * Trilu and the reductions, over host tensors of any integer, bool or float
 * type. onnx_fold.c holds the table that decides which nodes fold and the
 * ops that move data (Gather, Slice, Concat, ...).
 *
 * Values: integers are computed in int64, floats in double and rounded once
 * to the result's type. The symbolic batch N travels through shape
 * arithmetic as the int64 DIM_N; an op that would compute with it (N + 1,
 * N == 2) cannot be evaluated and asks for --batch, which binds N at
 * import so that no DIM_N exists.
 */
#include "frontend/onnx/internal.h"

#include "util/half.h"

#include <math.h>
#include <string.h>

bool oi_float_like(int dtype) {
  return dtype == ONNX_FLOAT || dtype == ONNX_DOUBLE || dtype == ONNX_FLOAT16 || dtype == ONNX_BFLOAT16;
}

void oi_elem_set_i64(onnx_tensor *t, int64_t i, int64_t v) {
  void *p = (void *)t->data;
  switch (t->dtype) {
  case ONNX_INT64: ((int64_t *)p)[i] = v; break;
  case ONNX_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
  case ONNX_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
  case ONNX_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case ONNX_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
  case ONNX_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
  case ONNX_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
  case ONNX_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case ONNX_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: oi_elem_set_f64(t, i, (double)v); break;
  }
}

void oi_elem_set_f64(onnx_tensor *t, int64_t i, double v) {
  void *p = (void *)t->data;
  switch (t->dtype) {
  case ONNX_FLOAT: ((float *)p)[i] = (float)v; break;
  case ONNX_DOUBLE: ((double *)p)[i] = v; break;
  case ONNX_FLOAT16: ((uint16_t *)p)[i] = half_f32_to_f16((float)v); break;
  case ONNX_BFLOAT16: ((uint16_t *)p)[i] = half_f32_to_bf16((float)v); break;
  case ONNX_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: /* float to integer: truncation, saturated so that C's conversion stays defined */
    if (isnan(v)) v = 0;
    oi_elem_set_i64(t, i, v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v);
    break;
  }
}

/* The result of a fold: a host tensor of dims, at most OI_FOLD_MAX elements. */
onnx_tensor *oi_fold_tensor(imp *im, int dtype, int rank, const int64_t *dims) {
  int64_t numel = 1;
  for (int r = 0; r < rank; r++)
    if (dims[r] < 0 || !size_mul_ok(numel, dims[r], &numel) || numel > OI_FOLD_MAX) {
      UNSUPPORTED(im, "%s of constants would make a tensor of more than %lld elements (castor's limit for "
                      "values computed at import)", im->node->op_type, (long long)OI_FOLD_MAX);
      return NULL;
    }
  if (onnx_dtype_size(dtype) == 0) {
    UNSUPPORTED(im, "%s of constants of type %s", im->node->op_type, onnx_dtype_name(dtype));
    return NULL;
  }
  return oi_host_tensor(im, dtype, rank, dims);
}

bool oi_fold_define(imp *im, int k, const onnx_tensor *t) {
  if (!t) return false;
  if (k >= im->node->n_outputs) return FAIL(im, "%s has no output %d", im->node->op_type, k + 1);
  return oi_val_define(im, im->node->outputs[k], NULL, t);
}

/* numpy broadcasting of n tensors' shapes (NULL entries skipped). */
bool oi_bcast_dims(imp *im, const onnx_tensor *const *in, int n, int *rank, int64_t *dims) {
  *rank = 0;
  for (int i = 0; i < n; i++)
    if (in[i] && in[i]->rank > *rank) *rank = in[i]->rank;
  for (int r = 0; r < *rank; r++) dims[r] = 1;
  for (int i = 0; i < n; i++) {
    if (!in[i]) continue;
    for (int r = 0; r < in[i]->rank; r++) {
      int o = r + *rank - in[i]->rank;
      int64_t d = in[i]->dims[r];
      if (d == dims[o] || d == 1) continue;
      if (dims[o] != 1)
        return FAIL(im, "%s's operands do not broadcast (dimension %d: %lld and %lld)", im->node->op_type, o,
                    (long long)dims[o], (long long)d);
      dims[o] = d;
    }
  }
  return true;
}

/* The flat index into t of element i of a result of rank/dims (t broadcast). */
int64_t oi_bcast_index(const onnx_tensor *t, int rank, const int64_t *dims, int64_t i) {
  int64_t idx = 0, stride = 1;
  for (int r = rank - 1; r >= 0; r--) {
    int64_t c = dims[r] ? i % dims[r] : 0;
    i = dims[r] ? i / dims[r] : 0;
    int rt = r - (rank - t->rank);
    if (rt >= 0) {
      if (t->dims[rt] != 1) idx += c * stride;
      stride *= t->dims[rt];
    }
  }
  return idx;
}

static bool batch_error(imp *im) {
  return UNSUPPORTED(im, "%s computes with the batch dimension N (a shape computation): castor keeps N "
                         "symbolic only where it is moved, not computed with; compile with --batch B",
                     im->node->op_type);
}

static int64_t ipow(int64_t x, int64_t y) {
  int64_t z = 1;
  for (; y > 0; y--) z *= x;
  return z;
}

/* One element of a binary op in int64; false with an error for /0. */
static bool int_binary(imp *im, oi_ev code, int64_t x, int64_t y, int64_t fmod_attr, int64_t *z) {
  switch ((int)code) {
  case OI_EV_ADD: *z = (int64_t)((uint64_t)x + (uint64_t)y); return true;
  case OI_EV_SUB: *z = (int64_t)((uint64_t)x - (uint64_t)y); return true;
  case OI_EV_MUL: *z = (int64_t)((uint64_t)x * (uint64_t)y); return true;
  case OI_EV_DIV:
  case OI_EV_MOD:
    if (y == 0) return FAIL(im, "%s of integer constants by zero", im->node->op_type);
    if (y == -1) *z = code == OI_EV_DIV ? (int64_t)(0 - (uint64_t)x) : 0; /* INT64_MIN / -1 stays defined */
    else if (code == OI_EV_DIV) *z = x / y; /* ONNX and C both truncate toward zero */
    else {
      *z = x % y;
      if (!fmod_attr && *z != 0 && ((*z < 0) != (y < 0))) *z += y; /* fmod=0: the divisor's sign */
    }
    return true;
  case OI_EV_POW: *z = ipow(x, y); return true;
  case OI_EV_MAX: *z = x > y ? x : y; return true;
  case OI_EV_MIN: *z = x < y ? x : y; return true;
  case OI_EV_EQ: *z = x == y; return true;
  case OI_EV_LT: *z = x < y; return true;
  case OI_EV_GT: *z = x > y; return true;
  case OI_EV_LE: *z = x <= y; return true;
  case OI_EV_GE: *z = x >= y; return true;
  case OI_EV_AND: *z = x && y; return true;
  case OI_EV_OR: *z = x || y; return true;
  case OI_EV_XOR: *z = !x != !y; return true;
  default: return FAIL(im, "%s: not a binary op", im->node->op_type);
  }
}

static double flt_binary(oi_ev code, double x, double y, int64_t fmod_attr) {
  switch ((int)code) {
  case OI_EV_ADD: return x + y;
  case OI_EV_SUB: return x - y;
  case OI_EV_MUL: return x * y;
  case OI_EV_DIV: return x / y;
  case OI_EV_MOD: {
    double m = fmod(x, y);
    if (!fmod_attr && m != 0 && ((m < 0) != (y < 0))) m += y;
    return m;
  }
  case OI_EV_POW: return pow(x, y);
  case OI_EV_MAX: return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
  case OI_EV_MIN: return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
  case OI_EV_EQ: return x == y;
  case OI_EV_LT: return x < y;
  case OI_EV_GT: return x > y;
  case OI_EV_LE: return x <= y;
  case OI_EV_GE: return x >= y;
  default: return NAN;
  }
}

static double flt_unary(oi_ev code, double x) {
  switch ((int)code) {
  case OI_EV_NEG: return -x;
  case OI_EV_ABS: return fabs(x);
  case OI_EV_SQRT: return sqrt(x);
  case OI_EV_EXP: return exp(x);
  case OI_EV_LOG: return log(x);
  case OI_EV_RECIP: return 1 / x;
  case OI_EV_FLOOR: return floor(x);
  case OI_EV_CEIL: return ceil(x);
  case OI_EV_ROUND: return nearbyint(x); /* half to even, as ONNX's Round */
  case OI_EV_SIGN: return x > 0 ? 1 : x < 0 ? -1 : x;
  case OI_EV_RELU: return x > 0 ? x : 0 * x;
  case OI_EV_SIGMOID: return 1 / (1 + exp(-x));
  case OI_EV_TANH: return tanh(x);
  case OI_EV_ERF: return erf(x);
  case OI_EV_SIN: return sin(x);
  case OI_EV_COS: return cos(x);
  case OI_EV_ISNAN: return isnan(x);
  case OI_EV_ISINF: return isinf(x);
  case OI_EV_NOT: return x == 0;
  default: return x;
  }
}

static bool is_compare(oi_ev c) { return c >= OI_EV_EQ && c <= OI_EV_GE; }
static bool is_logic(oi_ev c) { return c == OI_EV_AND || c == OI_EV_OR || c == OI_EV_XOR || c == OI_EV_NOT; }

/* Element-wise ops: unary (one input), binary, or variadic (Max, Min)
 * folded left to right, all with numpy broadcasting. */
bool oi_eval_elementwise(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  oi_ev code = row->code;
  int dt = in[0]->dtype;
  for (int i = 1; i < n; i++)
    if (in[i] && in[i]->dtype != dt)
      return FAIL(im, "%s's operands differ in type (%s and %s)", im->node->op_type, onnx_dtype_name(dt),
                  onnx_dtype_name(in[i]->dtype));
  if (is_logic(code) && dt != ONNX_BOOL)
    return FAIL(im, "%s takes bool tensors, got %s", im->node->op_type, onnx_dtype_name(dt));
  bool flt = oi_float_like(dt);
  if (!flt && !oi_int_like(dt))
    return UNSUPPORTED(im, "%s of constants of type %s", im->node->op_type, onnx_dtype_name(dt));
  if ((code == OI_EV_ISNAN || code == OI_EV_ISINF || code == OI_EV_SQRT || code == OI_EV_EXP || code == OI_EV_LOG ||
       code == OI_EV_RECIP || code == OI_EV_SIGMOID || code == OI_EV_TANH || code == OI_EV_ERF ||
       code == OI_EV_SIN || code == OI_EV_COS || code == OI_EV_FLOOR || code == OI_EV_CEIL ||
       code == OI_EV_ROUND) && !flt)
    return FAIL(im, "%s takes float tensors, got %s", im->node->op_type, onnx_dtype_name(dt));
  int64_t fmod_attr = 0;
  if (code == OI_EV_MOD && !oi_attr_int(im, "fmod", 0, &fmod_attr)) return false;
  if (code == OI_EV_MOD && flt && !fmod_attr) return FAIL(im, "Mod of floats needs fmod=1");
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  if (!oi_bcast_dims(im, in, n, &rank, dims)) return false;
  bool to_bool = is_compare(code) || is_logic(code) || code == OI_EV_ISNAN || code == OI_EV_ISINF;
  onnx_tensor *o = oi_fold_tensor(im, to_bool ? ONNX_BOOL : dt, rank, dims);
  if (!o) return false;
  bool dim_n = dt == ONNX_INT64; /* only an int64 element can be the batch N */
  for (int64_t i = 0; i < o->numel; i++) {
    int64_t a = oi_bcast_index(in[0], rank, dims, i);
    if (n == 1) {
      if (flt) {
        oi_elem_set_f64(o, i, flt_unary(code, oi_elem_f64(in[0], a)));
        continue;
      }
      int64_t x = oi_elem_i64(in[0], a), z;
      if (dim_n && x == DIM_N) return batch_error(im);
      switch ((int)code) {
      case OI_EV_NEG: z = (int64_t)(0 - (uint64_t)x); break;
      case OI_EV_ABS: z = x < 0 ? (int64_t)(0 - (uint64_t)x) : x; break;
      case OI_EV_SIGN: z = (x > 0) - (x < 0); break;
      case OI_EV_RELU: z = x > 0 ? x : 0; break;
      case OI_EV_NOT: z = !x; break;
      default: z = x; break;
      }
      oi_elem_set_i64(o, i, z);
      continue;
    }
    if (flt) {
      double z = oi_elem_f64(in[0], a);
      for (int k = 1; k < n; k++)
        if (in[k]) z = flt_binary(code, z, oi_elem_f64(in[k], oi_bcast_index(in[k], rank, dims, i)), fmod_attr);
      oi_elem_set_f64(o, i, z);
      continue;
    }
    int64_t z = oi_elem_i64(in[0], a);
    for (int k = 1; k < n; k++) {
      if (!in[k]) continue;
      int64_t y = oi_elem_i64(in[k], oi_bcast_index(in[k], rank, dims, i));
      if (dim_n && (z == DIM_N || y == DIM_N)) {
        if (code == OI_EV_EQ && z == y) { /* N == N */
          z = 1;
          continue;
        }
        return batch_error(im);
      }
      if (!int_binary(im, code, z, y, fmod_attr, &z)) return false;
    }
    oi_elem_set_i64(o, i, z);
  }
  return oi_fold_define(im, 0, o);
}

bool oi_eval_where(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  if (in[0]->dtype != ONNX_BOOL) return FAIL(im, "Where's condition must be bool, got %s", onnx_dtype_name(in[0]->dtype));
  if (in[1]->dtype != in[2]->dtype)
    return FAIL(im, "Where's operands differ in type (%s and %s)", onnx_dtype_name(in[1]->dtype), onnx_dtype_name(in[2]->dtype));
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  if (!oi_bcast_dims(im, in, 3, &rank, dims)) return false;
  onnx_tensor *o = oi_fold_tensor(im, in[1]->dtype, rank, dims);
  if (!o) return false;
  size_t es = onnx_dtype_size(o->dtype);
  for (int64_t i = 0; i < o->numel; i++) {
    bool c = oi_elem_i64(in[0], oi_bcast_index(in[0], rank, dims, i)) != 0;
    const onnx_tensor *s = c ? in[1] : in[2];
    memcpy((char *)o->data + (size_t)i * es, (const char *)s->data + (size_t)oi_bcast_index(s, rank, dims, i) * es, es);
  }
  return oi_fold_define(im, 0, o);
}

/* Range(start, limit, delta): scalars of one type. */
bool oi_eval_range(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  int dt = in[0]->dtype;
  for (int i = 0; i < 3; i++) {
    if (in[i]->numel != 1) return FAIL(im, "Range's %s must be a scalar", (const char *[]){"start", "limit", "delta"}[i]);
    if (in[i]->dtype != dt) return FAIL(im, "Range's inputs differ in type");
    if (dt == ONNX_INT64 && oi_elem_i64(in[i], 0) == DIM_N) return batch_error(im);
  }
  double start = oi_elem_f64(in[0], 0), limit = oi_elem_f64(in[1], 0), delta = oi_elem_f64(in[2], 0);
  if (delta == 0) return FAIL(im, "Range's delta is 0");
  double count = ceil((limit - start) / delta);
  if (!(count >= 0)) count = 0;
  if (count > (double)OI_FOLD_MAX) count = (double)OI_FOLD_MAX + 1; /* oi_fold_tensor refuses it */
  onnx_tensor *o = oi_fold_tensor(im, dt, 1, (int64_t[]){(int64_t)count});
  if (!o) return false;
  if (oi_float_like(dt)) {
    for (int64_t i = 0; i < o->numel; i++) oi_elem_set_f64(o, i, start + (double)i * delta);
  } else {
    int64_t s = oi_elem_i64(in[0], 0), d = oi_elem_i64(in[2], 0);
    for (int64_t i = 0; i < o->numel; i++) oi_elem_set_i64(o, i, s + i * d);
  }
  return oi_fold_define(im, 0, o);
}

/* outer x dim x inner split of t along axis a */
static void split3(const onnx_tensor *t, int a, int64_t *outer, int64_t *inner) {
  *outer = 1, *inner = 1;
  for (int r = 0; r < a; r++) *outer *= t->dims[r];
  for (int r = a + 1; r < t->rank; r++) *inner *= t->dims[r];
}

bool oi_eval_cumsum(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row, (void)n;
  const onnx_tensor *x = in[0];
  if (in[1]->numel != 1 || !oi_int_like(in[1]->dtype)) return FAIL(im, "CumSum's axis must be an integer scalar");
  int a;
  int64_t exclusive, reverse;
  if (!oi_norm_axis(im, oi_elem_i64(in[1], 0), x->rank, "CumSum axis", &a) ||
      !oi_attr_int(im, "exclusive", 0, &exclusive) || !oi_attr_int(im, "reverse", 0, &reverse))
    return false;
  if (!oi_float_like(x->dtype) && !oi_int_like(x->dtype))
    return UNSUPPORTED(im, "CumSum of constants of type %s", onnx_dtype_name(x->dtype));
  onnx_tensor *o = oi_fold_tensor(im, x->dtype, x->rank, x->dims);
  if (!o) return false;
  int64_t outer, inner, d = x->dims[a];
  split3(x, a, &outer, &inner);
  bool flt = oi_float_like(x->dtype);
  for (int64_t q = 0; q < outer; q++)
    for (int64_t j = 0; j < inner; j++) {
      double fs = 0;
      int64_t is = 0;
      for (int64_t k = 0; k < d; k++) {
        int64_t kk = reverse ? d - 1 - k : k, e = (q * d + kk) * inner + j;
        if (!flt && x->dtype == ONNX_INT64 && oi_elem_i64(x, e) == DIM_N) return batch_error(im);
        if (exclusive) flt ? oi_elem_set_f64(o, e, fs) : oi_elem_set_i64(o, e, is);
        if (flt) fs += oi_elem_f64(x, e);
        else is = (int64_t)((uint64_t)is + (uint64_t)oi_elem_i64(x, e));
        if (!exclusive) flt ? oi_elem_set_f64(o, e, fs) : oi_elem_set_i64(o, e, is);
      }
    }
  return oi_fold_define(im, 0, o);
}

/* Trilu: the lower (upper=0) or upper triangle of the last two dims, from diagonal k. */
bool oi_eval_trilu(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)row;
  const onnx_tensor *x = in[0];
  if (x->rank < 2) return FAIL(im, "Trilu of a tensor of rank %d (at least 2)", x->rank);
  int64_t upper, k = 0;
  if (!oi_attr_int(im, "upper", 1, &upper)) return false;
  if (n > 1 && in[1]) {
    if (in[1]->numel != 1 || !oi_int_like(in[1]->dtype)) return FAIL(im, "Trilu's k must be an integer scalar");
    k = oi_elem_i64(in[1], 0);
  }
  onnx_tensor *o = oi_fold_tensor(im, x->dtype, x->rank, x->dims);
  if (!o) return false;
  int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
  size_t es = onnx_dtype_size(x->dtype);
  if (o->nbytes) memset((void *)o->data, 0, o->nbytes); /* an empty tensor has no data */
  for (int64_t e = 0; e < x->numel; e++) {
    int64_t j = e % cols, i = (e / cols) % rows;
    bool keep = upper ? j - i >= k : j - i <= k;
    if (keep) memcpy((char *)o->data + (size_t)e * es, (const char *)x->data + (size_t)e * es, es);
  }
  return oi_fold_define(im, 0, o);
}

/* ReduceSum, ReduceProd, ReduceMax, ReduceMin, ReduceMean of a constant;
 * axes an attribute or (ReduceSum 13-, the others 18-) input 1. */
bool oi_eval_reduce(imp *im, const oi_fold_row *row, const onnx_tensor *const *in, int n) {
  (void)n;
  const onnx_tensor *x = in[0];
  int64_t axes[ONNX_MAX_RANK], keepdims, noop;
  int na;
  if (!oi_axes_of(im, 1, axes, &na) || !oi_attr_int(im, "keepdims", 1, &keepdims) ||
      !oi_attr_int(im, "noop_with_empty_axes", 0, &noop))
    return false;
  bool red[ONNX_MAX_RANK] = {0};
  if (na <= 0 && noop) return oi_fold_define(im, 0, x);
  for (int r = 0; r < x->rank; r++) red[r] = na <= 0;
  for (int i = 0; i < na; i++) {
    int a;
    if (!oi_norm_axis(im, axes[i], x->rank, "axis", &a)) return false;
    red[a] = true;
  }
  int64_t dims[ONNX_MAX_RANK], kdims[ONNX_MAX_RANK];
  int rank = 0;
  for (int r = 0; r < x->rank; r++) {
    kdims[r] = red[r] ? 1 : x->dims[r];
    if (!red[r] || keepdims) dims[rank++] = kdims[r];
  }
  bool flt = oi_float_like(x->dtype);
  if (!flt && !oi_int_like(x->dtype)) return UNSUPPORTED(im, "%s of constants of type %s", row->op, onnx_dtype_name(x->dtype));
  onnx_tensor *o = oi_fold_tensor(im, x->dtype, rank, dims);
  if (!o) return false;
  int64_t count = o->numel ? x->numel / o->numel : 0;
  double *acc = arena_alloc(im->g->arena, (size_t)(o->numel + 1) * sizeof *acc);
  int64_t *iacc = arena_alloc(im->g->arena, (size_t)(o->numel + 1) * sizeof *iacc);
  bool *seen = arena_alloc(im->g->arena, (size_t)o->numel + 1);
  memset(seen, 0, (size_t)o->numel + 1);
  for (int64_t e = 0; e < x->numel; e++) {
    int64_t rem = e, oi = 0, stride = 1;
    for (int r = x->rank - 1; r >= 0; r--) {
      int64_t c = rem % x->dims[r];
      rem /= x->dims[r];
      if (!red[r]) oi += c * stride;
      stride *= kdims[r];
    }
    if (!flt && x->dtype == ONNX_INT64 && oi_elem_i64(x, e) == DIM_N) return batch_error(im);
    double v = oi_elem_f64(x, e);
    int64_t iv = oi_elem_i64(x, e);
    if (!seen[oi]) {
      seen[oi] = true, acc[oi] = v, iacc[oi] = iv;
      continue;
    }
    switch ((int)row->code) {
    case OI_EV_ADD: acc[oi] += v, iacc[oi] += iv; break;
    case OI_EV_MUL: acc[oi] *= v, iacc[oi] *= iv; break;
    case OI_EV_MAX: acc[oi] = v > acc[oi] ? v : acc[oi], iacc[oi] = iv > iacc[oi] ? iv : iacc[oi]; break;
    case OI_EV_MEAN: acc[oi] += v, iacc[oi] += iv; break;
    default: acc[oi] = v < acc[oi] ? v : acc[oi], iacc[oi] = iv < iacc[oi] ? iv : iacc[oi]; break;
    }
  }
  for (int64_t i = 0; i < o->numel; i++) {
    if (!seen[i]) { /* an empty reduction: the identity */
      if (row->code == OI_EV_MAX || row->code == OI_EV_MIN)
        return FAIL(im, "%s over an empty axis", row->op);
      acc[i] = iacc[i] = row->code == OI_EV_MUL;
    }
    if (flt) oi_elem_set_f64(o, i, row->code == OI_EV_MEAN ? acc[i] / (double)count : acc[i]);
    else oi_elem_set_i64(o, i, row->code == OI_EV_MEAN ? iacc[i] / (count ? count : 1) : iacc[i]);
  }
  return oi_fold_define(im, 0, o);
}
