/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lower_attn.c: general tensors' sequence layers of the .cast frontend,
 * lowered to existing ops (no kernel of their own):
 *
 *   global_average_pooling1d NAME   Keras GlobalAveragePooling1D: x [N, T, C]
 *                                   -> %NAME.image = reshape [N, 1, T, C],
 *                                   %NAME.pool = avg_pool2d {pool=[1, T]},
 *                                   %NAME = reshape [N, C]
 *   multi_head_attention NAME       Keras 3 MultiHeadAttention(num_heads,
 *                                   key_dim, value_dim, use_bias), called on
 *                                   (query, value[, key]); below
 *
 * multi_head_attention(query, value[, key], num_heads=, key_dim=,
 * value_dim=, use_bias=, attention_mask=M, use_causal_mask=) checks its
 * inputs and reads its weights here (NAME.query.kernel, NAME.query.bias,
 * ..., NAME.attention_output.bias: Keras's variable paths with '.' for
 * '/'); frontend/fe_attention.c builds the graph, shared with the Keras
 * frontend, masks included. attention_mask is the layer's last input: an
 * input [N, T, S], nonzero attends.
 *
 *   position_embedding NAME         KerasHub PositionEmbedding(sequence_length):
 *                                   %NAME.embeddings [sequence_length, D]
 *                                   (Glorot-uniform), its first T rows
 *                                   broadcast to x [N, T, D] (x's values
 *                                   unused): %NAME = select(1, rows, x), an
 *                                   exact broadcast whose gradient sums over N
 */
#include "frontend/cast/internal.h"
#include "frontend/attention.h"

#include <math.h>
#include <string.h>

static ir_node *reshape(lowering *lw, fe_layer *l, const char *name, ir_node *x, int rank, const int64_t *dims) {
  ir_attr a = {.shape = {rank, {0}}};
  for (int r = 0; r < rank; r++) a.shape.dims[r] = dims[r];
  return fe_stamp(lw, l, ir_build_op(lw->g, IR_OP_RESHAPE, name, &x, 1, &a, l->loc));
}

bool fe_lower_global_average_pooling1d(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  fe_model *m = lw->m;
  if (x->type.rank != 3 || !ir_type_is_batched(&x->type)) {
    diag_error(m->d, l->inputs[0].loc, "global_average_pooling1d needs an input [N, steps, features], got %s",
               fe_type_str(lw, &x->type));
    return false;
  }
  int64_t T = x->type.dims[1], C = x->type.dims[2];
  ir_node *img = reshape(lw, l, arena_printf(m->arena, "%s.image", l->name), x, 4,
                         (int64_t[]){IR_DIM_BATCH, 1, T, C});
  ir_attr pa = {.pool = {2, {1, T}}, .strides = {2, {1, T}}, .pads = {4, {0}}};
  ir_node *p = fe_stamp(lw, l, ir_build_op(lw->g, IR_OP_AVG_POOL2D, arena_printf(m->arena, "%s.pool", l->name), &img,
                                           1, &pa, l->loc));
  l->value = reshape(lw, l, l->name, p, 2, (int64_t[]){IR_DIM_BATCH, C});
  return true;
}

/* A weight of the layer: NAME.<sub>.<what>, Glorot (kernels) or zeros (biases) without a file. */
static ir_node *weight(lowering *lw, fe_layer *l, const char *sub, const char *what, int rank, const int64_t *dims,
                       bool bias) {
  fe_model *m = lw->m;
  ir_type t = {DT_F32, rank, {0}};
  for (int r = 0; r < rank; r++) t.dims[r] = dims[r];
  int64_t bytes;
  if (!ir_type_bytes(&t, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    diag_error(m->d, l->loc, "%s: the weight %s/%s %s would take more than %lld bytes", l->name, sub, what,
               fe_type_str(lw, &t), (long long)IR_MAX_TENSOR_BYTES);
    return NULL;
  }
  const char *key = arena_printf(m->arena, "%s.%s.%s", l->name, sub, what);
  const float *data = NULL;
  if (!fe_weights_get(&lw->w, lw->g, key, &t, false, l->name, l->loc, &data)) return NULL;
  if (bias && data && !lw->w.from_file && rank > 1) { /* biases start at zeros, as Keras's */
    int64_t n = 1;
    for (int r = 0; r < rank; r++) n *= dims[r];
    memset((float *)data, 0, (size_t)n * sizeof(float));
  }
  return fe_stamp(lw, l, ir_build_const(lw->g, key, &t, key, data, l->loc));
}

struct stamp_ctx {
  lowering *lw;
  fe_layer *l;
};

static ir_node *stamp_cb(void *ctx, ir_node *n) {
  struct stamp_ctx *c = ctx;
  return fe_stamp(c->lw, c->l, n);
}

bool fe_lower_multi_head_attention(lowering *lw, fe_layer *l, ir_node **in) {
  fe_model *m = lw->m;
  int n_in = l->mask_input ? l->n_inputs - 1 : l->n_inputs; /* attention masks: the mask is the last input */
  if (n_in > 3) {
    diag_error(m->d, l->inputs[3].loc, "multi_head_attention takes query, value and optionally key, got %d inputs",
               n_in);
    return false;
  }
  if (!l->num_heads || !l->key_dim) {
    diag_error(m->d, l->loc, "multi_head_attention needs num_heads= and key_dim=, as Keras's MultiHeadAttention");
    return false;
  }
  ir_node *q_in = in[0], *v_in = in[1], *k_in = n_in == 3 ? in[2] : in[1];
  static const char *const roles[] = {"query", "value", "key"};
  for (int i = 0; i < n_in; i++)
    if (in[i]->type.rank != 3 || !ir_type_is_batched(&in[i]->type)) {
      diag_error(m->d, l->inputs[i].loc, "multi_head_attention's %s must be [N, steps, features], got %s", roles[i],
                 fe_type_str(lw, &in[i]->type));
      return false;
    }
  if (k_in->type.dims[1] != v_in->type.dims[1]) {
    diag_error(m->d, l->inputs[2].loc, "multi_head_attention's key %s and value %s need the same number of steps",
               fe_type_str(lw, &k_in->type), fe_type_str(lw, &v_in->type));
    return false;
  }
  int64_t H = l->num_heads, dk = l->key_dim, dv = l->value_dim ? l->value_dim : l->key_dim;
  int64_t T = q_in->type.dims[1], d = q_in->type.dims[2], S = v_in->type.dims[1];
  struct stamp_ctx sc = {lw, l};
  fe_attention a = {.g = lw->g, .arena = m->arena, .loc = l->loc, .name = l->name, .stamp = stamp_cb, .ctx = &sc,
                    .heads = H, .key_dim = dk, .value_dim = dv, .causal = l->use_causal_mask};
  if (l->mask_input) { /* attention masks */
    ir_node *mi = in[l->n_inputs - 1];
    const fe_use *mu = &l->inputs[l->n_inputs - 1];
    if (mi->type.rank != 3 || !ir_type_is_batched(&mi->type) || mi->type.dims[1] != T || mi->type.dims[2] != S) {
      diag_error(m->d, mu->loc, "multi_head_attention's attention_mask must be [N, %lld, %lld] ([N, query steps, "
                 "value steps]) for query %s and value %s, got %s", (long long)T, (long long)S,
                 fe_type_str(lw, &q_in->type), fe_type_str(lw, &v_in->type), fe_type_str(lw, &mi->type));
      return false;
    }
    a.mask = mi;
  }
  static const char *const subs[3] = {"query", "key", "value"};
  ir_node **kw[3] = {&a.query_kernel, &a.key_kernel, &a.value_kernel}, **bw[3] = {&a.query_bias, &a.key_bias, &a.value_bias};
  const int64_t cin[3] = {d, k_in->type.dims[2], v_in->type.dims[2]}, dim[3] = {dk, dk, dv};
  for (int i = 0; i < 3; i++) {
    if (!(*kw[i] = weight(lw, l, subs[i], "kernel", 3, (int64_t[]){cin[i], H, dim[i]}, false))) return false;
    if (l->use_bias && !(*bw[i] = weight(lw, l, subs[i], "bias", 2, (int64_t[]){H, dim[i]}, true))) return false;
  }
  if (!(a.output_kernel = weight(lw, l, "attention_output", "kernel", 3, (int64_t[]){H, dv, d}, false))) return false;
  if (l->use_bias && !(a.output_bias = weight(lw, l, "attention_output", "bias", 1, (int64_t[]){d}, true))) return false;
  l->value = fe_build_attention(&a, q_in, v_in, k_in);
  return true;
}

bool fe_lower_position_embedding(lowering *lw, fe_layer *l, ir_node **in) {
  ir_node *x = in[0];
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  if (x->type.rank != 3 || !ir_type_is_batched(&x->type)) {
    diag_error(m->d, l->inputs[0].loc, "position_embedding needs an input [N, steps, features], got %s",
               fe_type_str(lw, &x->type));
    return false;
  }
  int64_t T = x->type.dims[1], D = x->type.dims[2];
  if (!l->sequence_length || l->sequence_length < T) {
    diag_error(m->d, l->loc, "position_embedding needs sequence_length= of at least the input's %lld steps (%s)",
               (long long)T, fe_type_str(lw, &x->type));
    return false;
  }
  ir_type t = {DT_F32, 2, {l->sequence_length, D}};
  int64_t bytes;
  if (!ir_type_bytes(&t, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    diag_error(m->d, l->loc, "%s: the embeddings %s would take more than %lld bytes", l->name, fe_type_str(lw, &t),
               (long long)IR_MAX_TENSOR_BYTES);
    return false;
  }
  const char *key = arena_printf(m->arena, "%s.embeddings", l->name);
  const float *data = NULL;
  if (!fe_weights_get(&lw->w, g, key, &t, false, l->name, l->loc, &data)) return false;
  ir_node *e = fe_stamp(lw, l, ir_build_const(g, key, &t, key, data, l->loc));
  if (T < l->sequence_length) { /* KerasHub: position_embeddings[:T] */
    ir_attr sa = {.starts = {2, {0, 0}}, .ends = {2, {T, D}}, .steps = {2, {1, 1}}};
    e = fe_stamp(lw, l, ir_build_op(g, IR_OP_STRIDED_SLICE, arena_printf(m->arena, "%s.rows", l->name), &e, 1, &sa,
                                    l->loc));
  }
  ir_node *one = ir_node_new(g, IR_OP_LITERAL, &(ir_type){DT_F32, 0, {0}}, NULL, 0,
                             arena_printf(m->arena, "%s.always", l->name), l->loc);
  one->attr.value = 1;
  ir_graph_append(g, fe_stamp(lw, l, one));
  l->value = fe_stamp(lw, l, ir_build_op(g, IR_OP_SELECT, l->name, (ir_node *[]){one, e, x}, 3, &(ir_attr){0}, l->loc));
  return true;
}
