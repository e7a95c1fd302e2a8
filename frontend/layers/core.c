/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core.c: the library's general-tensor layers: Dense, Activation, ReLU, the
 * merges (Add, Multiply, Subtract, Maximum, Minimum), Concatenate,
 * Flatten, Reshape, Permute, Softmax, LayerNormalization, Embedding,
 * Dropout. Node names as the .cast frontend always named them, so dumps
 * read the same from either frontend:
 *   Dense NAME          %NAME.kernel, %NAME.bias, %NAME.matmul {acc=f32},
 *                       %NAME.bias_add, the activation; the last node is %NAME
 *   LayerNormalization  %NAME.gamma, %NAME.beta, %NAME = layer_norm
 *   a merge of 3+       a chain %NAME.partK ... %NAME
 *   Softmax (axis)      along an axis but the last: %NAME.transpose,
 *                       %NAME.softmax, %NAME (the swap undone)
 *   Embedding           %NAME.embeddings, %NAME = gather {axis=0}
 */
#include "frontend/layers/internal.h"

#include <string.h>

bool fl_lower_dense(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  ir_graph *g = m->g;
  const json_value *u = fl_cfg(l, "units"), *ub = fl_cfg(l, "use_bias");
  fl_act act;
  if (!u || u->kind != JSON_INT || u->i < 1 || u->i > ((int64_t)1 << 40)) { /* the kernel's size is checked below */
    fl_error(m, l, "units", FL_PLAIN, "units must be a positive integer");
    return false;
  }
  if (!fl_activation(m, l, &act)) return false;
  bool use_bias = !ub || (ub->kind == JSON_LIT && ub->lit == 't');
  if (x->type.rank < 2) { /* Keras's Dense contracts the last axis of any rank */
    fl_error(m, l, "input", FL_KIND, "needs an input of rank >= 2 [N, ..., features], got %s", fl_type_str(m, &x->type));
    return false;
  }
  ir_type kt = {DT_F32, 2, {x->type.dims[x->type.rank - 1], u->i}}, bt = {DT_F32, 1, {u->i}};
  int64_t bytes;
  if (!ir_type_bytes(&kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    fl_error(m, l, "units", FL_PLAIN, "units=%lld is too large: the kernel %s would take more than %lld bytes",
             (long long)u->i, fl_type_str(m, &kt), (long long)IR_MAX_TENSOR_BYTES);
    return false;
  }
  if (!fl_kernel_bias(m, l, x, &kt, &bt, use_bias, true)) return false;
  bool has_act = act != FL_LINEAR;
  const char *mm = has_act || use_bias ? fl_node_name(m, l, k, "matmul") : fl_node_name(m, l, k, NULL);
  const char *add = has_act ? fl_node_name(m, l, k, "bias_add") : fl_node_name(m, l, k, NULL);
  ir_node *y = fl_stamp(m, l, ir_build_matmul(g, mm, x, l->w[0], DT_F32, l->loc));
  m->call->out = fl_bias_act(m, l, k, y, add, use_bias, act);
  return true;
}

/* Add, Multiply, ...: two or more inputs, broadcast as numpy (and Keras)
 * do ([N, H, W, C] * [N, 1, 1, C]), folded left to right. */
bool fl_merge(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in, ir_op op) {
  if (n_in < 2) {
    fl_error(m, l, NULL, FL_PLAIN, "needs at least two inputs, its call has %d", n_in);
    return false;
  }
  ir_node *y = in[0];
  for (int i = 1; i < n_in; i++) {
    ir_type t;
    char err[512];
    if (!ir_infer_type(op, (ir_node *[]){y, in[i]}, 2, &(ir_attr){0}, &t, err, sizeof err)) {
      fl_error(m, l, NULL, FL_PLAIN, "%s", err);
      return false;
    }
    const char *nm = i == n_in - 1 ? fl_node_name(m, l, k, NULL)
                                   : fl_node_name(m, l, k, arena_printf(m->arena, "part%d", i));
    y = fl_stamp(m, l, ir_build_binary(m->g, op, nm, y, in[i], l->loc));
  }
  m->call->out = y;
  return true;
}

bool fl_lower_add(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return fl_merge(m, l, k, in, n_in, IR_OP_ADD);
}

bool fl_lower_multiply(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return fl_merge(m, l, k, in, n_in, IR_OP_MUL);
}

/* ---- the layer classes of the general-tensor and CNN ops ---- */

/* Merges without Add's and Multiply's rows: Subtract takes exactly two. */
bool fl_lower_subtract(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (n_in != 2) {
    fl_error(m, l, NULL, FL_PLAIN, "takes exactly two inputs, its call has %d", n_in);
    return false;
  }
  return fl_merge(m, l, k, in, n_in, IR_OP_SUB);
}

/* The functional API's divide (x / y, keras.ops.divide): two operands. */
bool fl_lower_true_divide(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (n_in != 2) {
    fl_error(m, l, NULL, FL_PLAIN, "takes exactly two inputs, its call has %d", n_in);
    return false;
  }
  return fl_merge(m, l, k, in, n_in, IR_OP_DIV);
}

bool fl_lower_maximum(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return fl_merge(m, l, k, in, n_in, IR_OP_MAXIMUM);
}

bool fl_lower_minimum(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return fl_merge(m, l, k, in, n_in, IR_OP_MINIMUM);
}

/* Concatenate(axis): the IR's concat takes up to IR_MAX_SRCS operands, so
 * more are joined in a chain (%NAME.partK), which is the same along one
 * axis. */
bool fl_lower_concatenate(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  int64_t axis;
  if (!fl_cfg_int(m, l, "axis", -1, -IR_MAX_RANK, IR_MAX_RANK, &axis)) return false;
  if (n_in < 1) return fl_error(m, l, NULL, FL_PLAIN, "its call has no inputs"), false;
  int rank = in[0]->type.rank;
  int a = axis == 0 || axis == -rank ? 0 : fl_keras_axis(m, l, in[0], axis, "axis"); /* N: the IR's rule says why */
  if (a < 0) return false;
  ir_attr attr = {.axis = a};
  ir_node *acc = in[0];
  int next = 1, part = 0;
  ir_node *ops[IR_MAX_SRCS];
  do {
    int n = 0;
    ops[n++] = acc;
    while (n < IR_MAX_SRCS && next < n_in) ops[n++] = in[next++];
    const char *suffix = next < n_in ? arena_printf(m->arena, "part%d", ++part) : NULL;
    if (!fl_layout_op(m, l, k, IR_OP_CONCAT, suffix, ops, n, &attr, &acc)) return false;
  } while (next < n_in);
  m->call->out = acc;
  return true;
}

/* Flatten: [N, d1, ...] -> [N, d1 * ...]; channels_first moves the
 * channels last first, as Keras does. */
bool fl_lower_flatten(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int64_t have = 1;
  if (!ir_type_is_batched(&x->type) || !ir_type_inner_numel(&x->type, &have)) {
    fl_error(m, l, NULL, FL_KIND, "needs an input with the batch dimension N, got %s", fl_type_str(m, &x->type));
    return false;
  }
  const json_value *df = fl_cfg(l, "data_format");
  if (df && !(df->kind == JSON_LIT && df->lit == 'n') &&
      (df->kind != JSON_STR || (strcmp(df->s, "channels_last") && strcmp(df->s, "channels_first")))) {
    fl_error(m, l, "data_format", FL_PLAIN, "data_format must be \"channels_last\", \"channels_first\" or null");
    return false;
  }
  int rank = x->type.rank;
  if (df && df->kind == JSON_STR && !strcmp(df->s, "channels_first") && rank > 2) {
    ir_attr perm = {.perm = {rank, {0}}};
    for (int r = 1; r < rank; r++) perm.perm.v[r] = r + 1 < rank ? r + 1 : 1;
    if (!fl_layout_op(m, l, k, IR_OP_TRANSPOSE, "transpose", &x, 1, &perm, &x)) return false;
  }
  ir_attr attr = {.shape = {2, {IR_DIM_BATCH, have}}};
  return fl_layout_op(m, l, k, IR_OP_RESHAPE, NULL, &x, 1, &attr, &m->call->out);
}

/* Reshape(target_shape): the example's elements (all but N) in row-major
 * order; one dimension may be -1, inferred from the rest. */
bool fl_lower_reshape(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  const json_value *ts = fl_cfg(l, "target_shape");
  if (!ts || ts->kind != JSON_ARR || ts->n < 1 || ts->n > IR_MAX_RANK - 1) {
    fl_error(m, l, "target_shape", FL_KIND, "target_shape must be a list of 1 to %d dimensions", IR_MAX_RANK - 1);
    return false;
  }
  int64_t have = 1, known = 1;
  if (!ir_type_is_batched(&x->type) || !ir_type_inner_numel(&x->type, &have)) {
    fl_error(m, l, NULL, FL_KIND, "needs an input with the batch dimension N, got %s", fl_type_str(m, &x->type));
    return false;
  }
  ir_attr attr = {.shape = {ts->n + 1, {IR_DIM_BATCH}}};
  int unknown = -1;
  str_buf b;
  str_buf_init(&b);
  bool ok = true;
  int64_t bad = 0; /* the first dimension that is neither positive nor the one -1 */
  for (int i = 0; i < ts->n; i++) {
    const json_value *d = &ts->items[i];
    int64_t v = d->kind == JSON_INT ? d->i : 0;
    if (d->kind == JSON_INT) str_buf_printf(&b, "%s%lld", i ? ", " : "[", (long long)v);
    if (v == -1 && unknown < 0) unknown = i;
    else if (v < 1) bad = ok ? v : bad, ok = false;
    else if (known > 0 && !size_mul_ok(known, v, &known)) known = -1;
    attr.shape.dims[i + 1] = v;
  }
  str_buf_putc(&b, ']');
  if (!ok) {
    fl_error(m, l, "target_shape", FL_KIND, "target_shape dimensions must be positive, with at most one -1, got %lld",
             (long long)bad);
  } else if (unknown >= 0 && known > 0 && have % known == 0) {
    attr.shape.dims[unknown + 1] = have / known;
  } else if (known != have || unknown >= 0) {
    ok = false;
    if (known < 0)
      fl_error(m, l, "target_shape", FL_KIND, "target_shape %s is too large for the input %s", str_buf_cstr(&b), fl_type_str(m, &x->type));
    else if (unknown >= 0)
      fl_error(m, l, "target_shape", FL_KIND, "target_shape %s does not fit the input %s: its other dimensions (%lld elements) do not "
                     "divide the %lld elements of an example", str_buf_cstr(&b), fl_type_str(m, &x->type),
                     (long long)known, (long long)have);
    else
      fl_error(m, l, "target_shape", FL_KIND, "target_shape %s (%lld elements) does not fit the input %s (%lld elements per example)",
                     str_buf_cstr(&b), (long long)known, fl_type_str(m, &x->type), (long long)have);
  }
  str_buf_fini(&b);
  return ok && fl_layout_op(m, l, k, IR_OP_RESHAPE, NULL, &x, 1, &attr, &m->call->out);
}

/* Permute(dims): a permutation of 1..rank-1 (1-based, N excluded). */
bool fl_lower_permute(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  const ir_type *xt = &in[0]->type;
  const json_value *dims = fl_cfg(l, "dims");
  bool ok = ir_type_is_batched(xt) && dims && dims->kind == JSON_ARR && dims->n == xt->rank - 1;
  bool seen[IR_MAX_RANK] = {0};
  ir_attr attr = {.perm = {xt->rank, {0}}};
  for (int i = 0; ok && i < dims->n; i++) {
    const json_value *d = &dims->items[i];
    ok = d->kind == JSON_INT && d->i >= 1 && d->i < xt->rank && !seen[d->i];
    if (ok) seen[d->i] = true, attr.perm.v[i + 1] = d->i;
  }
  if (!ok) {
    fl_error(m, l, "dims", FL_KIND, "dims must be a permutation of 1..%d (1-based, the batch N excluded) for the input %s",
                   xt->rank - 1, fl_type_str(m, xt));
    return false;
  }
  return fl_layout_op(m, l, k, IR_OP_TRANSPOSE, NULL, in, 1, &attr, &m->call->out);
}

/* Softmax(axis): an int or a list of one; along an axis but the last, that
 * axis swapped with the last around the softmax. */
bool fl_lower_softmax(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  const json_value *v = fl_cfg(l, "axis");
  if (v && v->kind == JSON_ARR && v->n == 1) v = &v->items[0];
  if (v && v->kind != JSON_INT) {
    fl_unsupported(m, l, NULL, FL_PLAIN, "axis must be one integer (a softmax over "
                    "several axes is not supported)");
    return false;
  }
  int rank = x->type.rank, a = fl_keras_axis(m, l, x, v ? v->i : -1, "axis");
  if (a < 0) return false;
  if (a == rank - 1) {
    m->call->out = fl_stamp(m, l, ir_build_unary(m->g, IR_OP_SOFTMAX, fl_node_name(m, l, k, NULL), x, l->loc));
    return true;
  }
  ir_attr swap = {.perm = {rank, {0}}};
  for (int r = 0; r < rank; r++) swap.perm.v[r] = r == a ? rank - 1 : r == rank - 1 ? a : r;
  ir_node *t, *sm;
  if (!fl_layout_op(m, l, k, IR_OP_TRANSPOSE, "transpose", &x, 1, &swap, &t)) return false;
  sm = fl_stamp(m, l, ir_build_unary(m->g, IR_OP_SOFTMAX, fl_node_name(m, l, k, "softmax"), t, l->loc));
  return fl_layout_op(m, l, k, IR_OP_TRANSPOSE, NULL, &sm, 1, &swap, &m->call->out);
}

/* LayerNormalization(axis): an int or a list; Keras sorts the list, and
 * castor's layer_norm normalizes the trailing dimensions from one on, so
 * the axes must be the last ones, consecutive. gamma and beta have their
 * shape. */
bool fl_lower_layer_norm(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  const json_value *ax = fl_cfg(l, "axis");
  double eps;
  if (!fl_cfg_number(m, l, "epsilon", 1e-3, 0, 1, &eps)) return false;
  if (!(eps > 0)) return fl_error(m, l, "epsilon", FL_PLAIN, "epsilon must be a number in (0, 1]"), false;
  int rank = x->type.rank, first = rank - 1, n_axes = !ax ? 0 : ax->kind == JSON_ARR ? ax->n : 1;
  bool seen[IR_MAX_RANK] = {0}, ok = rank >= 2 && (!ax || ax->kind == JSON_INT || (ax->kind == JSON_ARR && ax->n > 0));
  for (int i = 0; ok && i < n_axes; i++) {
    const json_value *e = ax->kind == JSON_ARR ? &ax->items[i] : ax;
    int64_t a = e->kind == JSON_INT ? (e->i < 0 ? e->i + rank : e->i) : -1;
    ok = a >= 1 && a < rank && !seen[a];
    if (ok) seen[a] = true, first = (int)a < first ? (int)a : first;
  }
  for (int r = first; ok && n_axes && r < rank; r++) ok = seen[r];
  if (!ok) {
    fl_unsupported(m, l, "axis", FL_KIND, "axis must name the last dimensions of "
                    "%s (not N), e.g. -1 or [%d, %d]: castor normalizes trailing dimensions",
                    fl_type_str(m, &x->type), rank > 2 ? rank - 2 : 1, rank - 1);
    return false;
  }
  ir_type pt = {DT_F32, rank - first, {0}};
  for (int r = first; r < rank; r++) pt.dims[r - first] = x->type.dims[r];
  if (!l->weights_done) {
    const char *gk = arena_printf(m->arena, "%s.gamma", l->ir_name);
    const char *bk = arena_printf(m->arena, "%s.beta", l->ir_name);
    const float *gd = fl_weight(m, l, 0, gk, "gamma", &pt, FL_INIT_ONES), *bd = gd ? fl_weight(m, l, 1, bk, "beta", &pt, FL_INIT_ZEROS) : NULL;
    if (!gd || !bd) return false;
    l->w[0] = fl_stamp(m, l, ir_build_const(m->g, gk, &pt, gk, gd, l->loc));
    l->w[1] = fl_stamp(m, l, ir_build_const(m->g, bk, &pt, bk, bd, l->loc));
    l->weights_done = true;
  } else if (!ir_type_eq(&l->w[0]->type, &pt)) {
    fl_error(m, l, NULL, FL_PLAIN, "a shared call with input %s, the first call's gamma is %s",
                   fl_type_str(m, &x->type), fl_type_str(m, &l->w[0]->type));
    return false;
  }
  ir_attr attr = {.axis = first == rank - 1 ? -1 : first, .epsilon = eps};
  m->call->out = fl_stamp(m, l, ir_build_op(m->g, IR_OP_LAYER_NORM, fl_node_name(m, l, k, NULL),
                                               (ir_node *[]){x, l->w[0], l->w[1]}, 3, &attr, l->loc));
  return true;
}

/* Embedding(input_dim, output_dim): %NAME.embeddings [input_dim,
 * output_dim] (vars/0), gathered along axis 0 by int32 indices. An index
 * outside [0, input_dim) gives a row of zeros (Keras on JAX: NaNs past the
 * end, a negative one from the end; on TensorFlow's CPU an error). */
bool fl_lower_embedding(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int64_t idim, odim;
  if (!fl_cfg_int(m, l, "input_dim", INT64_MIN, 1, (int64_t)1 << 31, &idim) ||
      !fl_cfg_int(m, l, "output_dim", INT64_MIN, 1, (int64_t)1 << 31, &odim))
    return false;
  if (x->type.dtype != DT_I32) {
    fl_unsupported(m, l, "input", FL_ITS, "its input %s is not int32 indices "
                    "(castor does not cast floats to indices: declare the model's Input with dtype=\"int32\")",
                    fl_type_str(m, &x->type));
    return false;
  }
  ir_type et = {DT_F32, 2, {idim, odim}};
  int64_t bytes;
  if (!ir_type_bytes(&et, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    fl_error(m, l, NULL, FL_PLAIN, "its embeddings %s are larger than castor's tensor limit", fl_type_str(m, &et));
    return false;
  }
  if (!l->weights_done) {
    const char *key = arena_printf(m->arena, "%s.embeddings", l->ir_name);
    const float *d = fl_weight(m, l, 0, key, "embeddings", &et, FL_INIT_UNIFORM);
    if (!d) return false;
    l->w[0] = fl_stamp(m, l, ir_build_const(m->g, key, &et, key, d, l->loc));
    l->weights_done = true;
  }
  ir_attr attr = {.axis = 0};
  return fl_layout_op(m, l, k, IR_OP_GATHER, NULL, (ir_node *[]){l->w[0], x}, 2, &attr, &m->call->out) &&
         fl_embedding_mask(m, l, k, x);
}

/* Keras's padding along one dimension: 'valid' none; 'same' the total
 * that keeps ceil(in / stride) outputs, the odd one at the end (TF, and
 * JAX's "SAME"). */
/* A noise_shape: null (per element), or one entry per dimension of x, null
 * or x's size (the mask varies along it) or 1 (one draw for the whole
 * dimension). SpatialDropout2D's is [N, 1, 1, C]. */
static bool noise_shape(fl_host *m, fl_layer *l, const ir_node *x, bool spatial, bool *any, int64_t *dims) {
  const json_value *v = fl_cfg(l, "noise_shape");
  int rank = x->type.rank;
  *any = spatial;
  for (int r = 0; r < rank; r++) dims[r] = spatial && r > 0 && r < rank - 1 ? 1 : x->type.dims[r];
  if (spatial || fl_is_null(v)) return true;
  bool ok = v->kind == JSON_ARR && v->n == rank;
  for (int r = 0; ok && r < rank; r++) {
    const json_value *e = &v->items[r];
    if (fl_is_null(e)) continue;
    ok = e->kind == JSON_INT && (e->i == 1 || (r > 0 && e->i == x->type.dims[r]));
    if (ok && e->i == 1 && x->type.dims[r] != 1) dims[r] = 1, *any = true;
  }
  if (!ok)
    fl_error(m, l, "noise_shape", FL_PLAIN, "noise_shape must list, per dimension of %s, null, its size or 1",
             fl_type_str(m, &x->type));
  return ok;
}

/* Dropout(rate, seed, noise_shape), SpatialDropout2D(rate, seed): the IR's
 * dropout (the identity at inference; in training a counter-based mask of
 * (seed, dropout.step, element), see docs/training.md), the identity for
 * rate 0. Keras's seed (null: the layer's index) is the op's seed; a
 * shared layer's call k adds k << 32 so that each call draws its own mask,
 * as Keras's seed generator does. With a noise_shape the mask is drawn at
 * that shape and broadcast, Keras's formula: %NAME.noise (x's first
 * element along each dimension of size 1 in the noise shape),
 * %NAME.ones = select(1, 1, noise), %NAME.mask = dropout(ones),
 * %NAME = x * mask (exactly x at inference). */
static bool dropout(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in, bool spatial) {
  if (!fl_one_input(m, l, n_in)) return false;
  const json_value *r = fl_cfg(l, "rate");
  if (!r || (r->kind != JSON_INT && r->kind != JSON_FLOAT) || !(r->num >= 0) || !(r->num < 1)) {
    fl_error(m, l, "rate", FL_PLAIN, "rate must be a number in [0, 1)");
    return false;
  }
  int64_t seed;
  if (!fl_cfg_int(m, l, "seed", l->index, 0, INT32_MAX, &seed)) return false;
  ir_node *x = in[0];
  bool any;
  int64_t dims[IR_MAX_RANK];
  if (spatial && (x->type.rank != 4 || !ir_type_is_batched(&x->type)))
    return fl_error(m, l, "input", FL_KIND, "needs an input [N, height, width, channels]"), false;
  if (!noise_shape(m, l, x, spatial, &any, dims)) return false;
  if (r->num == 0) return m->call->out = x, true;
  ir_attr a = {.rate = r->num, .seed = seed + ((int64_t)k << 32)};
  if (!any) return fl_layout_op(m, l, k, IR_OP_DROPOUT, NULL, in, 1, &a, &m->call->out);
  int rank = x->type.rank;
  ir_attr sa = {.starts = {rank, {0}}, .ends = {rank, {0}}, .steps = {rank, {0}}};
  for (int d = 0; d < rank; d++) sa.ends.v[d] = d ? dims[d] : 0, sa.steps.v[d] = 1;
  ir_node *noise, *mask;
  if (!fl_layout_op(m, l, k, IR_OP_STRIDED_SLICE, "noise", &x, 1, &sa, &noise)) return false;
  ir_node *one = fl_literal(m, l, fl_node_name(m, l, k, "one"), 1.0);
  ir_node *ones = fl_stamp(m, l, ir_build_op(m->g, IR_OP_SELECT, fl_node_name(m, l, k, "ones"),
                                             (ir_node *[]){one, one, noise}, 3, &(ir_attr){0}, l->loc));
  if (!fl_layout_op(m, l, k, IR_OP_DROPOUT, "mask", &ones, 1, &a, &mask)) return false;
  m->call->out = fl_stamp(m, l, ir_build_binary(m->g, IR_OP_MUL, fl_node_name(m, l, k, NULL), x, mask, l->loc));
  return true;
}

bool fl_lower_dropout(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return dropout(m, l, k, in, n_in, false);
}

bool fl_lower_spatial_dropout2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return dropout(m, l, k, in, n_in, true);
}

/* CNN: BatchNormalization(axis=-1, momentum, epsilon, center, scale):
 * batch_norm over the last (channel) axis, as the .cast frontend builds it:
 * %NAME.gamma, %NAME.beta, %NAME.moving_mean, %NAME.moving_variance, all
 * [C], stored in vars/ in that order with gamma or beta left out when
 * scale or center is false (an [] literal 1 or 0 takes its place).
 * Inference uses the moving statistics; a training step the batch's and
 * updates them with momentum (passes/grad_bn.c). */
