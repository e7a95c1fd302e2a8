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
 *      into constants of the new shape holding the same data.
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
}

bool pass_fold_constants_run(ir_graph *g, pass_context *ctx) {
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *c = g->nodes[i];
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
  }
  return true;
}
