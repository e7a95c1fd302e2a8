/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layers.c: the Keras layer classes castor lowers, one row per class in
 * `rows` (its config keys and its lowering function), so a class whose IR
 * ops land is a row and a function here. A class without a row is an
 * error naming the class, the layer and the supported list.
 *
 * Each row lists the config keys the class may have and what castor
 * accepts for each: KEY_ANY (read by the lowering, or no effect on what
 * the model computes or trains: initializers, since the weights come from
 * the file), KEY_NULL (must be null: regularizers, constraints, LoRA,
 * quantization), KEY_TRUE / KEY_FALSE (must be that literal). Any other
 * key, or another value, is an error naming the key: castor never ignores
 * a setting that changes the numbers.
 *
 * Lowering (the .cast frontend's node names, so dumps read the same):
 *   Dense NAME          %NAME.kernel, %NAME.bias (vars/0, vars/1), %NAME.matmul
 *                       {acc=f32}, %NAME.bias_add, the activation; the last
 *                       node is %NAME
 *   LayerNormalization  %NAME.gamma, %NAME.beta (vars/0, vars/1), %NAME =
 *                       layer_norm {axis=-1, epsilon}
 *   Activation, ReLU, Softmax, Add, Multiply: %NAME
 *   Subtract, Maximum, Minimum  %NAME (a chain %NAME.partK for 3 or more)
 *   Concatenate         %NAME = concat {axis}
 *   Flatten, Reshape    %NAME = reshape {shape=[N, ...]}
 *   Permute             %NAME = transpose {perm=[0, dims...]}
 *   Softmax (axis)      %NAME; along an axis but the last, %NAME.transpose,
 *                       %NAME.softmax, %NAME (the swap undone)
 *   Embedding           %NAME.embeddings (vars/0), %NAME = gather {axis=0}
 *   Conv2D              %NAME.kernel, %NAME.bias, %NAME.conv, %NAME.bias_add,
 *                       the activation (as Dense)
 *   MaxPooling2D, AveragePooling2D  %NAME = max_pool2d / avg_pool2d
 *   Dropout             dropout(rate, seed) (the identity at inference;
 *                       rate 0: its input)
 * A shared layer's second call is named NAME.call1 (and so on), with the
 * same weights; as an output it is NAME_1.
 */
#include "frontend/keras/internal.h"
#include "frontend/attention.h"

#include <stdio.h>
#include <string.h>

typedef enum key_rule { KEY_ANY, KEY_NULL, KEY_TRUE, KEY_FALSE, KEY_LAST_AXIS, KEY_ZERO, KEY_CHANNELS_LAST, KEY_ONE } key_rule;

typedef struct key_spec {
  const char *key;
  key_rule rule;
} key_spec;

typedef bool (*kr_lower_fn)(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in);

typedef struct layer_row {
  const char *cls;
  kr_lower_fn lower;
  key_spec keys[24];
} layer_row;

/* Keys every layer has. */
static const key_spec common[] = {{"name", KEY_ANY}, {"trainable", KEY_TRUE}, {"dtype", KEY_ANY}};

static const char *node_name(kr_model *m, const kr_layer *l, int k, const char *suffix) {
  /* a later call of a shared layer: NAME.callK (no layer name has a '.') */
  const char *base = k ? arena_printf(m->arena, "%s.call%d", l->ir_name, k) : l->ir_name;
  return suffix ? arena_printf(m->arena, "%s.%s", base, suffix) : base;
}

static const char *type_str(kr_model *m, const ir_type *t) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  const char *s = arena_strdup(m->arena, str_buf_cstr(&b));
  str_buf_fini(&b);
  return s;
}

/* A Keras activation: a name, or {"class_name": "function", "config": NAME}
 * (some 3.x versions); NULL op for linear. */
static bool activation(kr_model *m, kr_layer *l, ir_op *out) {
  const json_value *v = kr_cfg(l, "activation");
  const char *s = v && v->kind == JSON_STR ? v->s : NULL;
  if (v && v->kind == JSON_OBJ) {
    const json_value *c = json_field(v, "config");
    s = c && c->kind == JSON_STR ? c->s : NULL;
  }
  if (!s) {
    kr_layer_error(m, l, "activation is not a name");
    return false;
  }
  static const struct {
    const char *keras;
    ir_op op;
  } acts[] = {{"linear", IR_OP_COUNT}, {"relu", IR_OP_RELU},       {"sigmoid", IR_OP_SIGMOID},
              {"tanh", IR_OP_TANH},    {"gelu", IR_OP_GELU},       {"silu", IR_OP_SILU},
              {"swish", IR_OP_SILU},   {"softmax", IR_OP_SOFTMAX}};
  for (size_t i = 0; i < sizeof acts / sizeof *acts; i++)
    if (!strcmp(s, acts[i].keras)) return *out = acts[i].op, true;
  diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m),
                  "layer '%s' (%s): activation '%s' is not supported (linear, relu, sigmoid, "
                  "tanh, gelu, silu, swish, softmax)", l->name, l->cls, s);
  return false;
}

static bool one_input(kr_model *m, kr_layer *l, int n_in) {
  if (n_in == 1) return true;
  kr_layer_error(m, l, "takes one input, its call has %d", n_in);
  return false;
}

/* Dense's and Conv2D's weights: the kernel (kt) and, with use_bias, the bias
 * (bt), read on a layer's first call; a shared layer's later call must fit
 * the kernel the first call read. */
static bool kernel_bias(kr_model *m, kr_layer *l, ir_node *x, const ir_type *kt, const ir_type *bt, bool use_bias) {
  if (!l->weights_done) {
    const char *kkey = arena_printf(m->arena, "%s.kernel", l->ir_name);
    const char *bkey = arena_printf(m->arena, "%s.bias", l->ir_name);
    const float *kd = kr_weight(m, l, 0, "kernel", kt), *bd = NULL;
    if (!kd || (use_bias && !(bd = kr_weight(m, l, 1, "bias", bt)))) return false;
    l->w[0] = kr_stamp(m, l, ir_build_const(m->g, kkey, kt, kkey, kd, kr_loc(m)));
    if (use_bias) l->w[1] = kr_stamp(m, l, ir_build_const(m->g, bkey, bt, bkey, bd, kr_loc(m)));
    l->weights_done = true;
  } else if (!ir_type_eq(&l->w[0]->type, kt)) {
    kr_layer_error(m, l, "a shared call with input %s, the first call's kernel is %s", type_str(m, &x->type),
                   type_str(m, &l->w[0]->type));
    return false;
  }
  return true;
}

/* Dense's and Conv2D's epilogue after the contraction y: the bias (its
 * node named add) and the activation, the last node named as the call. */
static ir_node *bias_act(kr_model *m, kr_layer *l, int k, ir_node *y, const char *add, bool use_bias, ir_op act) {
  if (use_bias) y = kr_stamp(m, l, ir_build_binary(m->g, IR_OP_ADD, add, y, l->w[1], kr_loc(m)));
  if (act != IR_OP_COUNT) y = kr_stamp(m, l, ir_build_unary(m->g, act, node_name(m, l, k, NULL), y, kr_loc(m)));
  return y;
}

static bool lower_dense(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  ir_graph *g = m->g;
  const json_value *u = kr_cfg(l, "units"), *ub = kr_cfg(l, "use_bias");
  ir_op act;
  if (!u || u->kind != JSON_INT || u->i < 1 || u->i > ((int64_t)1 << 31)) {
    kr_layer_error(m, l, "units must be a positive integer");
    return false;
  }
  if (!activation(m, l, &act)) return false;
  bool use_bias = !ub || (ub->kind == JSON_LIT && ub->lit == 't');
  if (x->type.rank < 2) { /* Keras's Dense contracts the last axis of any rank */
    kr_layer_error(m, l, "needs an input with a feature axis, got %s", type_str(m, &x->type));
    return false;
  }
  ir_type kt = {DT_F32, 2, {x->type.dims[x->type.rank - 1], u->i}}, bt = {DT_F32, 1, {u->i}};
  int64_t bytes;
  if (!ir_type_bytes(&kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    kr_layer_error(m, l, "its kernel %s is larger than castor's tensor limit", type_str(m, &kt));
    return false;
  }
  if (!kernel_bias(m, l, x, &kt, &bt, use_bias)) return false;
  bool has_act = act != IR_OP_COUNT;
  const char *mm = has_act || use_bias ? node_name(m, l, k, "matmul") : node_name(m, l, k, NULL);
  const char *add = has_act ? node_name(m, l, k, "bias_add") : node_name(m, l, k, NULL);
  ir_node *y = kr_stamp(m, l, ir_build_matmul(g, mm, x, l->w[0], DT_F32, kr_loc(m)));
  l->calls[k].out = bias_act(m, l, k, y, add, use_bias, act);
  return true;
}

static bool unary(kr_model *m, kr_layer *l, int k, ir_node *x, ir_op op) {
  if (op == IR_OP_SOFTMAX && x->type.rank < 1) {
    kr_layer_error(m, l, "softmax of a scalar");
    return false;
  }
  l->calls[k].out = op == IR_OP_COUNT ? x : kr_stamp(m, l, ir_build_unary(m->g, op, node_name(m, l, k, NULL), x, kr_loc(m)));
  return true;
}

static bool lower_activation(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  ir_op act;
  return one_input(m, l, n_in) && activation(m, l, &act) && unary(m, l, k, in[0], act);
}

static bool lower_relu(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return one_input(m, l, n_in) && unary(m, l, k, in[0], IR_OP_RELU);
}


/* Add, Multiply: two or more inputs of one shape, folded left to right. */
static bool merge(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in, ir_op op) {
  if (n_in < 2) {
    kr_layer_error(m, l, "needs at least two inputs, its call has %d", n_in);
    return false;
  }
  ir_node *y = in[0];
  for (int i = 1; i < n_in; i++) {
    if (!ir_type_eq(&y->type, &in[i]->type)) {
      kr_layer_error(m, l, "input shapes differ: %s and %s (broadcasting merges are not supported "
                     "yet)", type_str(m, &y->type), type_str(m, &in[i]->type));
      return false;
    }
    const char *nm = i == n_in - 1 ? node_name(m, l, k, NULL)
                                   : node_name(m, l, k, arena_printf(m->arena, "part%d", i));
    y = kr_stamp(m, l, ir_build_binary(m->g, op, nm, y, in[i], kr_loc(m)));
  }
  l->calls[k].out = y;
  return true;
}

static bool lower_add(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return merge(m, l, k, in, n_in, IR_OP_ADD);
}

static bool lower_multiply(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return merge(m, l, k, in, n_in, IR_OP_MUL);
}

/* ---- the layer classes of the general-tensor and CNN ops ---- */

/* Merges without Add's and Multiply's rows: Subtract takes exactly two. */
static bool lower_subtract(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (n_in != 2) {
    kr_layer_error(m, l, "takes exactly two inputs, its call has %d", n_in);
    return false;
  }
  return merge(m, l, k, in, n_in, IR_OP_SUB);
}

static bool lower_maximum(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return merge(m, l, k, in, n_in, IR_OP_MAXIMUM);
}

static bool lower_minimum(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return merge(m, l, k, in, n_in, IR_OP_MINIMUM);
}

/* An int config value; absent or null gives `dflt` (INT64_MIN: required). */
static bool cfg_int(kr_model *m, kr_layer *l, const char *key, int64_t dflt, int64_t lo, int64_t hi, int64_t *out) {
  const json_value *v = kr_cfg(l, key);
  if (kr_is_null(v) && dflt != INT64_MIN) return *out = dflt, true;
  if (!v || v->kind != JSON_INT || v->i < lo || v->i > hi) {
    kr_layer_error(m, l, "%s must be an integer from %lld to %lld", key, (long long)lo, (long long)hi);
    return false;
  }
  *out = v->i;
  return true;
}

/* kernel_size, strides, dilation_rate, pool_size: two positive integers
 * (Keras writes its tuples as lists; one integer means both). Null gives
 * `dflt` when it is not NULL. */
static bool cfg_pair(kr_model *m, kr_layer *l, const char *key, const int64_t *dflt, int64_t *out) {
  const json_value *v = kr_cfg(l, key);
  if (kr_is_null(v) && dflt) return out[0] = dflt[0], out[1] = dflt[1], true;
  bool ok = v && (v->kind == JSON_INT || (v->kind == JSON_ARR && v->n == 2));
  for (int i = 0; ok && i < 2; i++) {
    const json_value *e = v->kind == JSON_INT ? v : &v->items[i];
    ok = e->kind == JSON_INT && e->i >= 1 && e->i <= ((int64_t)1 << 20);
    if (ok) out[i] = e->i;
  }
  if (!ok) kr_layer_error(m, l, "%s must be two positive integers [h, w]", key);
  return ok;
}

/* padding: "valid" or "same". */
static bool cfg_padding(kr_model *m, kr_layer *l, bool *same) {
  const json_value *v = kr_cfg(l, "padding");
  const char *s = v && v->kind == JSON_STR ? v->s : NULL;
  if (s && (!strcmp(s, "valid") || !strcmp(s, "same"))) return *same = s[0] == 's', true;
  diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m), "layer '%s' (%s): padding %s%s%s is not supported (valid, same)",
                  l->name, l->cls, s ? "'" : "", s ? s : "that is not a name", s ? "'" : "");
  return false;
}

/* An axis of x counted as Keras counts it (N is 0, negative from the end),
 * or -1 with an error. */
static int keras_axis(kr_model *m, kr_layer *l, const ir_node *x, int64_t a, const char *what) {
  int rank = x->type.rank;
  int64_t r = a < 0 ? a + rank : a;
  if (r >= 1 && r < rank) return (int)r;
  kr_layer_error(m, l, "%s %lld is not a dimension of %s other than the batch N", what, (long long)a,
                 type_str(m, &x->type));
  return -1;
}

/* The layout op `op` of call k, its type checked with the IR's shape rule
 * (the rule's message names the problem). */
static bool layout_op(kr_model *m, kr_layer *l, int k, ir_op op, const char *suffix, ir_node **in, int n,
                      const ir_attr *attr, ir_node **out) {
  ir_type t;
  char err[512];
  if (!ir_infer_type(op, in, n, attr, &t, err, sizeof err)) {
    kr_layer_error(m, l, "%s", err);
    return false;
  }
  *out = kr_stamp(m, l, ir_build_op(m->g, op, node_name(m, l, k, suffix), in, n, attr, kr_loc(m)));
  return true;
}

/* Concatenate(axis): the IR's concat takes up to IR_MAX_SRCS operands, so
 * more are joined in a chain (%NAME.partK), which is the same along one
 * axis. */
static bool lower_concatenate(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  int64_t axis;
  if (!cfg_int(m, l, "axis", -1, -IR_MAX_RANK, IR_MAX_RANK, &axis)) return false;
  if (n_in < 1) return kr_layer_error(m, l, "its call has no inputs"), false;
  int a = keras_axis(m, l, in[0], axis, "axis");
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
    if (!layout_op(m, l, k, IR_OP_CONCAT, suffix, ops, n, &attr, &acc)) return false;
  } while (next < n_in);
  l->calls[k].out = acc;
  return true;
}

/* Flatten: [N, d1, ...] -> [N, d1 * ...]; channels_first moves the
 * channels last first, as Keras does. */
static bool lower_flatten(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int64_t have = 1;
  if (!ir_type_is_batched(&x->type) || !ir_type_inner_numel(&x->type, &have)) {
    kr_layer_error(m, l, "needs an input with the batch dimension N, got %s", type_str(m, &x->type));
    return false;
  }
  const json_value *df = kr_cfg(l, "data_format");
  if (df && !(df->kind == JSON_LIT && df->lit == 'n') &&
      (df->kind != JSON_STR || (strcmp(df->s, "channels_last") && strcmp(df->s, "channels_first")))) {
    kr_layer_error(m, l, "data_format must be \"channels_last\", \"channels_first\" or null");
    return false;
  }
  int rank = x->type.rank;
  if (df && df->kind == JSON_STR && !strcmp(df->s, "channels_first") && rank > 2) {
    ir_attr perm = {.perm = {rank, {0}}};
    for (int r = 1; r < rank; r++) perm.perm.v[r] = r + 1 < rank ? r + 1 : 1;
    if (!layout_op(m, l, k, IR_OP_TRANSPOSE, "transpose", &x, 1, &perm, &x)) return false;
  }
  ir_attr attr = {.shape = {2, {IR_DIM_BATCH, have}}};
  return layout_op(m, l, k, IR_OP_RESHAPE, NULL, &x, 1, &attr, &l->calls[k].out);
}

/* Reshape(target_shape): the example's elements (all but N) in row-major
 * order; one dimension may be -1, inferred from the rest. */
static bool lower_reshape(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  const json_value *ts = kr_cfg(l, "target_shape");
  if (!ts || ts->kind != JSON_ARR || ts->n < 1 || ts->n > IR_MAX_RANK - 1) {
    kr_layer_error(m, l, "target_shape must be a list of 1 to %d dimensions", IR_MAX_RANK - 1);
    return false;
  }
  int64_t have = 1, known = 1;
  if (!ir_type_is_batched(&x->type) || !ir_type_inner_numel(&x->type, &have)) {
    kr_layer_error(m, l, "needs an input with the batch dimension N, got %s", type_str(m, &x->type));
    return false;
  }
  ir_attr attr = {.shape = {ts->n + 1, {IR_DIM_BATCH}}};
  int unknown = -1;
  str_buf b;
  str_buf_init(&b);
  bool ok = true;
  for (int i = 0; i < ts->n; i++) {
    const json_value *d = &ts->items[i];
    int64_t v = d->kind == JSON_INT ? d->i : 0;
    if (d->kind == JSON_INT) str_buf_printf(&b, "%s%lld", i ? ", " : "[", (long long)v);
    if (v == -1 && unknown < 0) unknown = i;
    else if (v < 1) ok = false;
    else if (known > 0 && !size_mul_ok(known, v, &known)) known = -1;
    attr.shape.dims[i + 1] = v;
  }
  str_buf_putc(&b, ']');
  if (!ok) {
    kr_layer_error(m, l, "target_shape dimensions must be positive integers, with at most one -1");
  } else if (unknown >= 0 && known > 0 && have % known == 0) {
    attr.shape.dims[unknown + 1] = have / known;
  } else if (known != have || unknown >= 0) {
    ok = false;
    if (known < 0)
      kr_layer_error(m, l, "target_shape %s is too large for the input %s", str_buf_cstr(&b), type_str(m, &x->type));
    else if (unknown >= 0)
      kr_layer_error(m, l, "target_shape %s does not fit the input %s: its other dimensions (%lld elements) do not "
                     "divide the %lld elements of an example", str_buf_cstr(&b), type_str(m, &x->type),
                     (long long)known, (long long)have);
    else
      kr_layer_error(m, l, "target_shape %s (%lld elements) does not fit the input %s (%lld elements per example)",
                     str_buf_cstr(&b), (long long)known, type_str(m, &x->type), (long long)have);
  }
  str_buf_fini(&b);
  return ok && layout_op(m, l, k, IR_OP_RESHAPE, NULL, &x, 1, &attr, &l->calls[k].out);
}

/* Permute(dims): a permutation of 1..rank-1 (1-based, N excluded). */
static bool lower_permute(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  const ir_type *xt = &in[0]->type;
  const json_value *dims = kr_cfg(l, "dims");
  bool ok = ir_type_is_batched(xt) && dims && dims->kind == JSON_ARR && dims->n == xt->rank - 1;
  bool seen[IR_MAX_RANK] = {0};
  ir_attr attr = {.perm = {xt->rank, {0}}};
  for (int i = 0; ok && i < dims->n; i++) {
    const json_value *d = &dims->items[i];
    ok = d->kind == JSON_INT && d->i >= 1 && d->i < xt->rank && !seen[d->i];
    if (ok) seen[d->i] = true, attr.perm.v[i + 1] = d->i;
  }
  if (!ok) {
    kr_layer_error(m, l, "dims must be a permutation of 1..%d (1-based, the batch N excluded) for the input %s",
                   xt->rank - 1, type_str(m, xt));
    return false;
  }
  return layout_op(m, l, k, IR_OP_TRANSPOSE, NULL, in, 1, &attr, &l->calls[k].out);
}

/* Softmax(axis): an int or a list of one; along an axis but the last, that
 * axis swapped with the last around the softmax. */
static bool lower_softmax(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  const json_value *v = kr_cfg(l, "axis");
  if (v && v->kind == JSON_ARR && v->n == 1) v = &v->items[0];
  if (v && v->kind != JSON_INT) {
    diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m), "layer '%s' (%s): axis must be one integer (a softmax over "
                    "several axes is not supported)", l->name, l->cls);
    return false;
  }
  int rank = x->type.rank, a = keras_axis(m, l, x, v ? v->i : -1, "axis");
  if (a < 0) return false;
  if (a == rank - 1) return unary(m, l, k, x, IR_OP_SOFTMAX);
  ir_attr swap = {.perm = {rank, {0}}};
  for (int r = 0; r < rank; r++) swap.perm.v[r] = r == a ? rank - 1 : r == rank - 1 ? a : r;
  ir_node *t, *sm;
  if (!layout_op(m, l, k, IR_OP_TRANSPOSE, "transpose", &x, 1, &swap, &t)) return false;
  sm = kr_stamp(m, l, ir_build_unary(m->g, IR_OP_SOFTMAX, node_name(m, l, k, "softmax"), t, kr_loc(m)));
  return layout_op(m, l, k, IR_OP_TRANSPOSE, NULL, &sm, 1, &swap, &l->calls[k].out);
}

/* LayerNormalization(axis): an int or a list; Keras sorts the list, and
 * castor's layer_norm normalizes the trailing dimensions from one on, so
 * the axes must be the last ones, consecutive. gamma and beta have their
 * shape. */
static bool lower_layer_norm(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  const json_value *eps = kr_cfg(l, "epsilon"), *ax = kr_cfg(l, "axis");
  if (!eps || (eps->kind != JSON_INT && eps->kind != JSON_FLOAT) || !(eps->num > 0) || eps->num > 1) {
    kr_layer_error(m, l, "epsilon must be a number in (0, 1]");
    return false;
  }
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
    diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m), "layer '%s' (%s): axis must name the last dimensions of "
                    "%s (not N), e.g. -1 or [%d, %d]: castor normalizes trailing dimensions", l->name, l->cls,
                    type_str(m, &x->type), rank > 2 ? rank - 2 : 1, rank - 1);
    return false;
  }
  ir_type pt = {DT_F32, rank - first, {0}};
  for (int r = first; r < rank; r++) pt.dims[r - first] = x->type.dims[r];
  if (!l->weights_done) {
    const char *gk = arena_printf(m->arena, "%s.gamma", l->ir_name);
    const char *bk = arena_printf(m->arena, "%s.beta", l->ir_name);
    const float *gd = kr_weight(m, l, 0, "gamma", &pt), *bd = gd ? kr_weight(m, l, 1, "beta", &pt) : NULL;
    if (!gd || !bd) return false;
    l->w[0] = kr_stamp(m, l, ir_build_const(m->g, gk, &pt, gk, gd, kr_loc(m)));
    l->w[1] = kr_stamp(m, l, ir_build_const(m->g, bk, &pt, bk, bd, kr_loc(m)));
    l->weights_done = true;
  } else if (!ir_type_eq(&l->w[0]->type, &pt)) {
    kr_layer_error(m, l, "a shared call with input %s, the first call's gamma is %s",
                   type_str(m, &x->type), type_str(m, &l->w[0]->type));
    return false;
  }
  ir_attr attr = {.axis = first == rank - 1 ? -1 : first, .epsilon = eps->num};
  l->calls[k].out = kr_stamp(m, l, ir_build_op(m->g, IR_OP_LAYER_NORM, node_name(m, l, k, NULL),
                                               (ir_node *[]){x, l->w[0], l->w[1]}, 3, &attr, kr_loc(m)));
  return true;
}

/* Embedding(input_dim, output_dim): %NAME.embeddings [input_dim,
 * output_dim] (vars/0), gathered along axis 0 by int32 indices. An index
 * outside [0, input_dim) gives a row of zeros (Keras on JAX: NaNs past the
 * end, a negative one from the end; on TensorFlow's CPU an error). */
static bool lower_embedding(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int64_t idim, odim;
  if (!cfg_int(m, l, "input_dim", INT64_MIN, 1, (int64_t)1 << 31, &idim) ||
      !cfg_int(m, l, "output_dim", INT64_MIN, 1, (int64_t)1 << 31, &odim))
    return false;
  if (x->type.dtype != DT_I32) {
    diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m), "layer '%s' (%s): its input %s is not int32 indices "
                    "(castor does not cast floats to indices: declare the model's Input with dtype=\"int32\")",
                    l->name, l->cls, type_str(m, &x->type));
    return false;
  }
  ir_type et = {DT_F32, 2, {idim, odim}};
  int64_t bytes;
  if (!ir_type_bytes(&et, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    kr_layer_error(m, l, "its embeddings %s are larger than castor's tensor limit", type_str(m, &et));
    return false;
  }
  if (!l->weights_done) {
    const char *key = arena_printf(m->arena, "%s.embeddings", l->ir_name);
    const float *d = kr_weight(m, l, 0, "embeddings", &et);
    if (!d) return false;
    l->w[0] = kr_stamp(m, l, ir_build_const(m->g, key, &et, key, d, kr_loc(m)));
    l->weights_done = true;
  }
  ir_attr attr = {.axis = 0};
  return layout_op(m, l, k, IR_OP_GATHER, NULL, (ir_node *[]){l->w[0], x}, 2, &attr, &l->calls[k].out);
}

/* Keras's padding along one dimension: 'valid' none; 'same' the total
 * that keeps ceil(in / stride) outputs, the odd one at the end (TF, and
 * JAX's "SAME"). */
static void same_pads(bool same, int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t *p0, int64_t *p1) {
  *p0 = *p1 = 0;
  if (!same) return;
  int64_t out = (in + stride - 1) / stride, total = (out - 1) * stride + dilation * (k - 1) + 1 - in;
  if (total > 0) *p0 = total / 2, *p1 = total - total / 2;
}

static bool image_input(kr_model *m, kr_layer *l, const ir_node *x) {
  if (x->type.rank == 4 && ir_type_is_batched(&x->type)) return true;
  kr_layer_error(m, l, "needs an input [N, height, width, channels], got %s", type_str(m, &x->type));
  return false;
}

/* Conv2D: as Dense, with the kernel [KH, KW, C, filters] (HWIO, vars/0). */
static bool lower_conv2d(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  ir_graph *g = m->g;
  int64_t filters, ks[2], st[2], dil[2];
  bool same;
  ir_op act;
  const json_value *ub = kr_cfg(l, "use_bias");
  if (!cfg_int(m, l, "filters", INT64_MIN, 1, (int64_t)1 << 31, &filters) || !cfg_pair(m, l, "kernel_size", NULL, ks) ||
      !cfg_pair(m, l, "strides", (int64_t[]){1, 1}, st) || !cfg_pair(m, l, "dilation_rate", (int64_t[]){1, 1}, dil) ||
      !cfg_padding(m, l, &same) || !activation(m, l, &act) || !image_input(m, l, x))
    return false;
  bool use_bias = !ub || (ub->kind == JSON_LIT && ub->lit == 't');
  ir_type kt = {DT_F32, 4, {ks[0], ks[1], x->type.dims[3], filters}}, bt = {DT_F32, 1, {filters}};
  int64_t bytes;
  if (!ir_type_bytes(&kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    kr_layer_error(m, l, "its kernel %s is larger than castor's tensor limit", type_str(m, &kt));
    return false;
  }
  ir_attr a = {.acc = DT_F32, .strides = {2, {st[0], st[1]}}, .dilations = {2, {dil[0], dil[1]}}, .pads = {4, {0}}};
  same_pads(same, x->type.dims[1], ks[0], st[0], dil[0], &a.pads.v[0], &a.pads.v[1]);
  same_pads(same, x->type.dims[2], ks[1], st[1], dil[1], &a.pads.v[2], &a.pads.v[3]);
  ir_node probe = {.type = kt};
  ir_type out;
  char err[256];
  if (!ir_infer_type(IR_OP_CONV2D, (ir_node *[]){x, &probe}, 2, &a, &out, err, sizeof err)) {
    kr_layer_error(m, l, "%s", err);
    return false;
  }
  if (!kernel_bias(m, l, x, &kt, &bt, use_bias)) return false;
  bool has_act = act != IR_OP_COUNT;
  const char *cv = has_act || use_bias ? node_name(m, l, k, "conv") : node_name(m, l, k, NULL);
  const char *add = has_act ? node_name(m, l, k, "bias_add") : node_name(m, l, k, NULL);
  ir_node *y = kr_stamp(m, l, ir_build_op(g, IR_OP_CONV2D, cv, (ir_node *[]){x, l->w[0]}, 2, &a, kr_loc(m)));
  l->calls[k].out = bias_act(m, l, k, y, add, use_bias, act);
  return true;
}

/* MaxPooling2D, AveragePooling2D: strides null means pool_size. */
static bool pool2d(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in, ir_op op) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int64_t ps[2], st[2];
  bool same;
  if (!cfg_pair(m, l, "pool_size", NULL, ps) || !cfg_pair(m, l, "strides", ps, st) || !cfg_padding(m, l, &same) ||
      !image_input(m, l, x))
    return false;
  ir_attr a = {.pool = {2, {ps[0], ps[1]}}, .strides = {2, {st[0], st[1]}}, .pads = {4, {0}}};
  same_pads(same, x->type.dims[1], ps[0], st[0], 1, &a.pads.v[0], &a.pads.v[1]);
  same_pads(same, x->type.dims[2], ps[1], st[1], 1, &a.pads.v[2], &a.pads.v[3]);
  return layout_op(m, l, k, op, NULL, &x, 1, &a, &l->calls[k].out);
}

static bool lower_max_pool(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return pool2d(m, l, k, in, n_in, IR_OP_MAX_POOL2D);
}

static bool lower_avg_pool(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return pool2d(m, l, k, in, n_in, IR_OP_AVG_POOL2D);
}

/* Dropout(rate, seed): the IR's dropout (the identity at inference; in
 * training a counter-based mask of (seed, dropout.step, element), see
 * docs/training.md), the identity for rate 0. Keras's seed (null: the
 * layer's index in config.layers) is the op's seed; a shared layer's call k
 * adds k << 32 so that each call draws its own mask, as Keras's seed
 * generator does. noise_shape must be null (the IR's mask is per element). */
static bool lower_dropout(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  const json_value *r = kr_cfg(l, "rate");
  if (!r || (r->kind != JSON_INT && r->kind != JSON_FLOAT) || !(r->num >= 0) || !(r->num < 1)) {
    kr_layer_error(m, l, "rate must be a number in [0, 1)");
    return false;
  }
  int64_t seed;
  if (!cfg_int(m, l, "seed", l->index, 0, INT32_MAX, &seed)) return false;
  if (r->num == 0) return l->calls[k].out = in[0], true;
  ir_attr a = {.rate = r->num, .seed = seed + ((int64_t)k << 32)};
  return layout_op(m, l, k, IR_OP_DROPOUT, NULL, in, 1, &a, &l->calls[k].out);
}

/* CNN: BatchNormalization(axis=-1, momentum, epsilon, center, scale):
 * batch_norm over the last (channel) axis, as the .cast frontend builds it:
 * %NAME.gamma, %NAME.beta, %NAME.moving_mean, %NAME.moving_variance, all
 * [C], stored in vars/ in that order with gamma or beta left out when
 * scale or center is false (an [] literal 1 or 0 takes its place).
 * Inference uses the moving statistics; a training step the batch's and
 * updates them with momentum (passes/grad_bn.c). */
static bool cfg_bool(kr_model *m, kr_layer *l, const char *key, bool dflt, bool *out) {
  const json_value *v = kr_cfg(l, key);
  if (kr_is_null(v)) return *out = dflt, true;
  if (v->kind != JSON_LIT || (v->lit != 't' && v->lit != 'f')) {
    kr_layer_error(m, l, "%s must be true or false", key);
    return false;
  }
  *out = v->lit == 't';
  return true;
}

static bool cfg_number(kr_model *m, kr_layer *l, const char *key, double dflt, double lo, double hi, double *out) {
  const json_value *v = kr_cfg(l, key);
  if (kr_is_null(v)) return *out = dflt, true;
  if ((v->kind != JSON_INT && v->kind != JSON_FLOAT) || !(v->num >= lo) || !(v->num <= hi)) {
    kr_layer_error(m, l, "%s must be a number in [%g, %g]", key, lo, hi);
    return false;
  }
  *out = v->num;
  return true;
}

static bool lower_batch_norm(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int rank = x->type.rank;
  int64_t axis;
  double eps, mom;
  bool center, scale;
  if (!cfg_int(m, l, "axis", -1, -IR_MAX_RANK, IR_MAX_RANK, &axis) || !cfg_number(m, l, "epsilon", 1e-3, 1e-12, 1, &eps) ||
      !cfg_number(m, l, "momentum", 0.99, 0, 1, &mom) || !cfg_bool(m, l, "center", true, &center) ||
      !cfg_bool(m, l, "scale", true, &scale))
    return false;
  if (rank < 2 || x->type.dtype != DT_F32) {
    kr_layer_error(m, l, "its input %s is not a float tensor with a feature dimension", type_str(m, &x->type));
    return false;
  }
  if (axis != -1 && axis != rank - 1) {
    diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m), "layer '%s' (%s): axis %lld: castor normalizes over the "
                    "last (channel) axis of %s: axis=-1 or axis=%d (channels last)", l->name, l->cls,
                    (long long)axis, type_str(m, &x->type), rank - 1);
    return false;
  }
  ir_type ct = {DT_F32, 1, {x->type.dims[rank - 1]}};
  static const char *const names[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
  if (!l->weights_done) {
    int var = 0;
    for (int i = 0; i < 4; i++) {
      const char *key = arena_printf(m->arena, "%s.%s", l->ir_name, names[i]);
      if ((i == 0 && !scale) || (i == 1 && !center)) {
        ir_type st = {DT_F32, 0, {0}};
        ir_node *lit = ir_node_new(m->g, IR_OP_LITERAL, &st, NULL, 0, key, kr_loc(m));
        lit->attr.value = i == 0 ? 1.0 : 0.0;
        ir_graph_append(m->g, lit);
        l->w[i] = kr_stamp(m, l, lit);
        continue;
      }
      const float *d = kr_weight(m, l, var++, names[i], &ct);
      if (!d) return false;
      l->w[i] = kr_stamp(m, l, ir_build_const(m->g, key, &ct, key, d, kr_loc(m)));
    }
    l->weights_done = true;
  } else if (!ir_type_eq(&l->w[2]->type, &ct)) {
    kr_layer_error(m, l, "a shared call with input %s, the first call's moving_mean is %s", type_str(m, &x->type),
                   type_str(m, &l->w[2]->type));
    return false;
  }
  ir_attr a = {.epsilon = eps, .momentum = mom};
  ir_node *srcs[5] = {x, l->w[0], l->w[1], l->w[2], l->w[3]};
  return layout_op(m, l, k, IR_OP_BATCH_NORM, NULL, srcs, 5, &a, &l->calls[k].out);
}

/* CNN: GlobalAveragePooling2D / GlobalMaxPooling2D (keepdims): one
 * avg_pool2d / max_pool2d window over the whole image, as the .cast
 * frontend lowers them, then [N, C] (%NAME.pool, a reshape %NAME) or, with
 * keepdims, [N, 1, 1, C] (%NAME). GlobalAveragePooling1D: [N, T, C] as the
 * image [N, 1, T, C] (%NAME.image), a [1, T] window, [N, C] or [N, 1, C]. */
static bool global_pool(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in, ir_op op, bool one_d) {
  if (!one_input(m, l, n_in)) return false;
  bool keep;
  if (!cfg_bool(m, l, "keepdims", false, &keep)) return false;
  ir_node *x = in[0];
  if (one_d) {
    if (x->type.rank != 3) {
      kr_layer_error(m, l, "its input %s is not [N, steps, features]", type_str(m, &x->type));
      return false;
    }
    ir_attr ra = {.shape = {4, {IR_DIM_BATCH, 1, x->type.dims[1], x->type.dims[2]}}};
    if (!layout_op(m, l, k, IR_OP_RESHAPE, "image", &x, 1, &ra, &x)) return false;
  } else if (!image_input(m, l, x)) {
    return false;
  }
  int64_t C = x->type.dims[3];
  ir_attr a = {.pool = {2, {x->type.dims[1], x->type.dims[2]}}, .strides = {2, {1, 1}}, .pads = {4, {0}}};
  bool last = keep && !one_d;
  ir_node *y;
  if (!layout_op(m, l, k, op, last ? NULL : "pool", &x, 1, &a, &y)) return false;
  if (!last) {
    ir_attr ra = {.shape = keep ? (ir_shape){3, {IR_DIM_BATCH, 1, C}} : (ir_shape){2, {IR_DIM_BATCH, C}}};
    if (!layout_op(m, l, k, IR_OP_RESHAPE, NULL, &y, 1, &ra, &y)) return false;
  }
  l->calls[k].out = y;
  return true;
}

static bool lower_global_avg_pool2d(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return global_pool(m, l, k, in, n_in, IR_OP_AVG_POOL2D, false);
}

static bool lower_global_max_pool2d(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return global_pool(m, l, k, in, n_in, IR_OP_MAX_POOL2D, false);
}

static bool lower_global_avg_pool1d(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return global_pool(m, l, k, in, n_in, IR_OP_AVG_POOL2D, true);
}

/* CNN: ZeroPadding2D(padding): an int (all sides), [h, w] (symmetric) or
 * [[top, bottom], [left, right]]; pad_constant with zeros. */
static bool lower_zero_padding2d(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  if (!image_input(m, l, x)) return false;
  const json_value *v = kr_cfg(l, "padding");
  int64_t p[4];
  bool ok = v && (v->kind == JSON_INT || (v->kind == JSON_ARR && v->n == 2));
  for (int i = 0; ok && i < 2; i++) {
    const json_value *e = v->kind == JSON_INT ? v : &v->items[i];
    for (int j = 0; ok && j < 2; j++) {
      const json_value *f = e->kind == JSON_ARR ? (e->n == 2 ? &e->items[j] : NULL) : e;
      ok = f && f->kind == JSON_INT && f->i >= 0 && f->i <= ((int64_t)1 << 20);
      if (ok) p[2 * i + j] = f->i;
    }
  }
  if (!ok) {
    kr_layer_error(m, l, "padding must be an integer, [h, w] or [[top, bottom], [left, right]] of integers >= 0");
    return false;
  }
  ir_attr a = {.shape = {4, {IR_DIM_BATCH, x->type.dims[1] + p[0] + p[1], x->type.dims[2] + p[2] + p[3], x->type.dims[3]}},
               .starts = {4, {0, p[0], p[2], 0}}, .steps = {4, {1, 1, 1, 1}}, .value = 0};
  return layout_op(m, l, k, IR_OP_PAD_CONSTANT, NULL, &x, 1, &a, &l->calls[k].out);
}

/* ---- general tensors: MultiHeadAttention (frontend/fe_attention.c builds the graph) ----
 * Called on (query, value[, key]) with key= and attention_mask= tensors and
 * use_causal_mask in the call's kwargs (kr_call). Weights from the
 * EinsumDense sublayers' groups /layers/NAME/{query,key,value,output}_dense/
 * vars/{0,1} (kernel, bias), in Keras's variable order; a shared layer's
 * later call reuses them. */
struct mha_stamp {
  kr_model *m;
  kr_layer *l;
};

static ir_node *mha_stamp_cb(void *ctx, ir_node *n) {
  struct mha_stamp *c = ctx;
  return kr_stamp(c->m, c->l, n);
}

static bool mha_int(kr_model *m, kr_layer *l, const char *key, bool null_ok, int64_t *out) {
  const json_value *v = kr_cfg(l, key);
  if (null_ok && (!v || kr_is_null(v))) return *out = 0, true;
  if (!v || v->kind != JSON_INT || v->i < 1 || v->i > ((int64_t)1 << 20)) {
    kr_layer_error(m, l, "%s must be a positive integer", key);
    return false;
  }
  return *out = v->i, true;
}

static bool lower_multi_head_attention(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  const kr_call *c = &l->calls[k];
  int n_pos = n_in - (c->mask_at ? 1 : 0) - (c->key_at ? 1 : 0); /* key= and attention_mask= come after */
  if (n_pos < 2 || n_pos > 3 || (c->key_at && n_pos != 2)) {
    kr_layer_error(m, l, "takes query, value and optionally key, its call has %d inputs", n_in);
    return false;
  }
  ir_node *q = in[0], *v = in[1], *key = c->key_at ? in[c->key_at - 1] : n_pos == 3 ? in[2] : in[1];
  ir_node *mask = c->mask_at ? in[c->mask_at - 1] : NULL;
  int64_t H, dk, dv;
  if (!mha_int(m, l, "num_heads", false, &H) || !mha_int(m, l, "key_dim", false, &dk) ||
      !mha_int(m, l, "value_dim", true, &dv))
    return false;
  if (!dv) dv = dk;
  const json_value *ax = kr_cfg(l, "attention_axes"), *ub = kr_cfg(l, "use_bias");
  bool axes_ok = !ax || kr_is_null(ax) || (ax->kind == JSON_INT && ax->i == 1) ||
                 (ax->kind == JSON_ARR && ax->n == 1 && ax->items[0].kind == JSON_INT &&
                  (ax->items[0].i == 1 || ax->items[0].i == -2));
  if (!axes_ok) {
    kr_unsupported(m, "layer '%s' (%s): attention_axes other than [1] (the steps of a [N, steps, features] input) is "
                   "not supported", l->name, l->cls);
    return false;
  }
  bool use_bias = !ub || (ub->kind == JSON_LIT && ub->lit == 't');
  ir_node *const ins[3] = {q, v, key};
  static const char *const roles[3] = {"query", "value", "key"};
  for (int i = 0; i < 3; i++)
    if (ins[i]->type.rank != 3 || !ir_type_is_batched(&ins[i]->type)) {
      kr_layer_error(m, l, "its %s must be [N, steps, features], got %s", roles[i], type_str(m, &ins[i]->type));
      return false;
    }
  int64_t T = q->type.dims[1], d = q->type.dims[2], S = v->type.dims[1];
  if (key->type.dims[1] != S) {
    kr_layer_error(m, l, "its key %s and value %s need the same number of steps", type_str(m, &key->type),
                   type_str(m, &v->type));
    return false;
  }
  if (mask && (mask->type.rank != 3 || !ir_type_is_batched(&mask->type) || mask->type.dims[1] != T ||
               mask->type.dims[2] != S)) {
    kr_layer_error(m, l, "its attention_mask must be [N, %lld, %lld] for query %s and value %s, got %s", (long long)T,
                   (long long)S, type_str(m, &q->type), type_str(m, &v->type), type_str(m, &mask->type));
    return false;
  }
  static const char *const subs[4] = {"query_dense", "key_dense", "value_dense", "output_dense"};
  static const char *const names[4] = {"query", "key", "value", "attention_output"};
  ir_type kt[4] = {{DT_F32, 3, {d, H, dk}}, {DT_F32, 3, {key->type.dims[2], H, dk}},
                   {DT_F32, 3, {v->type.dims[2], H, dv}}, {DT_F32, 3, {H, dv, d}}};
  ir_type bt[4] = {{DT_F32, 2, {H, dk}}, {DT_F32, 2, {H, dk}}, {DT_F32, 2, {H, dv}}, {DT_F32, 1, {d}}};
  if (!l->weights_done) {
    int order = 0;
    for (int i = 0; i < 4; i++) {
      int64_t bytes;
      if (!ir_type_bytes(&kt[i], 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
        kr_layer_error(m, l, "its %s kernel %s is larger than castor's tensor limit", names[i], type_str(m, &kt[i]));
        return false;
      }
      for (int b = 0; b < (use_bias ? 2 : 1); b++) {
        const ir_type *t = b ? &bt[i] : &kt[i];
        const char *what = arena_printf(m->arena, "%s %s", names[i], b ? "bias" : "kernel");
        const float *data = kr_sub_weight(m, l, subs[i], b, order++, what, t);
        if (!data) return false;
        const char *key_name = arena_printf(m->arena, "%s.%s.%s", l->ir_name, names[i], b ? "bias" : "kernel");
        l->w[2 * i + b] = kr_stamp(m, l, ir_build_const(m->g, key_name, t, key_name, data, kr_loc(m)));
      }
    }
    l->weights_done = true;
  } else
    for (int i = 0; i < 4; i++)
      if (!ir_type_eq(&l->w[2 * i]->type, &kt[i])) {
        kr_layer_error(m, l, "a shared call's %s kernel would be %s, the first call's is %s", names[i],
                       type_str(m, &kt[i]), type_str(m, &l->w[2 * i]->type));
        return false;
      }
  struct mha_stamp sc = {m, l};
  fe_attention a = {.g = m->g, .arena = m->arena, .loc = kr_loc(m), .name = node_name(m, l, k, NULL),
                    .stamp = mha_stamp_cb, .ctx = &sc, .heads = H, .key_dim = dk, .value_dim = dv,
                    .query_kernel = l->w[0], .query_bias = l->w[1], .key_kernel = l->w[2], .key_bias = l->w[3],
                    .value_kernel = l->w[4], .value_bias = l->w[5], .output_kernel = l->w[6],
                    .output_bias = l->w[7], .mask = mask, .causal = c->causal};
  l->calls[k].out = fe_build_attention(&a, q, v, key);
  return true;
}

/* ---- convolutional networks: DepthwiseConv2D, SeparableConv2D ---- */

/* The depthwise step of both: x [N, H, W, C] by kernel vars/`wi` [KH, KW,
 * C, depth_multiplier] (Keras's shape, checked against the file), read as
 * the HWIO kernel [KH, KW, 1, C*M] (%NAME.<wname>.hwio, a reshape): the
 * IR's group_conv2d with one group per channel, output channel c*M + m as
 * Keras's. Strides, padding and dilation_rate as Conv2D's. */
static ir_node *depthwise_step(kr_model *m, kr_layer *l, int k, ir_node *x, int wi, const char *wname, const char *name,
                               int64_t *cm) {
  int64_t ks[2], st[2], dil[2], mult;
  bool same;
  if (!cfg_pair(m, l, "kernel_size", NULL, ks) || !cfg_pair(m, l, "strides", (int64_t[]){1, 1}, st) ||
      !cfg_pair(m, l, "dilation_rate", (int64_t[]){1, 1}, dil) || !cfg_padding(m, l, &same) ||
      !cfg_int(m, l, "depth_multiplier", 1, 1, (int64_t)1 << 20, &mult) || !image_input(m, l, x))
    return NULL;
  if ((st[0] > 1 || st[1] > 1) && (dil[0] > 1 || dil[1] > 1)) { /* Keras refuses both at construction */
    kr_layer_error(m, l, "strides > 1 together with dilation_rate > 1 is not supported (nor by Keras)");
    return NULL;
  }
  int64_t C = x->type.dims[3];
  ir_type kt = {DT_F32, 4, {ks[0], ks[1], C, mult}}, ct = {DT_F32, 4, {ks[0], ks[1], 1, C * mult}};
  int64_t bytes;
  if (C * mult > ((int64_t)1 << 31) || !ir_type_bytes(&kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    kr_layer_error(m, l, "its %s %s is larger than castor's tensor limit", wname, type_str(m, &kt));
    return NULL;
  }
  ir_attr a = {.acc = DT_F32, .strides = {2, {st[0], st[1]}}, .dilations = {2, {dil[0], dil[1]}}, .pads = {4, {0}}};
  same_pads(same, x->type.dims[1], ks[0], st[0], dil[0], &a.pads.v[0], &a.pads.v[1]);
  same_pads(same, x->type.dims[2], ks[1], st[1], dil[1], &a.pads.v[2], &a.pads.v[3]);
  ir_op op = C == 1 ? IR_OP_CONV2D : IR_OP_GROUP_CONV2D;
  ir_node probe = {.type = ct};
  ir_type out;
  char err[256];
  if (!ir_infer_type(op, (ir_node *[]){x, &probe}, 2, &a, &out, err, sizeof err)) {
    kr_layer_error(m, l, "%s", err);
    return NULL;
  }
  if (!l->weights_done) {
    const char *key = arena_printf(m->arena, "%s.%s", l->ir_name, wname);
    const float *d = kr_weight(m, l, wi, wname, &kt);
    if (!d) return NULL;
    l->w[wi] = kr_stamp(m, l, ir_build_const(m->g, key, &kt, key, d, kr_loc(m)));
  } else if (!ir_type_eq(&l->w[wi]->type, &kt)) {
    kr_layer_error(m, l, "a shared call with input %s, the first call's %s is %s", type_str(m, &x->type), wname,
                   type_str(m, &l->w[wi]->type));
    return NULL;
  }
  ir_node *w = l->w[wi];
  if (C != 1) { /* [KH, KW, C, M] is not already [KH, KW, 1, C*M] */
    ir_attr ra = {.shape = {4, {ct.dims[0], ct.dims[1], ct.dims[2], ct.dims[3]}}};
    const char *rn = k ? arena_printf(m->arena, "%s.%s.hwio.call%d", l->ir_name, wname, k)
                       : arena_printf(m->arena, "%s.%s.hwio", l->ir_name, wname);
    w = kr_stamp(m, l, ir_build_op(m->g, IR_OP_RESHAPE, rn, &w, 1, &ra, kr_loc(m)));
  }
  *cm = C * mult;
  return kr_stamp(m, l, ir_build_op(m->g, op, name, (ir_node *[]){x, w}, 2, &a, kr_loc(m)));
}

/* The bias vars/`bi` [n] of a layer, read on its first call. */
static bool conv_bias(kr_model *m, kr_layer *l, int bi, int64_t n) {
  if (l->w[bi]) return true;
  ir_type bt = {DT_F32, 1, {n}};
  const char *key = arena_printf(m->arena, "%s.bias", l->ir_name);
  const float *d = kr_weight(m, l, bi, "bias", &bt);
  if (!d) return false;
  l->w[bi] = kr_stamp(m, l, ir_build_const(m->g, key, &bt, key, d, kr_loc(m)));
  return true;
}

/* DepthwiseConv2D: %NAME.kernel [KH, KW, C, depth_multiplier] (vars/0),
 * %NAME.bias [C*M] (vars/1), %NAME.depthwise, %NAME.bias_add, the
 * activation (as Conv2D's). */
static bool lower_depthwise_conv2d(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  bool use_bias;
  ir_op act;
  if (!one_input(m, l, n_in) || !cfg_bool(m, l, "use_bias", true, &use_bias) || !activation(m, l, &act)) return false;
  bool has_act = act != IR_OP_COUNT;
  int64_t cm;
  ir_node *y = depthwise_step(m, l, k, in[0], 0, "kernel",
                              has_act || use_bias ? node_name(m, l, k, "depthwise") : node_name(m, l, k, NULL), &cm);
  if (!y || (use_bias && !conv_bias(m, l, 1, cm))) return false;
  l->weights_done = true;
  const char *add = has_act ? node_name(m, l, k, "bias_add") : node_name(m, l, k, NULL);
  l->calls[k].out = bias_act(m, l, k, y, add, use_bias, act);
  return true;
}

/* SeparableConv2D: the depthwise step of %NAME.depthwise_kernel [KH, KW, C,
 * M] (vars/0; %NAME.depthwise), the 1x1 conv2d of %NAME.pointwise_kernel
 * [1, 1, C*M, filters] (vars/1; %NAME.pointwise), %NAME.bias [filters]
 * (vars/2), the activation. */
static bool lower_separable_conv2d(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  bool use_bias;
  ir_op act;
  int64_t filters, cm;
  if (!one_input(m, l, n_in) || !cfg_bool(m, l, "use_bias", true, &use_bias) ||
      !cfg_int(m, l, "filters", INT64_MIN, 1, (int64_t)1 << 31, &filters) || !activation(m, l, &act))
    return false;
  ir_node *d = depthwise_step(m, l, k, in[0], 0, "depthwise_kernel", node_name(m, l, k, "depthwise"), &cm);
  if (!d) return false;
  ir_type pt = {DT_F32, 4, {1, 1, cm, filters}};
  int64_t bytes;
  if (!ir_type_bytes(&pt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    kr_layer_error(m, l, "its pointwise_kernel %s is larger than castor's tensor limit", type_str(m, &pt));
    return false;
  }
  if (!l->weights_done) {
    const char *key = arena_printf(m->arena, "%s.pointwise_kernel", l->ir_name);
    const float *pd = kr_weight(m, l, 1, "pointwise_kernel", &pt);
    if (!pd) return false;
    l->w[1] = kr_stamp(m, l, ir_build_const(m->g, key, &pt, key, pd, kr_loc(m)));
    if (use_bias && !conv_bias(m, l, 2, filters)) return false;
    l->weights_done = true;
  } else if (!ir_type_eq(&l->w[1]->type, &pt)) {
    kr_layer_error(m, l, "a shared call with input %s, the first call's pointwise_kernel is %s",
                   type_str(m, &in[0]->type), type_str(m, &l->w[1]->type));
    return false;
  }
  bool has_act = act != IR_OP_COUNT;
  ir_attr pa = {.acc = DT_F32, .strides = {2, {1, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {0}}};
  const char *pw = has_act || use_bias ? node_name(m, l, k, "pointwise") : node_name(m, l, k, NULL);
  ir_node *y = kr_stamp(m, l, ir_build_op(m->g, IR_OP_CONV2D, pw, (ir_node *[]){d, l->w[1]}, 2, &pa, kr_loc(m)));
  if (use_bias) /* the bias is vars/2: bias_act's l->w[1] is the pointwise kernel here */
    y = kr_stamp(m, l, ir_build_binary(m->g, IR_OP_ADD, has_act ? node_name(m, l, k, "bias_add") : node_name(m, l, k, NULL),
                                       y, l->w[2], kr_loc(m)));
  if (has_act) y = kr_stamp(m, l, ir_build_unary(m->g, act, node_name(m, l, k, NULL), y, kr_loc(m)));
  l->calls[k].out = y;
  return true;
}

/* The layer table. Rows of the classes the other IR issues enable go at the end. */
static const layer_row rows[] = {
    {"InputLayer", NULL,
     {{"batch_shape", KEY_ANY}, {"batch_input_shape", KEY_ANY}, {"sparse", KEY_ANY},
      {"ragged", KEY_ANY}, {"optional", KEY_FALSE}}},
    {"Dense", lower_dense,
     {{"units", KEY_ANY}, {"activation", KEY_ANY}, {"use_bias", KEY_ANY},
      {"kernel_initializer", KEY_ANY}, {"bias_initializer", KEY_ANY},
      {"kernel_regularizer", KEY_NULL}, {"bias_regularizer", KEY_NULL},
      {"activity_regularizer", KEY_NULL}, {"kernel_constraint", KEY_NULL},
      {"bias_constraint", KEY_NULL}, {"lora_rank", KEY_NULL}, {"lora_alpha", KEY_ANY},
      {"quantization_config", KEY_NULL}}},
    {"Activation", lower_activation, {{"activation", KEY_ANY}}},
    {"ReLU", lower_relu, {{"max_value", KEY_NULL}, {"negative_slope", KEY_ZERO}, {"threshold", KEY_ZERO}}},
    {"Softmax", lower_softmax, {{"axis", KEY_ANY}}},
    {"Add", lower_add, {{"activity_regularizer", KEY_NULL}}},
    {"Multiply", lower_multiply, {{"activity_regularizer", KEY_NULL}}},
    {"LayerNormalization", lower_layer_norm,
     {{"axis", KEY_ANY}, {"epsilon", KEY_ANY}, {"center", KEY_TRUE}, {"scale", KEY_TRUE},
      {"rms_scaling", KEY_FALSE}, {"beta_initializer", KEY_ANY}, {"gamma_initializer", KEY_ANY},
      {"beta_regularizer", KEY_NULL}, {"gamma_regularizer", KEY_NULL},
      {"beta_constraint", KEY_NULL}, {"gamma_constraint", KEY_NULL}}},
    /* the general-tensor and CNN classes */
    {"Subtract", lower_subtract, {{"activity_regularizer", KEY_NULL}}},
    {"Maximum", lower_maximum, {{"activity_regularizer", KEY_NULL}}},
    {"Minimum", lower_minimum, {{"activity_regularizer", KEY_NULL}}},
    {"Concatenate", lower_concatenate, {{"axis", KEY_ANY}, {"activity_regularizer", KEY_NULL}}},
    {"Flatten", lower_flatten, {{"data_format", KEY_ANY}}},
    {"Reshape", lower_reshape, {{"target_shape", KEY_ANY}}},
    {"Permute", lower_permute, {{"dims", KEY_ANY}}},
    {"Embedding", lower_embedding,
     {{"input_dim", KEY_ANY}, {"output_dim", KEY_ANY}, {"embeddings_initializer", KEY_ANY},
      {"embeddings_regularizer", KEY_NULL}, {"activity_regularizer", KEY_NULL},
      {"embeddings_constraint", KEY_NULL}, {"mask_zero", KEY_FALSE}, {"lora_rank", KEY_NULL},
      {"lora_alpha", KEY_ANY}, {"quantization_config", KEY_NULL}, {"input_length", KEY_ANY}}},
    {"Conv2D", lower_conv2d,
     {{"filters", KEY_ANY}, {"kernel_size", KEY_ANY}, {"strides", KEY_ANY}, {"padding", KEY_ANY},
      {"data_format", KEY_CHANNELS_LAST}, {"dilation_rate", KEY_ANY}, {"groups", KEY_ONE},
      {"activation", KEY_ANY}, {"use_bias", KEY_ANY}, {"kernel_initializer", KEY_ANY},
      {"bias_initializer", KEY_ANY}, {"kernel_regularizer", KEY_NULL}, {"bias_regularizer", KEY_NULL},
      {"activity_regularizer", KEY_NULL}, {"kernel_constraint", KEY_NULL}, {"bias_constraint", KEY_NULL},
      {"lora_rank", KEY_NULL}, {"lora_alpha", KEY_ANY}, {"quantization_config", KEY_NULL}}},
    {"MaxPooling2D", lower_max_pool,
     {{"pool_size", KEY_ANY}, {"strides", KEY_ANY}, {"padding", KEY_ANY}, {"data_format", KEY_CHANNELS_LAST}}},
    {"AveragePooling2D", lower_avg_pool,
     {{"pool_size", KEY_ANY}, {"strides", KEY_ANY}, {"padding", KEY_ANY}, {"data_format", KEY_CHANNELS_LAST}}},
    {"Dropout", lower_dropout, {{"rate", KEY_ANY}, {"seed", KEY_ANY}, {"noise_shape", KEY_NULL}}},
    /* the IR's batch_norm, dropout, depthwise/separable convolution, global pooling and padding */
    {"BatchNormalization", lower_batch_norm,
     {{"axis", KEY_ANY}, {"momentum", KEY_ANY}, {"epsilon", KEY_ANY}, {"center", KEY_ANY}, {"scale", KEY_ANY},
      {"beta_initializer", KEY_ANY}, {"gamma_initializer", KEY_ANY}, {"moving_mean_initializer", KEY_ANY},
      {"moving_variance_initializer", KEY_ANY}, {"beta_regularizer", KEY_NULL}, {"gamma_regularizer", KEY_NULL},
      {"beta_constraint", KEY_NULL}, {"gamma_constraint", KEY_NULL}, {"synchronized", KEY_FALSE},
      {"renorm", KEY_FALSE}, {"renorm_clipping", KEY_NULL}, {"renorm_momentum", KEY_ANY}}},
    {"GlobalAveragePooling2D", lower_global_avg_pool2d, {{"data_format", KEY_CHANNELS_LAST}, {"keepdims", KEY_ANY}}},
    {"GlobalMaxPooling2D", lower_global_max_pool2d, {{"data_format", KEY_CHANNELS_LAST}, {"keepdims", KEY_ANY}}},
    {"GlobalAveragePooling1D", lower_global_avg_pool1d, {{"data_format", KEY_CHANNELS_LAST}, {"keepdims", KEY_ANY}}},
    {"ZeroPadding2D", lower_zero_padding2d, {{"padding", KEY_ANY}, {"data_format", KEY_CHANNELS_LAST}}},
    /* general tensors: MultiHeadAttention (dropout refused: castor trains it without) */
    {"MultiHeadAttention", lower_multi_head_attention,
     {{"num_heads", KEY_ANY}, {"key_dim", KEY_ANY}, {"value_dim", KEY_ANY}, {"dropout", KEY_ZERO},
      {"use_bias", KEY_ANY}, {"use_gate", KEY_FALSE}, {"output_shape", KEY_NULL}, {"attention_axes", KEY_ANY},
      {"sliding_window", KEY_NULL}, {"kernel_initializer", KEY_ANY}, {"bias_initializer", KEY_ANY},
      {"kernel_regularizer", KEY_NULL}, {"bias_regularizer", KEY_NULL}, {"activity_regularizer", KEY_NULL},
      {"kernel_constraint", KEY_NULL}, {"bias_constraint", KEY_NULL}, {"seed", KEY_ANY}}},
    /* convolutional networks: DepthwiseConv2D, SeparableConv2D */
    {"DepthwiseConv2D", lower_depthwise_conv2d,
     {{"kernel_size", KEY_ANY}, {"strides", KEY_ANY}, {"padding", KEY_ANY}, {"depth_multiplier", KEY_ANY},
      {"data_format", KEY_CHANNELS_LAST}, {"dilation_rate", KEY_ANY}, {"activation", KEY_ANY}, {"use_bias", KEY_ANY},
      {"depthwise_initializer", KEY_ANY}, {"bias_initializer", KEY_ANY}, {"depthwise_regularizer", KEY_NULL},
      {"bias_regularizer", KEY_NULL}, {"activity_regularizer", KEY_NULL}, {"depthwise_constraint", KEY_NULL},
      {"bias_constraint", KEY_NULL}}},
    {"SeparableConv2D", lower_separable_conv2d,
     {{"filters", KEY_ANY}, {"kernel_size", KEY_ANY}, {"strides", KEY_ANY}, {"padding", KEY_ANY},
      {"depth_multiplier", KEY_ANY}, {"data_format", KEY_CHANNELS_LAST}, {"dilation_rate", KEY_ANY},
      {"activation", KEY_ANY}, {"use_bias", KEY_ANY}, {"depthwise_initializer", KEY_ANY},
      {"pointwise_initializer", KEY_ANY}, {"bias_initializer", KEY_ANY}, {"depthwise_regularizer", KEY_NULL},
      {"pointwise_regularizer", KEY_NULL}, {"bias_regularizer", KEY_NULL}, {"activity_regularizer", KEY_NULL},
      {"depthwise_constraint", KEY_NULL}, {"pointwise_constraint", KEY_NULL}, {"bias_constraint", KEY_NULL}}},
};
enum { N_ROWS = sizeof rows / sizeof *rows };

int kr_layer_row(const char *cls) {
  for (int i = 0; i < N_ROWS; i++)
    if (!strcmp(rows[i].cls, cls)) return i;
  return -1;
}

const char *kr_supported_list(void) {
  static char list[1024];
  if (!list[0]) {
    size_t o = 0;
    for (int i = 0; i < N_ROWS; i++)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", rows[i].cls);
  }
  return list;
}

static bool rule_ok(const json_value *v, key_rule r) {
  switch (r) {
  case KEY_ANY: return true;
  case KEY_NULL: return kr_is_null(v);
  case KEY_TRUE: return v->kind == JSON_LIT && v->lit == 't';
  case KEY_FALSE: return v->kind == JSON_LIT && v->lit == 'f';
  case KEY_ZERO: return (v->kind == JSON_INT || v->kind == JSON_FLOAT) && v->num == 0;
  case KEY_LAST_AXIS:
    if (v->kind == JSON_ARR && v->n == 1) v = &v->items[0];
    return v->kind == JSON_INT && v->i == -1;
  case KEY_CHANNELS_LAST: return kr_is_null(v) || (v->kind == JSON_STR && !strcmp(v->s, "channels_last"));
  case KEY_ONE: return v->kind == JSON_INT && v->i == 1;
  }
  return false;
}

static const char *rule_text(key_rule r) {
  switch (r) {
  case KEY_ANY: return "any";
  case KEY_NULL: return "null";
  case KEY_TRUE: return "true";
  case KEY_FALSE: return "false";
  case KEY_ZERO: return "0";
  case KEY_LAST_AXIS: return "-1 (the last axis)";
  case KEY_CHANNELS_LAST: return "channels_last (castor's images are [N, height, width, channels])";
  case KEY_ONE: return "1";
  }
  return "?";
}

bool kr_layer_check(kr_model *m, kr_layer *l) {
  const layer_row *row = &rows[l->row];
  for (int i = 0; i < l->cfg->n; i++) {
    const char *key = l->cfg->keys[i];
    const json_value *v = &l->cfg->items[i];
    const key_spec *spec = NULL;
    for (size_t c = 0; c < sizeof common / sizeof *common && !spec; c++)
      if (!strcmp(common[c].key, key)) spec = &common[c];
    for (int c = 0; c < 24 && row->keys[c].key && !spec; c++)
      if (!strcmp(row->keys[c].key, key)) spec = &row->keys[c];
    if (!spec) {
      diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m),
                      "layer '%s' (%s): config key '%s' is not supported", l->name, l->cls, key);
      return false;
    }
    if (!strcmp(l->cls, "InputLayer") && !strcmp(key, "dtype")) continue;
    if (!rule_ok(v, spec->rule)) {
      diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m),
                      "layer '%s' (%s): %s other than %s is not supported", l->name, l->cls, key,
                      rule_text(spec->rule));
      return false;
    }
  }
  return true;
}

bool kr_layer_lower(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  const layer_row *row = &rows[l->row];
  if (!row->lower) {
    kr_layer_error(m, l, "an InputLayer called on a tensor");
    return false;
  }
  /* int32 values (an Input with dtype="int32") are indices: only an Embedding takes them */
  for (int i = 0; i < n_in && row->lower != lower_embedding; i++)
    if (!dtype_is_float(in[i]->type.dtype)) {
      kr_layer_error(m, l, "input %d is %s: int32 values are indices, which only an Embedding takes", i,
                     type_str(m, &in[i]->type));
      return false;
    }
  return row->lower(m, l, k, in, n_in);
}
