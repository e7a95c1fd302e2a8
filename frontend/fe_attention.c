/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fe_attention.c: Keras 3's MultiHeadAttention lowered to existing ops (no
 * kernel of its own), for the .cast layer multi_head_attention and the
 * Keras class MultiHeadAttention. As
 * keras/src/layers/attention/multi_head_attention.py computes it for query
 * [N, T, d], value [N, S, dv_in], key [N, S, dk_in] (key defaults to
 * value), with H heads:
 *   q = einsum("abc,cde->abde", query, query/kernel [d, H, key_dim]) + query/bias [H, key_dim]
 *   k, v likewise (key/..., value/... with value_dim)
 *   q = q * (1 / sqrt(key_dim)), in q's dtype
 *   scores = einsum("aecd,abcd->acbe", k, q)            [N, H, T, S]
 *   p = softmax(scores) over S (the IR's softmax: always float32)
 *   o = einsum("acbe,aecd->abcd", p, v)                 [N, T, H, value_dim]
 *   y = einsum("abcd,cde->abe", o, attention_output/kernel [H, value_dim, d]) + attention_output/bias [d]
 * The projections are Dense on rank 3 (matmul over the flat [H*D] view of
 * each kernel: a reshape of the weight, which keeps Keras's shape), the
 * two attention einsums batch_matmuls over [N, H] after a transpose of the
 * heads to dimension 1. Dropout (Keras's dropout=0 default) is not taken.
 *
 * Masks (Keras's _compute_attention_mask and _masked_softmax): the
 * attention mask, an input [N, T, S] whose nonzero elements attend (Keras
 * casts it to bool), broadcast over the heads as [N, 1, T, S]; the causal
 * mask (use_causal_mask), Keras's [T, S] mask, query position i attending
 * to key positions j <= i, built from literals (causal_mask below: no
 * weight, nothing trained); both together attend where both do. Each mask
 * m is two selects around the softmax, as Keras's Softmax(mask):
 *   scores = select(m, scores, -3e4)   (Keras's fill for float16, castor's
 *                                       under every policy: Keras's -1e9
 *                                       is -inf in float16; either is 0
 *                                       after the softmax's exp)
 *   p = select(m, softmax(scores), 0)  (a row masked whole gives zeros)
 * Their gradients are select's: dy where m attends, 0 elsewhere.
 */
#include "frontend/attention.h"

#include <math.h>

static ir_node *stamp(const fe_attention *a, ir_node *n) { return a->stamp(a->ctx, n); }

static const char *nm(const fe_attention *a, const char *suffix) {
  return arena_printf(a->arena, "%s.%s", a->name, suffix);
}

static ir_node *reshape(const fe_attention *a, const char *name, ir_node *x, int rank, const int64_t *dims) {
  ir_attr at = {.shape = {rank, {0}}};
  for (int r = 0; r < rank; r++) at.shape.dims[r] = dims[r];
  return stamp(a, ir_build_op(a->g, IR_OP_RESHAPE, name, &x, 1, &at, a->loc));
}

static ir_node *literal(const fe_attention *a, const char *name, double v) {
  ir_node *n = ir_node_new(a->g, IR_OP_LITERAL, &(ir_type){DT_F32, 0, {0}}, NULL, 0, name, a->loc);
  n->attr.value = v;
  ir_graph_append(a->g, stamp(a, n));
  return n;
}

/* Keras's EinsumDense "abc,cde->abde" and bias "de", then the heads moved
 * to dimension 1: x [N, T, C] -> [N, H, T, D]. */
static ir_node *project(const fe_attention *a, const char *sub, ir_node *x, ir_node *k, ir_node *b, int64_t D) {
  int64_t T = x->type.dims[1], C = x->type.dims[2], H = a->heads;
  ir_node *k2 = reshape(a, arena_printf(a->arena, "%s.%s.kernel_2d", a->name, sub), k, 2, (int64_t[]){C, H * D});
  ir_node *y = stamp(a, ir_build_matmul(a->g, nm(a, sub), x, k2, DT_F32, a->loc));
  if (b) {
    ir_node *b1 = reshape(a, arena_printf(a->arena, "%s.%s.bias_1d", a->name, sub), b, 1, (int64_t[]){H * D});
    y = stamp(a, ir_build_binary(a->g, IR_OP_ADD, arena_printf(a->arena, "%s.%s.bias_add", a->name, sub), y, b1,
                                 a->loc));
  }
  ir_node *y4 = reshape(a, arena_printf(a->arena, "%s.%s.heads", a->name, sub), y, 4, (int64_t[]){IR_DIM_BATCH, T, H, D});
  ir_attr ta = {.perm = {4, {0, 2, 1, 3}}};
  return stamp(a, ir_build_op(a->g, IR_OP_TRANSPOSE, arena_printf(a->arena, "%s.%s.transpose", a->name, sub), &y4, 1,
                              &ta, a->loc));
}

static ir_node *batch_matmul(const fe_attention *a, const char *name, ir_node *x, ir_node *y, int tb) {
  ir_attr at = {.acc = DT_F32, .transpose_b = tb};
  return stamp(a, ir_build_op(a->g, IR_OP_BATCH_MATMUL, name, (ir_node *[]){x, y}, 2, &at, a->loc));
}

static ir_node *vector_of(const fe_attention *a, const char *name, ir_node *lit, int64_t len) {
  ir_attr at = {.shape = {1, {len}}};
  return stamp(a, ir_build_op(a->g, IR_OP_BROADCAST_TO, name, &lit, 1, &at, a->loc));
}

/* Keras's causal mask [T, S], m[i][j] = j <= i, from literals. The vector
 * u = [1] ++ [0]*(S-1) ++ [1]*(T-1) (period P = T+S-1) repeated T times
 * and read as rows of P-1 makes row i start at element T-1-i of
 * [1]*T ++ [0]*(S-1): ones up to column i, zeros after; its first S
 * columns are the mask. */
static ir_node *causal_mask(const fe_attention *a, int64_t T, int64_t S) {
  const char *base = nm(a, "causal");
  ir_node *one = literal(a, arena_printf(a->arena, "%s.one", base), 1);
  ir_node *zero = literal(a, arena_printf(a->arena, "%s.zero", base), 0);
  ir_node *parts[3];
  int np = 0;
  parts[np++] = vector_of(a, arena_printf(a->arena, "%s.first", base), one, 1);
  if (S > 1) parts[np++] = vector_of(a, arena_printf(a->arena, "%s.zeros", base), zero, S - 1);
  if (T > 1) parts[np++] = vector_of(a, arena_printf(a->arena, "%s.ones", base), one, T - 1);
  ir_node *u = parts[0];
  if (np > 1) {
    ir_attr ca = {.axis = 0};
    u = stamp(a, ir_build_op(a->g, IR_OP_CONCAT, arena_printf(a->arena, "%s.period", base), parts, np, &ca, a->loc));
  }
  if (T == 1) return reshape(a, base, u, 2, (int64_t[]){1, S}); /* row 0: [1, 0, ...] */
  int64_t P = T + S - 1;
  ir_attr ba = {.shape = {2, {T, P}}};
  ir_node *t = stamp(a, ir_build_op(a->g, IR_OP_BROADCAST_TO, arena_printf(a->arena, "%s.tiled", base), &u, 1, &ba,
                                    a->loc));
  t = reshape(a, arena_printf(a->arena, "%s.flat", base), t, 1, (int64_t[]){T * P});
  ir_attr sa = {.starts = {1, {0}}, .ends = {1, {T * (P - 1)}}, .steps = {1, {1}}};
  t = stamp(a, ir_build_op(a->g, IR_OP_STRIDED_SLICE, arena_printf(a->arena, "%s.cut", base), &t, 1, &sa, a->loc));
  if (P - 1 == S) return reshape(a, base, t, 2, (int64_t[]){T, S});
  t = reshape(a, arena_printf(a->arena, "%s.rows", base), t, 2, (int64_t[]){T, P - 1});
  ir_attr ra = {.starts = {2, {0, 0}}, .ends = {2, {T, S}}, .steps = {2, {1, 1}}};
  return stamp(a, ir_build_op(a->g, IR_OP_STRIDED_SLICE, base, &t, 1, &ra, a->loc));
}

/* select(mask, x, fill) */
static ir_node *masked(const fe_attention *a, const char *name, ir_node *mask, ir_node *x, ir_node *fill) {
  return stamp(a, ir_build_op(a->g, IR_OP_SELECT, name, (ir_node *[]){mask, x, fill}, 3, &(ir_attr){0}, a->loc));
}

ir_node *fe_build_attention(const fe_attention *a, ir_node *query, ir_node *value, ir_node *key) {
  int64_t H = a->heads, dk = a->key_dim, dv = a->value_dim;
  int64_t T = query->type.dims[1], d = query->type.dims[2], S = value->type.dims[1];
  ir_node *q = project(a, "query", query, a->query_kernel, a->query_bias, dk);
  ir_node *k = project(a, "key", key, a->key_kernel, a->key_bias, dk);
  ir_node *v = project(a, "value", value, a->value_kernel, a->value_bias, dv);
  /* q * (1 / sqrt(key_dim)), the scalar in q's dtype (autocast rounds it with q) */
  ir_node *scale = literal(a, nm(a, "scale"), 1.0 / sqrt((double)dk));
  q = stamp(a, ir_build_binary(a->g, IR_OP_MUL, nm(a, "query.scaled"), q, scale, a->loc));
  ir_node *s = batch_matmul(a, nm(a, "scores"), q, k, 1);
  ir_node *mask = a->mask ? reshape(a, nm(a, "mask"), a->mask, 4, (int64_t[]){IR_DIM_BATCH, 1, T, S}) : NULL;
  ir_node *causal = a->causal ? causal_mask(a, T, S) : NULL;
  ir_node *fill = mask || causal ? literal(a, nm(a, "masked_fill"), -3e4) : NULL;
  if (mask) s = masked(a, nm(a, "scores.masked"), mask, s, fill);
  if (causal) s = masked(a, nm(a, "scores.causal"), causal, s, fill);
  ir_node *p = stamp(a, ir_build_unary(a->g, IR_OP_SOFTMAX, nm(a, "softmax"), s, a->loc));
  if (mask || causal) {
    ir_node *zero = literal(a, nm(a, "masked_zero"), 0);
    if (mask) p = masked(a, nm(a, "softmax.masked"), mask, p, zero);
    if (causal) p = masked(a, nm(a, "softmax.causal"), causal, p, zero);
  }
  ir_node *o = batch_matmul(a, nm(a, "combine"), p, v, 0);
  ir_attr ta = {.perm = {4, {0, 2, 1, 3}}};
  o = stamp(a, ir_build_op(a->g, IR_OP_TRANSPOSE, nm(a, "combine.transpose"), &o, 1, &ta, a->loc));
  o = reshape(a, nm(a, "combine.flat"), o, 3, (int64_t[]){IR_DIM_BATCH, T, H * dv});
  ir_node *ok2 = reshape(a, nm(a, "attention_output.kernel_2d"), a->output_kernel, 2, (int64_t[]){H * dv, d});
  ir_node *y = stamp(a, ir_build_matmul(a->g, a->output_bias ? nm(a, "attention_output") : a->name, o, ok2, DT_F32,
                                        a->loc));
  if (a->output_bias) y = stamp(a, ir_build_binary(a->g, IR_OP_ADD, a->name, y, a->output_bias, a->loc));
  return y;
}
