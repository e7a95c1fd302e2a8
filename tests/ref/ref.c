/*
 * ref.c: the float64 reference interpreter (contract in ref.h).
 *
 * Each node gets a malloc'ed double array of its element count at the run's
 * batch, computed from its sources' arrays and then rounded to the node's
 * dtype by ref_round. Arrays are freed after their last use. Every size is
 * checked against the node types before a loop touches memory, so a
 * malformed graph is an error message, never an overrun.
 */
#include "ref.h"

#include "../../util/half.h"

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
  case IR_DTYPE_F32: return (double)(float)x;
  case IR_DTYPE_F16: return round_to_format(x, 10, -14, 65504.0);
  case IR_DTYPE_BF16: return round_to_format(x, 7, -126, 0x1.fep127);
  case IR_DTYPE_I32:
  case IR_DTYPE_I64:
  case IR_DTYPE_I1:
  case IR_DTYPE_COUNT: break;
  }
  return x;
}

/* The per-value storage rounding: only 16-bit floats (see ref.h). */
static double store(double x, ir_dtype dtype) {
  return dtype == IR_DTYPE_F16 || dtype == IR_DTYPE_BF16 ? ref_round(x, dtype) : x;
}

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

static bool const_values(const ir_node *n, double *y, int64_t count, char *err, size_t errlen) {
  const void *p = n->attr.data;
  if (!p) return FAIL("const %%%s (%s) has no data", n->name, n->attr.weight);
  for (int64_t i = 0; i < count; i++) {
    switch (n->type.dtype) {
    case IR_DTYPE_F32: y[i] = ((const float *)p)[i]; break;
    case IR_DTYPE_F16: y[i] = half_f16_to_f32(((const uint16_t *)p)[i]); break;
    case IR_DTYPE_BF16: y[i] = half_bf16_to_f32(((const uint16_t *)p)[i]); break;
    case IR_DTYPE_I32: y[i] = ((const int32_t *)p)[i]; break;
    case IR_DTYPE_I64: y[i] = (double)((const int64_t *)p)[i]; break;
    case IR_DTYPE_I1: y[i] = ((const uint8_t *)p)[i] != 0; break;
    case IR_DTYPE_COUNT:
      return FAIL("const %%%s has an invalid dtype", n->name);
    }
  }
  return true;
}

static bool cast_value(const ir_node *n, double x, double *out, char *err, size_t errlen) {
  ir_dtype to = n->attr.to;
  switch (to) {
  case IR_DTYPE_F32:
  case IR_DTYPE_F16:
  case IR_DTYPE_BF16: *out = ref_round(x, to); return true;
  case IR_DTYPE_I32:
  case IR_DTYPE_I64: {
    double lim = to == IR_DTYPE_I32 ? 0x1p31 : 0x1p63;
    double r = nearbyint(x);
    if (!(r >= -lim && r < lim))
      return FAIL("cast %%%s: %g does not fit %s", n->name, x, ir_dtype_name(to));
    *out = r;
    return true;
  }
  case IR_DTYPE_I1: *out = x != 0; return true;
  case IR_DTYPE_COUNT: break;
  }
  return FAIL("cast %%%s: invalid target dtype", n->name);
}

static double gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }

/* Computes node n into y (count elements) from its source arrays. */
static bool eval(const ir_node *n, double *const *src, const int64_t *n_src, double *y,
                 int64_t count, const double *const *inputs, int n_inputs, char *err,
                 size_t errlen) {
  const ir_type *t = &n->type;
  switch (n->op) {
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
    if (ta->rank != 2 || tb->rank != 2 || t->rank != 2)
      return FAIL("matmul %%%s: operands must be rank 2", n->name);
    int64_t k = tb->dims[0], nc = tb->dims[1];
    int64_t m = k > 0 ? n_src[0] / k : (nc > 0 ? count / nc : 0);
    if (ta->dims[1] != k || n_src[0] != m * k || n_src[1] != k * nc || count != m * nc)
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
  case IR_OP_MUL: {
    int64_t last = t->rank ? t->dims[t->rank - 1] : 1;
    bool same = n_src[1] == count, bias = !same && last > 0 && n_src[1] == last;
    if (n_src[0] != count || (!same && !bias))
      return FAIL("%s %%%s: operand sizes %lld and %lld do not match", ir_op_name(n->op),
                  n->name, (long long)n_src[0], (long long)n_src[1]);
    bool add = n->op == IR_OP_ADD;
    for (int64_t i = 0; i < count; i++) {
      double b = src[1][same ? i : i % last];
      y[i] = add ? src[0][i] + b : src[0][i] * b;
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
      case IR_OP_SIGMOID: y[i] = 1.0 / (1.0 + exp(-x)); break;
      case IR_OP_TANH: y[i] = tanh(x); break;
      case IR_OP_GELU: y[i] = gelu(x); break;
      case IR_OP_SILU: y[i] = x / (1.0 + exp(-x)); break;
      case IR_OP_CAST:
        if (!cast_value(n, x, &y[i], err, errlen)) return false;
        break;
      case IR_OP_INPUT:
      case IR_OP_CONST:
      case IR_OP_MATMUL:
      case IR_OP_ADD:
      case IR_OP_MUL:
      case IR_OP_SOFTMAX:
      case IR_OP_LAYER_NORM:
      case IR_OP_PAD:
      case IR_OP_SLICE:
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
  case IR_OP_LAYER_NORM: {
    /* two-pass mean and biased variance over each block of the normalized
     * (trailing) dimensions, gamma and beta over the block */
    int first = ir_norm_first_dim(t, n->attr.axis);
    int64_t inner = 1;
    for (int r = first < 0 ? t->rank : first; r < t->rank; r++) inner *= t->dims[r];
    if (first < 0 || n_src[0] != count || n_src[1] != inner || n_src[2] != inner || count % inner)
      return FAIL("layer_norm %%%s: inconsistent sizes", n->name);
    for (int64_t r = 0; r < count / inner; r++) {
      const double *x = src[0] + r * inner;
      double *row = y + r * inner, mean = 0, var = 0;
      for (int64_t j = 0; j < inner; j++) mean += x[j];
      mean /= (double)inner;
      for (int64_t j = 0; j < inner; j++) var += (x[j] - mean) * (x[j] - mean);
      var /= (double)inner;
      double inv = 1.0 / sqrt(var + n->attr.epsilon);
      for (int64_t j = 0; j < inner; j++) row[j] = (x[j] - mean) * inv * src[1][j] + src[2][j];
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
    if (n->n_srcs != ir_op_arity(n->op) || n->n_srcs > IR_MAX_SRCS)
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
    ok = eval(n, src, n_src, val[i], numel[i], inputs, n_inputs, err, errlen);
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
    out_outputs[k] = memcpy(xmalloc(bytes), val[p], bytes);
  }
  for (int i = 0; i < nn; i++) free(val[i]);
  free(val), free(numel), free(last_use), free(srcpos), free(outpos);
  return ok;
}

#undef FAIL

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
