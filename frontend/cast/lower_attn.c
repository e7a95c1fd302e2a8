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
 * MultiHeadAttention, as keras/src/layers/attention/multi_head_attention.py
 * computes it for query [N, T, d], value [N, S, dv_in], key [N, S, dk_in]
 * (key defaults to value), with H heads:
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
 * heads to dimension 1. Weights are NAME.query.kernel, NAME.query.bias, ...,
 * NAME.attention_output.bias: Keras's variable paths with '.' for '/'.
 * Dropout (Keras's dropout=0 default) and attention_mask are not taken.
 *
 *   position_embedding NAME         KerasHub PositionEmbedding(sequence_length):
 *                                   %NAME.embeddings [sequence_length, D]
 *                                   (Glorot-uniform), its first T rows
 *                                   broadcast to x [N, T, D] (x's values
 *                                   unused): %NAME = select(1, rows, x), an
 *                                   exact broadcast whose gradient sums over N
 */
#include "frontend/cast/internal.h"

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

/* Keras's EinsumDense "abc,cde->abde" and bias "de", then the heads moved
 * to dimension 1: x [N, T, C] -> [N, H, T, D]. */
static ir_node *project(lowering *lw, fe_layer *l, const char *sub, ir_node *x, int64_t H, int64_t D) {
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  int64_t T = x->type.dims[1], C = x->type.dims[2];
  ir_node *k = weight(lw, l, sub, "kernel", 3, (int64_t[]){C, H, D}, false);
  ir_node *b = l->use_bias ? weight(lw, l, sub, "bias", 2, (int64_t[]){H, D}, true) : NULL;
  if (!k || (l->use_bias && !b)) return NULL;
  ir_node *k2 = reshape(lw, l, arena_printf(m->arena, "%s.%s.kernel_2d", l->name, sub), k, 2, (int64_t[]){C, H * D});
  ir_node *y = fe_stamp(lw, l, ir_build_matmul(g, arena_printf(m->arena, "%s.%s", l->name, sub), x, k2, DT_F32, l->loc));
  if (b) {
    ir_node *b1 = reshape(lw, l, arena_printf(m->arena, "%s.%s.bias_1d", l->name, sub), b, 1, (int64_t[]){H * D});
    y = fe_stamp(lw, l, ir_build_binary(g, IR_OP_ADD, arena_printf(m->arena, "%s.%s.bias_add", l->name, sub), y, b1,
                                        l->loc));
  }
  ir_node *y4 = reshape(lw, l, arena_printf(m->arena, "%s.%s.heads", l->name, sub), y, 4,
                        (int64_t[]){IR_DIM_BATCH, T, H, D});
  ir_attr ta = {.perm = {4, {0, 2, 1, 3}}};
  return fe_stamp(lw, l, ir_build_op(g, IR_OP_TRANSPOSE, arena_printf(m->arena, "%s.%s.transpose", l->name, sub), &y4,
                                     1, &ta, l->loc));
}

static ir_node *batch_matmul(lowering *lw, fe_layer *l, const char *name, ir_node *a, ir_node *b, int tb) {
  ir_attr at = {.acc = DT_F32, .transpose_b = tb};
  return fe_stamp(lw, l, ir_build_op(lw->g, IR_OP_BATCH_MATMUL, name, (ir_node *[]){a, b}, 2, &at, l->loc));
}

bool fe_lower_multi_head_attention(lowering *lw, fe_layer *l, ir_node **in) {
  fe_model *m = lw->m;
  ir_graph *g = lw->g;
  if (l->n_inputs > 3) {
    diag_error(m->d, l->inputs[3].loc, "multi_head_attention takes query, value and optionally key, got %d inputs",
               l->n_inputs);
    return false;
  }
  if (!l->num_heads || !l->key_dim) {
    diag_error(m->d, l->loc, "multi_head_attention needs num_heads= and key_dim=, as Keras's MultiHeadAttention");
    return false;
  }
  ir_node *q_in = in[0], *v_in = in[1], *k_in = l->n_inputs == 3 ? in[2] : in[1];
  static const char *const roles[] = {"query", "value", "key"};
  for (int i = 0; i < l->n_inputs; i++)
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
  int64_t T = q_in->type.dims[1], d = q_in->type.dims[2];
  ir_node *q = project(lw, l, "query", q_in, H, dk);
  ir_node *k = q ? project(lw, l, "key", k_in, H, dk) : NULL;
  ir_node *v = k ? project(lw, l, "value", v_in, H, dv) : NULL;
  ir_node *ok = v ? weight(lw, l, "attention_output", "kernel", 3, (int64_t[]){H, dv, d}, false) : NULL;
  ir_node *ob = ok && l->use_bias ? weight(lw, l, "attention_output", "bias", 1, (int64_t[]){d}, true) : NULL;
  if (!ok || (l->use_bias && !ob)) return false;
  /* q * (1 / sqrt(key_dim)), the scalar in q's dtype (autocast rounds it with q) */
  ir_node *scale = ir_node_new(g, IR_OP_LITERAL, &(ir_type){DT_F32, 0, {0}}, NULL, 0,
                               arena_printf(m->arena, "%s.scale", l->name), l->loc);
  scale->attr.value = 1.0 / sqrt((double)dk);
  ir_graph_append(g, fe_stamp(lw, l, scale));
  q = fe_stamp(lw, l, ir_build_binary(g, IR_OP_MUL, arena_printf(m->arena, "%s.query.scaled", l->name), q, scale, l->loc));
  ir_node *s = batch_matmul(lw, l, arena_printf(m->arena, "%s.scores", l->name), q, k, 1);
  ir_node *p = fe_stamp(lw, l, ir_build_unary(g, IR_OP_SOFTMAX, arena_printf(m->arena, "%s.softmax", l->name), s, l->loc));
  ir_node *o = batch_matmul(lw, l, arena_printf(m->arena, "%s.combine", l->name), p, v, 0);
  ir_attr ta = {.perm = {4, {0, 2, 1, 3}}};
  o = fe_stamp(lw, l, ir_build_op(g, IR_OP_TRANSPOSE, arena_printf(m->arena, "%s.combine.transpose", l->name), &o, 1, &ta,
                                  l->loc));
  o = reshape(lw, l, arena_printf(m->arena, "%s.combine.flat", l->name), o, 3, (int64_t[]){IR_DIM_BATCH, T, H * dv});
  ir_node *ok2 = reshape(lw, l, arena_printf(m->arena, "%s.attention_output.kernel_2d", l->name), ok, 2,
                         (int64_t[]){H * dv, d});
  ir_node *y = fe_stamp(lw, l, ir_build_matmul(g, ob ? arena_printf(m->arena, "%s.attention_output", l->name) : l->name,
                                               o, ok2, DT_F32, l->loc));
  if (ob) y = fe_stamp(lw, l, ir_build_binary(g, IR_OP_ADD, l->name, y, ob, l->loc));
  l->value = y;
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
