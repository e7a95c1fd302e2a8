/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fold_constants.c: casts of weights happen at compile time.
 *
 * In:  a verified graph after autocast and cast-cleanup.
 * Out: every cast whose operand is a constant is itself a constant holding
 *      the converted data (same weight key, the cast's name, so dumps show
 *      %dense_1.kernel.f16); the f32 original is left for dce. Mixed
 *      policies thus store each weight once, in the compute dtype.
 *      Conversion rounds to nearest even (util/half.c, bit-exact with NumPy
 *      and ml_dtypes). Values that overflow to infinity (|x| > 65504 in
 *      f16) or that are non-zero but become zero or subnormal are counted
 *      and reported as warnings naming the tensor, never clamped.
 *      Constants read from text IR have no data; their casts fold all the
 *      same, into constants without data. Pads of constants (pad8) fold
 *      into zero-extended constants the same way, and reshapes of
 *      constants (a depthwise kernel [KH,KW,C,M] read as [KH,KW,1,C*M])
 *      into constants of the new shape holding the same data. Layout ops
 *      whose operands are all constants (transpose, strided_slice, concat:
 *      an ONNX LSTM's gate reordering and transposes of its weights) and
 *      f32 adds of two constants of one shape (its two biases) become
 *      constants holding their results, named after themselves (constants
 *      of the compiler's, as fold-empty's): computed once here, never per
 *      run. Training graphs' trainable weights are variables by now, never
 *      folded.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "util/half.h"
#include "passes/passes.h"

static float load(const void *data, ir_dtype t, int64_t i) {
  switch (t) {
  case DT_F32: return ((const float *)data)[i];
  case DT_F16: return half_f16_to_f32(((const uint16_t *)data)[i]);
  case DT_BF16: return half_bf16_to_f32(((const uint16_t *)data)[i]);
  case DT_I32:
  case DT_I64:
  case DT_I1:
  case DT_COUNT: break;
  }
  CASTOR_UNREACHABLE();
  return 0;
}

/* Stores x converted to t; returns the value actually stored. */
static float store(void *data, ir_dtype t, int64_t i, float x) {
  switch (t) {
  case DT_F32: return ((float *)data)[i] = x;
  case DT_F16: return half_f16_to_f32(((uint16_t *)data)[i] = half_f32_to_f16(x));
  case DT_BF16: return half_bf16_to_f32(((uint16_t *)data)[i] = half_f32_to_bf16(x));
  case DT_I32:
  case DT_I64:
  case DT_I1:
  case DT_COUNT: break;
  }
  CASTOR_UNREACHABLE();
  return 0;
}

/* f32 -> f16/bf16 of a large weight, split over the CPUs: under a 16-bit
 * policy this is the one pass over every weight that the compile runs
 * before any other work can start. Each part converts and counts its own
 * range (half_f32_to_16_n is element-wise, so the parts' data and summed
 * counts are those of one pass); a part that gets no thread runs here. */
enum { CONVERT_PART_MIN = 1 << 20, CONVERT_MAX_PARTS = 4 };

typedef struct convert_part {
  const float *x;
  uint16_t *y;
  int64_t n, overflow, flushed;
  int to_bf16;
} convert_part;

static void *convert_main(void *arg) {
  convert_part *c = arg;
  half_f32_to_16_n(c->x, c->y, c->n, c->to_bf16, &c->overflow, &c->flushed);
  return NULL;
}

static void convert_f32_to_16(const float *x, uint16_t *y, int64_t n, int to_bf16, int64_t *overflow,
                              int64_t *flushed) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t parts = n / CONVERT_PART_MIN;
  if (parts > cpus) parts = cpus;
  if (parts > CONVERT_MAX_PARTS) parts = CONVERT_MAX_PARTS;
  if (parts < 1) parts = 1;
  convert_part c[CONVERT_MAX_PARTS];
  pthread_t th[CONVERT_MAX_PARTS];
  bool started[CONVERT_MAX_PARTS] = {false};
  int64_t step = (n / parts + 15) / 16 * 16; /* whole blocks of 16 (half_f32_to_16_n's vector blocks) */
  for (int p = 0; p < parts; p++) {
    int64_t at = p * step < n ? p * step : n, end = (p + 1) * step < n && p + 1 < parts ? (p + 1) * step : n;
    c[p] = (convert_part){x + at, y + at, end - at, 0, 0, to_bf16};
  }
  for (int p = 1; p < parts; p++) started[p] = pthread_create(&th[p], NULL, convert_main, &c[p]) == 0;
  convert_main(&c[0]);
  for (int p = 1; p < parts; p++)
    if (started[p]) pthread_join(th[p], NULL);
    else convert_main(&c[p]);
  *overflow = *flushed = 0;
  for (int p = 0; p < parts; p++) *overflow += c[p].overflow, *flushed += c[p].flushed;
}

static float min_normal(ir_dtype t) { return t == DT_F16 ? 0x1p-14f : 0x1p-126f; }

/* pad(const) -> const: the data zero-extended to the padded shape. */
static void fold_pad(ir_graph *g, ir_node *p) {
  ir_node *k = p->srcs[0];
  void *out = NULL;
  if (k->attr.data) {
    int64_t bytes, esize = dtype_size(p->type.dtype);
    CASTOR_ASSERT(ir_type_bytes(&p->type, 1, &bytes));
    out = arena_alloc_aligned(g->arena, (size_t)bytes, 64); /* zeroed */
    const ir_type *xt = &k->type;
    int64_t rows = 1, cols = xt->rank ? xt->dims[xt->rank - 1] : 1;
    for (int d = 0; d + 1 < xt->rank; d++) rows *= xt->dims[d];
    for (int64_t r = 0; r < rows; r++) { /* row r of k (its leading coordinates) at its place in p */
      int64_t rem = r, at = 0, stride = p->type.rank ? p->type.dims[p->type.rank - 1] : 1;
      for (int d = xt->rank - 2; d >= 0; d--) {
        at += rem % xt->dims[d] * stride;
        rem /= xt->dims[d], stride *= p->type.dims[d];
      }
      memcpy((char *)out + at * esize, (const char *)k->attr.data + r * cols * esize, (size_t)(cols * esize));
    }
  }
  const char *weight = k->attr.weight;
  p->op = IR_OP_CONST;
  p->n_srcs = 0;
  p->srcs[0] = NULL;
  memset(&p->attr, 0, sizeof p->attr);
  p->attr.weight = weight;
  p->attr.data = out;
  p->frozen = k->frozen;
}

/* ---- layout ops and adds of constants ---- */

static bool all_const(const ir_node *n) {
  for (int s = 0; s < n->n_srcs; s++)
    if (n->srcs[s]->op != IR_OP_CONST) return false;
  return n->n_srcs > 0;
}

static bool foldable(const ir_node *n) {
  if (!all_const(n) || ir_type_is_batched(&n->type)) return false;
  if (n->op == IR_OP_TRANSPOSE || n->op == IR_OP_STRIDED_SLICE || n->op == IR_OP_CONCAT) return true;
  return n->op == IR_OP_ADD && n->type.dtype == DT_F32 && ir_type_eq(&n->srcs[0]->type, &n->type) &&
         ir_type_eq(&n->srcs[1]->type, &n->type);
}

static void strides_of(const ir_type *t, int64_t *st) {
  int64_t m = 1;
  for (int d = t->rank - 1; d >= 0; d--) st[d] = m, m *= t->dims[d];
}

/* n's elements, in row-major order, from its constant operands' data:
 * element o (coordinates idx) of a transpose is x at idx[d] along
 * perm[d]; of a strided_slice x at starts[d] + idx[d] * steps[d]; of a
 * concat the operand that holds idx[axis]. */
static void *fold_data(ir_graph *g, const ir_node *n) {
  int64_t numel = 0, bytes = 0, esize = dtype_size(n->type.dtype);
  CASTOR_ASSERT(ir_type_numel(&n->type, 1, &numel) && ir_type_bytes(&n->type, 1, &bytes));
  char *out = arena_alloc_aligned(g->arena, (size_t)(bytes ? bytes : 1), 64);
  if (n->op == IR_OP_ADD) {
    const float *a = n->srcs[0]->attr.data, *b = n->srcs[1]->attr.data;
    for (int64_t e = 0; e < numel; e++) ((float *)out)[e] = a[e] + b[e]; /* the kernel's one f32 add */
    return out;
  }
  int rank = n->type.rank, axis = n->op == IR_OP_CONCAT ? ir_concat_axis(&n->type, n->attr.axis) : 0;
  int64_t idx[IR_MAX_RANK] = {0}, xs[IR_MAX_SRCS][IR_MAX_RANK], first[IR_MAX_RANK] = {0}, cnt[IR_MAX_RANK];
  for (int s = 0; s < n->n_srcs; s++) strides_of(&n->srcs[s]->type, xs[s]);
  if (n->op == IR_OP_STRIDED_SLICE) {
    char err[256];
    CASTOR_ASSERT(ir_strided_slice_bounds(&n->srcs[0]->type, &n->attr, first, cnt, err, sizeof err));
  }
  for (int64_t o = 0; o < numel; o++) {
    int src = 0;
    int64_t at = 0;
    if (n->op == IR_OP_TRANSPOSE) {
      for (int d = 0; d < rank; d++) at += idx[d] * xs[0][n->attr.perm.v[d]];
    } else if (n->op == IR_OP_STRIDED_SLICE) {
      for (int d = 0; d < rank; d++) at += (first[d] + idx[d] * n->attr.steps.v[d]) * xs[0][d];
    } else { /* concat */
      int64_t along = idx[axis];
      while (along >= n->srcs[src]->type.dims[axis]) along -= n->srcs[src++]->type.dims[axis];
      for (int d = 0; d < rank; d++) at += (d == axis ? along : idx[d]) * xs[src][d];
    }
    memcpy(out + o * esize, (const char *)n->srcs[src]->attr.data + at * esize, (size_t)esize);
    for (int d = rank - 1; d >= 0 && ++idx[d] == n->type.dims[d]; d--) idx[d] = 0;
  }
  return out;
}

static void fold_layout(ir_graph *g, ir_node *n) {
  bool data = true;
  for (int s = 0; s < n->n_srcs; s++) data = data && n->srcs[s]->attr.data;
  void *out = data ? fold_data(g, n) : NULL;
  const char *rule = n->srcs[0]->rule;
  bool frozen = true; /* a constant of constants training leaves (an ONNX literal's slice) stays one */
  for (int s = 0; s < n->n_srcs; s++) frozen = frozen && n->srcs[s]->frozen;
  n->frozen = frozen;
  n->op = IR_OP_CONST;
  for (int s = 0; s < n->n_srcs; s++) n->srcs[s] = NULL;
  n->n_srcs = 0;
  memset(&n->attr, 0, sizeof n->attr);
  n->attr.weight = n->name; /* a constant of the compiler's, named after its value */
  n->attr.data = out;
  n->rule = rule;
}

bool pass_fold_constants_run(ir_graph *g, pass_context *ctx) {
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *c = g->nodes[i];
    if (foldable(c)) {
      fold_layout(g, c);
      continue;
    }
    if (c->op == IR_OP_PAD && c->srcs[0]->op == IR_OP_CONST) {
      fold_pad(g, c);
      continue;
    }
    if (c->op == IR_OP_RESHAPE && c->srcs[0]->op == IR_OP_CONST) { /* the same data (a depthwise kernel) */
      ir_node *k = c->srcs[0];
      c->op = IR_OP_CONST;
      c->n_srcs = 0;
      c->srcs[0] = NULL;
      memset(&c->attr, 0, sizeof c->attr);
      c->attr.weight = k->attr.weight;
      c->attr.data = k->attr.data;
      c->rule = k->rule;
      c->frozen = k->frozen;
      continue;
    }
    if (c->op != IR_OP_CAST || c->srcs[0]->op != IR_OP_CONST) continue;
    ir_node *k = c->srcs[0];
    ir_dtype from = k->type.dtype, to = c->type.dtype;
    if (!dtype_is_float(from) || !dtype_is_float(to)) continue;
    void *out = NULL;
    if (k->attr.data) {
      int64_t n = 0, bytes = 0;
      CASTOR_ASSERT(ir_type_numel(&c->type, 1, &n) && ir_type_bytes(&c->type, 1, &bytes));
      out = arena_alloc_aligned(g->arena, (size_t)bytes, 64);
      int64_t overflow = 0, flushed = 0;
      if (from == DT_F32 && to != DT_F32) /* the common case (a mixed policy's weights), in one pass */
        convert_f32_to_16(k->attr.data, out, n, to == DT_BF16, &overflow, &flushed);
      else for (int64_t e = 0; e < n; e++) {
        float x = load(k->attr.data, from, e), y = store(out, to, e, x);
        if (isinf(y) && !isinf(x)) overflow++;
        else if (x != 0 && !isnan(x) && fabsf(y) < min_normal(to)) flushed++;
      }
      if (overflow)
        diag_warning(ctx->diag, k->loc,
                     "weight '%s': %lld of %lld values overflow %s (|x| > %g) and become infinite",
                     k->attr.weight, (long long)overflow, (long long)n, dtype_name(to),
                     to == DT_F16 ? 65504.0 : 3.3895313892515355e38);
      if (flushed)
        diag_warning(ctx->diag, k->loc,
                     "weight '%s': %lld of %lld non-zero values become zero or subnormal in %s (|x| < %g)",
                     k->attr.weight, (long long)flushed, (long long)n, dtype_name(to),
                     (double)min_normal(to));
    }
    c->op = IR_OP_CONST;
    c->n_srcs = 0;
    c->srcs[0] = NULL;
    const char *weight = k->attr.weight;
    memset(&c->attr, 0, sizeof c->attr);
    c->attr.weight = weight;
    c->attr.data = out;
    c->frozen = k->frozen;
  }
  return true;
}
