/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mask.c: Keras's masks in the layer library. A mask is an i1 [N, T] value
 * (true: step t of row n is data), made by
 *
 *   Masking(mask_value)  y = where(any(x != mask_value, -1), x, 0), its
 *                        mask that any (Keras's call and compute_mask)
 *   Embedding(mask_zero) the mask ids != 0 (core.c lowers the lookup)
 *   NotEqual, Any        the functional API's op nodes that Keras writes
 *                        into a Functional config for a mask: compute_mask
 *                        traced (not_equal(x, v), any(..., axis=-1))
 *
 * and taken by the recurrent layers (rnn.c): a Functional config passes it
 * as the call's `mask` argument (fl_call.mask_at); a Sequential model
 * carries it from layer to layer as Keras does at run time (the host asks
 * fl_row_mask for each layer's rule and reads fl_call.out_mask).
 *
 * What a layer does with a mask is Keras 3's: the recurrent layers take it
 * (and pass it on with return_sequences); layers that set supports_masking
 * and ignore it pass it on unchanged; layers whose results depend on it
 * (Softmax, BatchNormalization, GlobalAveragePooling1D, the attention and
 * merge layers) are refused by name rather than computed without it; any
 * other layer drops it, which is what Keras does (with a warning).
 */
#include "frontend/layers/internal.h"

#include <float.h>
#include <string.h>

/* Keras 3's classes that set supports_masking and leave the mask as it is
 * (compute_mask not overridden, no mask argument in call) */
static const char *const passes_mask[] = {
    "Dense",     "Activation",         "ReLU",      "Dropout",       "SpatialDropout2D",
    "Rescaling", "Normalization",      "LayerNormalization", "GroupNormalization",
};

/* ...and those whose results depend on it, refused with one (castor computes them without) */
static const char *const uses_mask[] = {
    "Softmax", "BatchNormalization", "GlobalAveragePooling1D", "MultiHeadAttention", "Add", "Subtract",
    "Multiply", "Maximum", "Minimum", "Concatenate",
};

fl_mask_rule fl_row_mask(int row) {
  const char *cls = fl_row_class(row);
  if (!strcmp(cls, "Masking") || !strcmp(cls, "Embedding")) return FL_MASK_MAKES;
  if (fl_row_takes_initial_state(row)) return FL_MASK_TAKES;
  for (size_t i = 0; i < sizeof passes_mask / sizeof *passes_mask; i++)
    if (!strcmp(cls, passes_mask[i])) return FL_MASK_PASSES;
  for (size_t i = 0; i < sizeof uses_mask / sizeof *uses_mask; i++)
    if (!strcmp(cls, uses_mask[i])) return FL_MASK_REFUSES;
  return FL_MASK_DROPS;
}

static ir_node *op_at(fl_host *m, fl_layer *l, int k, ir_op op, const char *suffix, ir_node **in, int n,
                      const ir_attr *a) {
  ir_node *out = NULL;
  return fl_layout_op(m, l, k, op, suffix, in, n, a, &out) ? out : NULL;
}

/* a [] literal of dtype dt (an integer for an integer tensor's comparison) */
static ir_node *literal_of(fl_host *m, fl_layer *l, int k, ir_dtype dt, double v, const char *suffix) {
  ir_node *lit = ir_node_new(m->g, IR_OP_LITERAL, &(ir_type){dt, 0, {0}}, NULL, 0, fl_node_name(m, l, k, suffix),
                             l->loc);
  lit->attr.value = v;
  ir_graph_append(m->g, lit);
  return fl_stamp(m, l, lit);
}

/* the node suffix of a step of `suffix` (NULL: the call's own name) */
static const char *part(fl_host *m, const char *suffix, const char *step) {
  return suffix ? arena_printf(m->arena, "%s.%s", suffix, step) : step;
}

/* x != v as i1, v a number of x's dtype */
static ir_node *not_equal(fl_host *m, fl_layer *l, int k, ir_node *x, ir_node *v, const char *suffix) {
  ir_node *eq = op_at(m, l, k, IR_OP_EQUAL, part(m, suffix, "eq"), (ir_node *[]){x, v}, 2,
                      &(ir_attr){0});
  return eq ? op_at(m, l, k, IR_OP_LOGICAL_NOT, suffix, &eq, 1, &(ir_attr){0}) : NULL;
}

/* any(b) over axis `axis` of an i1 b (keepdims): a max of 0/1 in f32, then != 0 */
static ir_node *any_of(fl_host *m, fl_layer *l, int k, ir_node *b, int axis, bool keepdims, const char *suffix) {
  ir_node *f = op_at(m, l, k, IR_OP_CAST, part(m, suffix, "f32"), &b, 1, &(ir_attr){.to = DT_F32});
  if (!f) return NULL;
  ir_attr a = {.axes = {.n = 1, .v = {axis}}, .keepdims = keepdims};
  ir_node *mx = op_at(m, l, k, IR_OP_REDUCE_MAX, part(m, suffix, "max"), &f, 1, &a);
  return mx ? op_at(m, l, k, IR_OP_CAST, suffix, &mx, 1, &(ir_attr){.to = DT_I1}) : NULL;
}

bool fl_lower_masking(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  double v;
  if (!fl_one_input(m, l, n_in) || !fl_cfg_number(m, l, "mask_value", 0.0, -FLT_MAX, FLT_MAX, &v)) return false;
  ir_node *x = in[0];
  if (x->type.rank < 3 || !ir_type_is_batched(&x->type)) {
    fl_error(m, l, "input", FL_KIND,
             "needs a sequence input [N, steps, ..., features] (its mask is any over the features, one per "
             "step), got %s", fl_type_str(m, &x->type));
    return false;
  }
  ir_node *ne = not_equal(m, l, k, x, fl_literal(m, l, fl_node_name(m, l, k, "mask_value"), v), "ne");
  ir_node *keep = ne ? any_of(m, l, k, ne, x->type.rank - 1, true, "keep") : NULL;
  if (!keep) return false;
  ir_attr sq = {.shape = {.rank = x->type.rank - 1}};
  for (int r = 0; r < x->type.rank - 1; r++) sq.shape.dims[r] = x->type.dims[r];
  ir_node *mask = op_at(m, l, k, IR_OP_RESHAPE, "mask", &keep, 1, &sq);
  ir_node *zero = fl_literal(m, l, fl_node_name(m, l, k, "zero"), 0.0);
  ir_node *y = mask ? op_at(m, l, k, IR_OP_SELECT, NULL, (ir_node *[]){keep, x, zero}, 3, &(ir_attr){0}) : NULL;
  if (!y) return false;
  m->call->out = y;
  m->call->out_mask = mask;
  return true;
}

/* The op node not_equal(a, b): b a tensor of a's dtype, or a number (a literal, made a's dtype). */
bool fl_lower_not_equal(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (n_in != 2) {
    fl_error(m, l, NULL, FL_PLAIN, "takes exactly two inputs, its call has %d", n_in);
    return false;
  }
  ir_node *a = in[0], *b = in[1];
  if (a->op == IR_OP_LITERAL) a = in[1], b = in[0];
  if (b->op == IR_OP_LITERAL && b->type.dtype != a->type.dtype) {
    if (!dtype_is_float(a->type.dtype) && b->attr.value != (double)(int64_t)b->attr.value) {
      fl_error(m, l, NULL, FL_PLAIN, "compares %s with %g, which is not an integer", fl_type_str(m, &a->type),
               b->attr.value);
      return false;
    }
    b = literal_of(m, l, k, a->type.dtype, b->attr.value, "operand");
  }
  return (m->call->out = not_equal(m, l, k, a, b, NULL)) != NULL;
}

/* The op node any(x, axis, keepdims): over one axis other than N (Keras's compute_mask's is the
 * last), of an i1 x or of a float one (nonzero). */
bool fl_lower_any(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  bool keepdims;
  int64_t axis;
  if (!fl_one_input(m, l, n_in) || !fl_cfg_bool(m, l, "keepdims", false, &keepdims)) return false;
  ir_node *x = in[0];
  if (fl_is_null(fl_cfg(l, "axis"))) {
    fl_unsupported(m, l, "axis", FL_PLAIN, "any over every axis is not supported (one axis, not N)");
    return false;
  }
  if (!fl_cfg_int(m, l, "axis", -1, -IR_MAX_RANK, IR_MAX_RANK, &axis)) return false;
  int a = fl_keras_axis(m, l, x, axis, "axis");
  if (a < 0) return false;
  if (x->type.dtype != DT_I1) {
    x = op_at(m, l, k, IR_OP_CAST, "nonzero", &x, 1, &(ir_attr){.to = DT_I1});
    if (!x) return false;
  }
  return (m->call->out = any_of(m, l, k, x, a, keepdims, NULL)) != NULL;
}

/* The op node cast(x, dtype): config key dtype the target (float32, float16, bfloat16, int32, bool). */
bool fl_lower_cast_op(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  static const struct {
    const char *name;
    ir_dtype dt;
  } to[] = {{"float32", DT_F32}, {"float16", DT_F16}, {"bfloat16", DT_BF16}, {"int32", DT_I32}, {"bool", DT_I1}};
  if (!fl_one_input(m, l, n_in)) return false;
  const json_value *v = fl_cfg(l, "dtype");
  for (size_t i = 0; v && v->kind == JSON_STR && i < sizeof to / sizeof *to; i++)
    if (!strcmp(v->s, to[i].name))
      return (m->call->out = op_at(m, l, k, IR_OP_CAST, NULL, in, 1, &(ir_attr){.to = to[i].dt})) != NULL;
  fl_unsupported(m, l, "dtype", FL_PLAIN, "cast to %s is not supported (float32, float16, bfloat16, int32, bool)",
                 v && v->kind == JSON_STR ? v->s : "a dtype that is not a name");
  return false;
}

/* Embedding(mask_zero=true)'s mask, ids != 0, for a Sequential model (a Functional one writes the
 * not_equal op node itself). */
bool fl_embedding_mask(fl_host *m, fl_layer *l, int k, ir_node *ids) {
  bool zero;
  if (!fl_cfg_bool(m, l, "mask_zero", false, &zero)) return false;
  if (!zero) return true;
  if (ids->type.rank != 2) {
    fl_error(m, l, "input", FL_KIND, "with mask_zero needs ids [N, steps] (one mask per step), got %s",
             fl_type_str(m, &ids->type));
    return false;
  }
  m->call->out_mask = not_equal(m, l, k, ids, literal_of(m, l, k, ids->type.dtype, 0, "zero"), "mask");
  return m->call->out_mask != NULL;
}

bool fl_call_mask(fl_host *m, fl_layer *l, ir_node **in, int *n_in, ir_node **out) {
  fl_call *c = m->call;
  *out = NULL;
  if (!c->mask_at) return true;
  ir_node *mask = in[c->mask_at - 1], *x = in[0];
  for (int i = c->mask_at; i < *n_in; i++) in[i - 1] = in[i];
  (*n_in)--;
  const ir_type *t = &mask->type;
  if (x->type.rank == 3 && (t->dtype != DT_I1 || t->rank != 2 || !ir_type_is_batched(t) ||
                            t->dims[1] != x->type.dims[1])) {
    fl_error(m, l, "mask", FL_ITS, "its mask must be bool [N, %lld] (batch, steps) for the input %s, got %s",
             (long long)x->type.dims[1], fl_type_str(m, &x->type), fl_type_str(m, t));
    return false;
  }
  *out = mask;
  return true;
}
