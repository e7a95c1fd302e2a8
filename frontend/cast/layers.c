/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layers.c: the layer vocabulary of the .cast language. Between parse.c
 * (which hands over each call as written) and resolve.c (which binds the
 * value names a layer uses).
 *
 * For each call: find the layer kind, match positional arguments (the
 * input values, and the function of activation), check each attribute
 * against the layer's table and its value, and record a fe_layer. Then,
 * once the whole file is read, give unnamed layers Keras-style names
 * (dense, dense_1, ...) that avoid every explicit name, and report
 * duplicates.
 *
 * Invariant: every call yields a layer, so its value name is defined even
 * when the call had an error; such a layer is `broken`, has no inputs, and
 * is never lowered (so its mistake is reported once).
 */
#include "frontend/cast/internal.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_ATTRS = FE_LAYER_MAX_ATTRS };

/* The call checker's view of layers.def. */
static const struct layer_spec {
  const char *name;
  int n_inputs;                  /* positional value inputs */
  const char *positional;        /* the positional arguments, in words */
  const char *attrs[MAX_ATTRS];  /* keyword attributes it accepts */
} specs[FE_LAYER_COUNT] = {
#define LAYER(e, name, n_inputs, positional, keras, lower, ...) \
  [FE_LAYER_##e] = {name, n_inputs, positional, {__VA_ARGS__}},
#include "frontend/cast/layers.def"
#undef LAYER
};

static const char *const kind_names[FE_LAYER_COUNT] = {
#define LAYER(e, name, ...) [FE_LAYER_##e] = name,
#include "frontend/cast/layers.def"
#undef LAYER
};

/* Activation names are the ops the op table marks IR_OPF_ACTIVATION, in
 * table order, and "linear" (no op, IR_OP_COUNT). */
enum { N_ACTIVATIONS_MAX = IR_OP_COUNT + 1 };

static int activation_names(const char **names, ir_op *ops) {
  int n = 0;
  for (int i = 0; i < IR_OP_COUNT; i++)
    if (ir_op_flags((ir_op)i) & IR_OPF_ACTIVATION) names[n] = ir_op_name((ir_op)i), ops[n++] = (ir_op)i;
  names[n] = "linear", ops[n++] = IR_OP_COUNT;
  return n;
}

const char *fe_layer_kind_name(fe_layer_kind k) {
  return k < FE_LAYER_COUNT ? kind_names[k] : "layer";
}

/* The Keras class of each row of layers.def (its library row), or NULL for a layer of .cast's own. */
static const char *const keras_classes[FE_LAYER_COUNT] = {
#define LAYER(e, name, n_inputs, positional, keras, ...) [FE_LAYER_##e] = keras,
#include "frontend/cast/layers.def"
#undef LAYER
};

/* Whether a library row has a row in layers.def. */
static bool has_cast_row(int row) {
  for (int k = 0; k < FE_LAYER_COUNT; k++)
    if (keras_classes[k] && !strcmp(keras_classes[k], fl_row_class(row))) return true;
  return fl_row_is_input(row); /* input */
}

/* The library row a call names that has no row in layers.def, or -1. */
static int library_row(const char *callee) {
  int row = fl_layer_row_cast(callee);
  return row >= 0 && !has_cast_row(row) ? row : -1;
}

/* The keywords a call of a library row may give: `first` (a layers.def row's own attributes), then
 * its row's config keys (fl_row_cast_key) without repeats; without `first`, then name and dtype. */
enum { MAX_LIBRARY_KEYS = MAX_ATTRS + 32 };

static int library_keys(int row, const char *const *first, int n_first, const char **keys) {
  int n = 0;
  for (int i = 0; i < n_first; i++) keys[n++] = first[i];
  for (int i = 0; row >= 0 && n < MAX_LIBRARY_KEYS - 2; i++) {
    const char *k = fl_row_cast_key(row, i);
    if (!k) break;
    bool dup = str_eq(k, "name") || str_eq(k, "dtype");
    for (int j = 0; j < n && !dup; j++) dup = str_eq(keys[j], k);
    if (!dup) keys[n++] = k;
  }
  if (!n_first) keys[n++] = "name", keys[n++] = "dtype"; /* a layers.def row lists its own */
  return n;
}

/* The names of every layer a call may name: layers.def's rows in order, then the library's others. */
static int all_layer_names(fe_model *m, const char **names) {
  int n = 0;
  for (int k = 0; k < FE_LAYER_COUNT; k++) names[n++] = kind_names[k];
  char buf[FL_CAST_NAME_MAX];
  for (int row = 0; row < fl_layer_rows(); row++)
    if (!has_cast_row(row) && fl_row_cast_name(row, buf)) names[n++] = arena_strdup(m->arena, buf);
  return n;
}

/* ---- suggestions ---- */


const char *fe_closest(const char *s, const char *const *cands, int n_cands) {
  size_t len = strlen(s);
  if (len > 64) return NULL;
  const char *best = NULL;
  int best_d = 3;
  for (int i = 0; i < n_cands; i++) {
    int dist = str_edit_distance(s, len, cands[i], strlen(cands[i]));
    if (dist < best_d && (size_t)dist < len) best = cands[i], best_d = dist;
  }
  return best;
}

/* ---- values ---- */

static const char *value_desc(fe_model *m, const fe_value *v) {
  switch (v->kind) {
  case FE_VAL_IDENT:
  case FE_VAL_INT:
  case FE_VAL_FLOAT: return arena_printf(m->arena, "'%s'", v->str);
  case FE_VAL_STRING: return "a string";
  case FE_VAL_LIST: return "a list";
  }
  return "?";
}

/* Names may be written bare or in quotes. */
static const char *name_of(const fe_value *v) {
  return v->kind == FE_VAL_IDENT || v->kind == FE_VAL_STRING ? v->str : NULL;
}

static bool is_identifier(const char *s) {
  if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
  for (s++; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' ||
          (*s >= '0' && *s <= '9')))
      return false;
  return true;
}

bool fe_policy_parse(fe_model *m, const fe_value *v, ir_policy *out) {
  const char *s = name_of(v);
  if (s && ir_policy_from_name(s, strlen(s), out)) return true;
  const char *names[IR_POLICY_COUNT];
  int n = 0;
  for (int p = 1; p < IR_POLICY_COUNT; p++) names[n++] = ir_policy_name((ir_policy)p);
  const char *near = s ? fe_closest(s, names, n) : NULL;
  if (near)
    diag_error(m->d, v->loc, "unknown policy '%s'; did you mean '%s'?", s, near);
  else
    diag_error(m->d, v->loc,
               "unknown policy %s; expected float32, float16, bfloat16, mixed_float16 or "
               "mixed_bfloat16",
               value_desc(m, v));
  return false;
}

static bool parse_activation(fe_model *m, const fe_value *v, ir_op *out) {
  const char *s = name_of(v);
  const char *names[N_ACTIVATIONS_MAX];
  ir_op ops[N_ACTIVATIONS_MAX];
  int n = activation_names(names, ops);
  for (int i = 0; i < n; i++)
    if (s && str_eq(s, names[i])) return *out = ops[i], true;
  const char *near = s ? fe_closest(s, names, n) : NULL;
  if (near) {
    diag_error(m->d, v->loc, "unknown activation '%s'; did you mean '%s'?", s, near);
    return false;
  }
  str_buf list;
  str_buf_init(&list);
  for (int i = 0; i < n; i++) str_buf_printf(&list, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ", names[i]);
  diag_error(m->d, v->loc, "unknown activation %s; expected %s", value_desc(m, v), str_buf_cstr(&list));
  str_buf_fini(&list);
  return false;
}

static bool parse_positive(fe_model *m, const char *what, const fe_value *v, int64_t *out) {
  if (v->kind == FE_VAL_INT && v->ival > 0) return *out = v->ival, true;
  diag_error(m->d, v->loc, "%s must be a positive integer, got %s", what, value_desc(m, v));
  return false;
}

static bool parse_shape(fe_model *m, fe_layer *l, const fe_value *v) {
  if (v->kind != FE_VAL_LIST) {
    diag_error(m->d, v->loc, "shape must be a list of dimensions such as [28, 28], got %s",
               value_desc(m, v));
    return false;
  }
  if (v->n_items < 1 || v->n_items > IR_MAX_RANK - 1) {
    diag_error(m->d, v->loc,
               "shape must have 1 to %d dimensions (the batch dimension is implicit), got %d",
               IR_MAX_RANK - 1, v->n_items);
    return false;
  }
  ir_type t = {DT_F32, v->n_items + 1, {IR_DIM_BATCH}};
  for (int i = 0; i < v->n_items; i++)
    if (!parse_positive(m, "a dimension", &v->items[i], &t.dims[i + 1])) return false;
  int64_t bytes;
  if (!ir_type_bytes(&t, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    str_buf b;
    str_buf_init(&b);
    ir_type_print(&t, &b);
    diag_error(m->d, v->loc, "shape is too large: one example of %s takes more than %lld bytes",
               str_buf_cstr(&b), (long long)IR_MAX_TENSOR_BYTES);
    str_buf_fini(&b);
    return false;
  }
  l->rank = t.rank;
  memcpy(l->shape, t.dims, sizeof l->shape);
  l->shape_loc = v->loc;
  return true;
}

/* general tensors: a list of at most IR_MAX_RANK - 1 integers (reshape's
 * target_shape, permute's dims), checked further where it is lowered. */
static bool parse_ints(fe_model *m, fe_layer *l, const char *key, const fe_value *v) {
  if (v->kind != FE_VAL_LIST || v->n_items < 1 || v->n_items > IR_MAX_RANK - 1) {
    diag_error(m->d, v->loc, "%s must be a list of 1 to %d integers (the batch dimension is implicit), got %s", key,
               IR_MAX_RANK - 1, v->kind == FE_VAL_LIST ? arena_printf(m->arena, "%d", v->n_items) : value_desc(m, v));
    return false;
  }
  for (int i = 0; i < v->n_items; i++) {
    if (v->items[i].kind != FE_VAL_INT) {
      diag_error(m->d, v->items[i].loc, "%s must list integers, got %s", key, value_desc(m, &v->items[i]));
      return false;
    }
    l->ints[i] = v->items[i].ival;
  }
  l->n_ints = v->n_items, l->ints_loc = v->loc;
  return true;
}

/* convolutional networks: an int or a list of two, each > 0 (Keras's
 * kernel_size=3 or kernel_size=[3, 3]) */
static bool parse_pair(fe_model *m, const char *what, const fe_value *v, int64_t out[2]) {
  if (v->kind == FE_VAL_INT && v->ival > 0) return out[0] = out[1] = v->ival, true;
  if (v->kind == FE_VAL_LIST && v->n_items == 2)
    return parse_positive(m, what, &v->items[0], &out[0]) && parse_positive(m, what, &v->items[1], &out[1]);
  diag_error(m->d, v->loc, "%s must be a positive integer or a list of two, such as 3 or [3, 3], got %s", what,
             value_desc(m, v));
  return false;
}

/* convolutional networks: the 1D layers (conv1d, pooling), whose sizes are an int or a list of
 * one (Keras's kernel_size=3 or (3,)), kept as the 2D ops' [1, size] */
static bool is_1d(fe_layer_kind k) {
  return k == FE_LAYER_CONV1D || k == FE_LAYER_MAX_POOLING1D || k == FE_LAYER_AVERAGE_POOLING1D;
}

static bool parse_size(fe_model *m, const fe_layer *l, const char *what, const fe_value *v, int64_t out[2]) {
  if (!is_1d(l->kind)) return parse_pair(m, what, v, out);
  if (v->kind == FE_VAL_INT && v->ival > 0) return out[0] = 1, out[1] = v->ival, true;
  if (v->kind == FE_VAL_LIST && v->n_items == 1) return out[0] = 1, parse_positive(m, what, &v->items[0], &out[1]);
  diag_error(m->d, v->loc, "%s must be a positive integer or a list of one, such as 3 or [3], got %s", what,
             value_desc(m, v));
  return false;
}

static bool parse_nonneg(fe_model *m, const fe_value *v, int64_t *out) {
  if (v->kind == FE_VAL_INT && v->ival >= 0 && v->ival <= (1 << 20)) return *out = v->ival, true;
  diag_error(m->d, v->loc, "zero_padding2d padding must be integers >= 0, got %s", value_desc(m, v));
  return false;
}

/* Keras ZeroPadding2D's padding: p (all four sides), [h, w] (h above and
 * below, w left and right) or [[top, bottom], [left, right]]. */
static bool parse_zero_pads(fe_model *m, fe_layer *l, const fe_value *v) {
  int64_t *p = l->zero_pads;
  l->padding_loc = v->loc;
  if (v->kind == FE_VAL_INT) return parse_nonneg(m, v, &p[0]) && (p[1] = p[2] = p[3] = p[0], true);
  if (v->kind == FE_VAL_LIST && v->n_items == 2 && v->items[0].kind != FE_VAL_LIST && v->items[1].kind != FE_VAL_LIST)
    return parse_nonneg(m, &v->items[0], &p[0]) && parse_nonneg(m, &v->items[1], &p[2]) && (p[1] = p[0], p[3] = p[2], true);
  if (v->kind == FE_VAL_LIST && v->n_items == 2 && v->items[0].kind == FE_VAL_LIST && v->items[0].n_items == 2 &&
      v->items[1].kind == FE_VAL_LIST && v->items[1].n_items == 2)
    return parse_nonneg(m, &v->items[0].items[0], &p[0]) && parse_nonneg(m, &v->items[0].items[1], &p[1]) &&
           parse_nonneg(m, &v->items[1].items[0], &p[2]) && parse_nonneg(m, &v->items[1].items[1], &p[3]);
  diag_error(m->d, v->loc,
             "zero_padding2d padding must be an integer, [height, width] or [[top, bottom], [left, right]], got %s",
             value_desc(m, v));
  return false;
}

/* Checks one keyword attribute; false after reporting. */
static bool parse_attr(fe_model *m, fe_layer *l, const fe_arg *a) {
  const fe_value *v = &a->value;
  /* convolutional networks: grouped convolution, global pooling, zero padding, the 1D layers */
  if (str_eq(a->key, "padding") && l->kind == FE_LAYER_ZERO_PADDING2D) return parse_zero_pads(m, l, v);
  if (str_eq(a->key, "padding") && l->kind == FE_LAYER_CONV1D && str_eq(name_of(v), "causal"))
    return l->causal = true;
  if (is_1d(l->kind) && (str_eq(a->key, "kernel_size") || str_eq(a->key, "dilation_rate") ||
                         str_eq(a->key, "pool_size") || str_eq(a->key, "strides"))) {
    int64_t *out = str_eq(a->key, "kernel_size") ? l->kernel : str_eq(a->key, "dilation_rate") ? l->dilation
                   : str_eq(a->key, "pool_size") ? l->pool : l->strides;
    if (str_eq(a->key, "strides")) l->strides_given = true;
    if (str_eq(a->key, "pool_size")) l->pool_given = true;
    return parse_size(m, l, a->key, v, out);
  }
  if (str_eq(a->key, "groups")) {
    l->groups_loc = v->loc;
    return parse_positive(m, "groups", v, &l->groups);
  }
  if (str_eq(a->key, "depth_multiplier")) return parse_positive(m, "depth_multiplier", v, &l->depth_multiplier);
  if (str_eq(a->key, "keepdims")) {
    const char *s = v->kind == FE_VAL_IDENT ? v->str : NULL;
    if (str_eq(s, "true") || str_eq(s, "false")) return l->keepdims = str_eq(s, "true"), true;
    diag_error(m->d, v->loc, "keepdims must be true or false, got %s", value_desc(m, v));
    return false;
  }
  if (str_eq(a->key, "dtype") && l->kind == FE_LAYER_INPUT && str_eq(name_of(v), "int32"))
    return l->int32_input = true; /* general tensors: Keras Input(dtype="int32"), indices */
  if (str_eq(a->key, "dtype")) return fe_policy_parse(m, v, &l->policy);
  if (str_eq(a->key, "shape")) return parse_shape(m, l, v);
  if (str_eq(a->key, "activation")) return parse_activation(m, v, &l->act);
  if (str_eq(a->key, "units")) {
    l->units_loc = v->loc;
    return parse_positive(m, "units", v, &l->units);
  }
  if (str_eq(a->key, "use_bias")) {
    const char *s = v->kind == FE_VAL_IDENT ? v->str : NULL;
    if (str_eq(s, "true") || str_eq(s, "false")) return l->use_bias = str_eq(s, "true"), true;
    diag_error(m->d, v->loc, "use_bias must be true or false, got %s", value_desc(m, v));
    return false;
  }
  /* general tensors: layout layers */
  if (str_eq(a->key, "target_shape") || str_eq(a->key, "dims")) return parse_ints(m, l, a->key, v);
  if (str_eq(a->key, "input_dim")) {
    l->input_dim_loc = v->loc;
    return parse_positive(m, "input_dim", v, &l->input_dim);
  }
  if (str_eq(a->key, "output_dim")) return parse_positive(m, "output_dim", v, &l->output_dim);
  if (str_eq(a->key, "axis") && l->kind == FE_LAYER_LAYER_NORMALIZATION && v->kind == FE_VAL_LIST)
    return parse_ints(m, l, "axis", v); /* Keras LayerNormalization(axis=[1, 2]) */
  if (str_eq(a->key, "axis")) {
    if (v->kind != FE_VAL_INT) {
      diag_error(m->d, v->loc, "axis must be an integer, got %s", value_desc(m, v));
      return false;
    }
    l->axis = v->ival, l->axis_loc = v->loc;
    return true;
  }
  /* convolutional networks */
  if (str_eq(a->key, "filters")) {
    l->filters_loc = v->loc;
    return parse_positive(m, "filters", v, &l->filters);
  }
  if (str_eq(a->key, "kernel_size")) return parse_pair(m, "kernel_size", v, l->kernel);
  if (str_eq(a->key, "dilation_rate")) return parse_pair(m, "dilation_rate", v, l->dilation);
  if (str_eq(a->key, "pool_size")) return parse_pair(m, "pool_size", v, l->pool);
  if (str_eq(a->key, "strides")) return l->strides_given = true, parse_pair(m, "strides", v, l->strides);
  if (str_eq(a->key, "padding")) {
    const char *s = name_of(v);
    if (str_eq(s, "valid") || str_eq(s, "same")) return l->same = str_eq(s, "same"), true;
    diag_error(m->d, v->loc, "padding must be valid or same%s, got %s", l->kind == FE_LAYER_CONV1D ? " or causal" : "",
               value_desc(m, v));
    return false;
  }
  /* CNN: batch_normalization */
  if (str_eq(a->key, "momentum") || str_eq(a->key, "epsilon")) {
    bool mom = str_eq(a->key, "momentum");
    double x = v->dval;
    if ((v->kind != FE_VAL_FLOAT && v->kind != FE_VAL_INT) || (mom ? !(x >= 0 && x < 1) : !(x > 0 && x <= 1))) {
      diag_error(m->d, v->loc, mom ? "momentum must be a number in [0, 1), got %s" : "epsilon must be a number in (0, 1], got %s",
                 value_desc(m, v));
      return false;
    }
    if (mom) l->momentum = x, l->momentum_loc = v->loc;
    else l->epsilon = x, l->epsilon_loc = v->loc;
    return true;
  }
  if (str_eq(a->key, "center") || str_eq(a->key, "scale")) {
    const char *s = v->kind == FE_VAL_IDENT ? v->str : NULL;
    if (!str_eq(s, "true") && !str_eq(s, "false")) {
      diag_error(m->d, v->loc, "%s must be true or false, got %s", a->key, value_desc(m, v));
      return false;
    }
    *(str_eq(a->key, "center") ? &l->center : &l->scale) = str_eq(s, "true");
    return true;
  }
  /* general tensors: dropout */
  if (str_eq(a->key, "rate")) {
    if ((v->kind != FE_VAL_INT && v->kind != FE_VAL_FLOAT) ||
        !((v->kind == FE_VAL_INT ? (double)v->ival : v->dval) >= 0 && (v->kind == FE_VAL_INT ? (double)v->ival : v->dval) < 1)) {
      diag_error(m->d, v->loc, "rate must be a number in [0, 1) (the fraction of inputs dropped), got %s",
                 value_desc(m, v));
      return false;
    }
    l->rate = v->kind == FE_VAL_INT ? (double)v->ival : v->dval, l->rate_loc = v->loc;
    return true;
  }
  if (str_eq(a->key, "seed")) {
    if (v->kind != FE_VAL_INT) {
      diag_error(m->d, v->loc, "seed must be an integer, got %s", value_desc(m, v));
      return false;
    }
    l->seed = v->ival, l->seed_given = true;
    return true;
  }
  /* general tensors: multi_head_attention */
  if (str_eq(a->key, "num_heads")) {
    l->num_heads_loc = v->loc;
    return parse_positive(m, "num_heads", v, &l->num_heads);
  }
  if (str_eq(a->key, "key_dim")) return parse_positive(m, "key_dim", v, &l->key_dim);
  if (str_eq(a->key, "value_dim")) return parse_positive(m, "value_dim", v, &l->value_dim);
  if (str_eq(a->key, "sequence_length")) return parse_positive(m, "sequence_length", v, &l->sequence_length);
  /* attention masks: multi_head_attention's attention_mask (a value, the layer's last input) and use_causal_mask */
  if (str_eq(a->key, "attention_mask")) {
    if (v->kind != FE_VAL_IDENT) {
      diag_error(m->d, v->loc, "attention_mask must name a value (an input [N, query steps, value steps]), got %s",
                 value_desc(m, v));
      return false;
    }
    if (l->n_inputs >= IR_MAX_SRCS) {
      diag_error(m->d, v->loc, "multi_head_attention takes at most %d inputs with its attention_mask", IR_MAX_SRCS);
      return false;
    }
    l->inputs[l->n_inputs++] = (fe_use){.var = v->str, .loc = v->loc};
    l->mask_input = true;
    return true;
  }
  if (str_eq(a->key, "use_causal_mask")) {
    const char *s = v->kind == FE_VAL_IDENT ? v->str : NULL;
    if (str_eq(s, "true") || str_eq(s, "false")) return l->use_causal_mask = str_eq(s, "true"), true;
    diag_error(m->d, v->loc, "use_causal_mask must be true or false, got %s", value_desc(m, v));
    return false;
  }
  /* recurrent layers and masks: Keras config keys the library reads and checks (frontend/layers/rnn.c,
   * mask.c, core.c; its errors point at the value) */
  if (str_eq(a->key, "recurrent_activation") || str_eq(a->key, "return_sequences") ||
      str_eq(a->key, "go_backwards") || str_eq(a->key, "reset_after") || str_eq(a->key, "layer") ||
      str_eq(a->key, "return_state") ||
      str_eq(a->key, "merge_mode") || str_eq(a->key, "mask_value") || str_eq(a->key, "mask_zero"))
    return true;
  if (str_eq(a->key, "name")) {
    const char *s = name_of(v);
    if (!s || !is_identifier(s)) {
      diag_error(m->d, v->loc, "a layer name must be an identifier, got %s", value_desc(m, v));
      return false;
    }
    l->name = s;
    l->name_loc = v->loc;
    l->explicit_name = true;
    return true;
  }
  return true; /* a config key of its library row that .cast does not read: the library checks it */
}

/* Matches the arguments of a call of a known kind; false after reporting. */
static bool check_call(fe_model *m, fe_layer *l, const fe_call *c) {
  const struct layer_spec *sp = &specs[l->kind];
  int n_pos = 0;
  bool has_act = false;
  for (int i = 0; i < c->n_args; i++) {
    const fe_arg *a = &c->args[i];
    if (a->key) continue;
    const fe_value *v = &a->value;
    bool variadic = sp->n_inputs == FE_INPUTS_2_OR_MORE;
    if (variadic && n_pos == IR_MAX_SRCS) {
      diag_error(m->d, v->loc, "%s takes at most %d inputs", sp->name, IR_MAX_SRCS);
      return false;
    }
    if (n_pos < sp->n_inputs || variadic) {
      if (v->kind != FE_VAL_IDENT) {
        diag_error(m->d, v->loc, "expected the name of a value as input of %s, got %s", sp->name,
                   value_desc(m, v));
        return false;
      }
      l->inputs[n_pos] = (fe_use){.var = v->str, .loc = v->loc};
    } else if (l->kind == FE_LAYER_ACTIVATION && n_pos == 1) {
      if (!parse_activation(m, v, &l->act)) return false;
      has_act = true;
    } else {
      int max = sp->n_inputs + (l->kind == FE_LAYER_ACTIVATION), total = 0;
      for (int j = 0; j < c->n_args; j++) total += c->args[j].key == NULL;
      diag_error(m->d, v->loc, "%s takes %d positional argument%s (%s), got %d", sp->name, max,
                 max == 1 ? "" : "s", sp->positional, total);
      return false;
    }
    n_pos++;
  }
  if (sp->n_inputs == FE_INPUTS_2_OR_MORE && n_pos < 2) {
    diag_error(m->d, c->callee_loc, "%s needs 2 or more inputs, got %d", sp->name, n_pos);
    return false;
  }
  if (n_pos < sp->n_inputs) {
    diag_error(m->d, c->callee_loc, "%s needs %d input%s, got %d", sp->name, sp->n_inputs,
               sp->n_inputs == 1 ? "" : "s", n_pos);
    return false;
  }
  l->n_inputs = sp->n_inputs == FE_INPUTS_2_OR_MORE ? n_pos : sp->n_inputs;

  /* its attributes, then (a layer of the library) the other config keys of its library row, which
   * the library reads and checks */
  const char *attrs[MAX_LIBRARY_KEYS];
  int n_attrs = 0;
  while (n_attrs < MAX_ATTRS && sp->attrs[n_attrs]) n_attrs++;
  n_attrs = library_keys(keras_classes[l->kind] ? fl_layer_row(keras_classes[l->kind]) : -1, sp->attrs, n_attrs,
                         attrs);
  bool seen[MAX_LIBRARY_KEYS] = {false};
  diag_loc seen_loc[MAX_LIBRARY_KEYS];
  for (int i = 0; i < c->n_args; i++) {
    const fe_arg *a = &c->args[i];
    if (!a->key) continue;
    int k = 0;
    while (k < n_attrs && !str_eq(attrs[k], a->key)) k++;
    if (k == n_attrs) {
      const char *near = fe_closest(a->key, attrs, n_attrs);
      if (near)
        diag_error(m->d, a->key_loc, "%s has no attribute '%s'; did you mean '%s'?", sp->name,
                   a->key, near);
      else
        diag_error(m->d, a->key_loc, "%s has no attribute '%s'", sp->name, a->key);
      return false;
    }
    bool dup_act = str_eq(a->key, "activation") && has_act;
    if (seen[k] || dup_act) {
      diag_error(m->d, a->key_loc, "%s given twice", a->key);
      if (seen[k]) diag_note(m->d, seen_loc[k], "first given here");
      return false;
    }
    seen[k] = true;
    seen_loc[k] = a->key_loc;
    if (!parse_attr(m, l, a)) return false;
    if (str_eq(a->key, "activation")) has_act = true;
  }

  if (l->kind == FE_LAYER_INPUT && l->rank == 0) {
    diag_error(m->d, c->callee_loc, "input needs a shape, e.g. input(shape=[784])");
    return false;
  }
  if (l->kind == FE_LAYER_DENSE && l->units == 0) {
    diag_error(m->d, c->callee_loc, "dense needs units=, the number of output features");
    return false;
  }
  /* convolutional networks: Keras's required arguments; pooling's strides default to its pool_size */
  if (l->kind == FE_LAYER_CONV2D && (l->filters == 0 || l->kernel[0] == 0)) {
    diag_error(m->d, c->callee_loc, "conv2d needs filters= and kernel_size=, e.g. conv2d(x, filters=32, kernel_size=3)");
    return false;
  }
  if ((l->kind == FE_LAYER_MAX_POOLING2D || l->kind == FE_LAYER_AVERAGE_POOLING2D) && !l->strides_given)
    l->strides[0] = l->pool[0], l->strides[1] = l->pool[1];
  /* convolutional networks: the other layers' required arguments; the 1D layers' unit height */
  if ((l->kind == FE_LAYER_SEPARABLE_CONV2D || l->kind == FE_LAYER_CONV1D) && (l->filters == 0 || l->kernel[0] == 0)) {
    diag_error(m->d, c->callee_loc, "%s needs filters= and kernel_size=, e.g. %s(x, filters=32, kernel_size=3)",
               kind_names[l->kind], kind_names[l->kind]);
    return false;
  }
  if (l->kind == FE_LAYER_DEPTHWISE_CONV2D && l->kernel[0] == 0) {
    diag_error(m->d, c->callee_loc, "depthwise_conv2d needs kernel_size=, e.g. depthwise_conv2d(x, kernel_size=3)");
    return false;
  }
  if (l->kind == FE_LAYER_AVERAGE_POOLING1D && !l->pool_given) { /* Keras 3: no default */
    diag_error(m->d, c->callee_loc, "average_pooling1d needs pool_size=, e.g. average_pooling1d(x, pool_size=2)");
    return false;
  }
  if (is_1d(l->kind)) {
    l->kernel[0] = l->pool[0] = l->strides[0] = l->dilation[0] = 1;
    if (!l->strides_given) l->strides[1] = l->kind == FE_LAYER_CONV1D ? 1 : l->pool[1];
  }
  if (l->kind == FE_LAYER_ACTIVATION && !has_act) {
    diag_error(m->d, c->callee_loc,
               "activation needs a function, e.g. activation(x, relu)");
    return false;
  }
  if (l->kind == FE_LAYER_MULTI_HEAD_ATTENTION && (!l->num_heads || !l->key_dim)) {
    diag_error(m->d, c->callee_loc, "multi_head_attention needs num_heads= and key_dim=, as Keras's MultiHeadAttention");
    return false;
  }
  /* general tensors: layout layers */
  if (l->kind == FE_LAYER_EMBEDDING && (l->input_dim == 0 || l->output_dim == 0)) {
    diag_error(m->d, c->callee_loc, "embedding needs input_dim= (the vocabulary size) and output_dim=");
    return false;
  }
  if ((l->kind == FE_LAYER_RESHAPE || l->kind == FE_LAYER_PERMUTE) && l->n_ints == 0) {
    diag_error(m->d, c->callee_loc, l->kind == FE_LAYER_RESHAPE ? "reshape needs target_shape=, e.g. target_shape=[4, 6]"
                                                                 : "permute needs dims=, e.g. dims=[2, 1]");
    return false;
  }
  return true;
}

/* A layer of the library without a row in layers.def (FE_LAYER_LIBRARY): spelled as its library row
 * says (fl_row_cast_name), its positional arguments its inputs (fl_row_n_inputs), its keywords its
 * row's config keys (fl_row_cast_key), name and dtype. The library checks their values when it
 * lowers the call (its errors point at the value), so a layer added there is a .cast layer too. */
static bool check_library_call(fe_model *m, fe_layer *l, const fe_call *c) {
  const char *name = l->kind_name;
  int want = fl_row_n_inputs(l->lib_row), least = want < 0 ? -want : want, n_pos = 0, total = 0;
  for (int i = 0; i < c->n_args; i++) total += c->args[i].key == NULL;
  for (int i = 0; i < c->n_args; i++) {
    const fe_value *v = &c->args[i].value;
    if (c->args[i].key) continue;
    if (want >= 0 && n_pos == want) {
      diag_error(m->d, v->loc, "%s takes %d positional argument%s (%s), got %d", name, want, want == 1 ? "" : "s",
                 want == 1 ? "its input" : "its inputs", total);
      return false;
    }
    if (n_pos == IR_MAX_SRCS) {
      diag_error(m->d, v->loc, "%s takes at most %d inputs", name, IR_MAX_SRCS);
      return false;
    }
    if (v->kind != FE_VAL_IDENT) {
      diag_error(m->d, v->loc, "expected the name of a value as input of %s, got %s", name, value_desc(m, v));
      return false;
    }
    l->inputs[n_pos++] = (fe_use){.var = v->str, .loc = v->loc};
  }
  if (n_pos < least) {
    diag_error(m->d, c->callee_loc, "%s needs %d%s input%s, got %d", name, least, want < 0 ? " or more" : "",
               least == 1 && want >= 0 ? "" : "s", n_pos);
    return false;
  }
  l->n_inputs = n_pos;

  const char *keys[MAX_LIBRARY_KEYS];
  int n_keys = library_keys(l->lib_row, NULL, 0, keys);
  const fe_arg *seen[MAX_LIBRARY_KEYS] = {NULL};
  for (int i = 0; i < c->n_args; i++) {
    const fe_arg *a = &c->args[i];
    if (!a->key) continue;
    int k = 0;
    while (k < n_keys && !str_eq(keys[k], a->key)) k++;
    if (k == n_keys) {
      const char *near = fe_closest(a->key, keys, n_keys);
      if (near) {
        diag_error(m->d, a->key_loc, "%s has no attribute '%s'; did you mean '%s'?", name, a->key, near);
      } else {
        str_buf list;
        str_buf_init(&list);
        for (int j = 0; j < n_keys; j++) str_buf_printf(&list, "%s%s", j == 0 ? "" : j + 1 == n_keys ? " or " : ", ", keys[j]);
        diag_error(m->d, a->key_loc, "%s has no attribute '%s'; it takes %s", name, a->key, str_buf_cstr(&list));
        str_buf_fini(&list);
      }
      return false;
    }
    if (seen[k]) {
      diag_error(m->d, a->key_loc, "%s given twice", a->key);
      diag_note(m->d, seen[k]->key_loc, "first given here");
      return false;
    }
    seen[k] = a;
    if ((str_eq(a->key, "name") || str_eq(a->key, "dtype")) && !parse_attr(m, l, a)) return false;
  }
  return true;
}

static fe_layer *new_layer(fe_model *m, const fe_call *c) {
  fe_layer *l = arena_alloc(m->arena, sizeof *l);
  *l = (fe_layer){.kind = FE_LAYER_COUNT, .seq = c->seq, .index = (int)m->layers.len,
                  .var = c->var, .var_loc = c->var_loc, .loc = c->callee_loc,
                  .name_loc = c->callee_loc, .act = IR_OP_COUNT, .use_bias = true, .axis = -1,
                  .axis_loc = c->callee_loc,
                  .strides = {1, 1}, .dilation = {1, 1}, .pool = {2, 2}, /* Keras's defaults */
                  .momentum = 0.99, .epsilon = 1e-3, .center = true, .scale = true, /* CNN: BatchNormalization's */
                  .groups = 1, .depth_multiplier = 1, .zero_pads = {1, 1, 1, 1}};
  vec_push(&m->layers, l);
  return l;
}

void fe_layer_add_broken(fe_model *m, const fe_call *c) { new_layer(m, c)->broken = true; }

void fe_layer_add(fe_model *m, const fe_call *c) {
  fe_layer *l = new_layer(m, c);
  for (int k = 0; k < FE_LAYER_COUNT; k++)
    if (str_eq(c->callee, kind_names[k])) l->kind = (fe_layer_kind)k, l->kind_name = kind_names[k];
  if (l->kind < FE_LAYER_COUNT && keras_classes[l->kind]) { /* a row of layers.def spells its class as the library does */
    char spelled[FL_CAST_NAME_MAX];
    int row = fl_layer_row(keras_classes[l->kind]);
    CASTOR_ASSERT(row >= 0 && fl_row_cast_name(row, spelled) && str_eq(spelled, l->kind_name));
  }
  if (l->kind == FE_LAYER_COUNT && (l->lib_row = library_row(c->callee)) >= 0)
    l->kind = FE_LAYER_LIBRARY, l->kind_name = arena_strdup(m->arena, c->callee);
  if (l->kind == FE_LAYER_COUNT) {
    const char **names = arena_alloc(m->arena, ((size_t)FE_LAYER_COUNT + (size_t)fl_layer_rows()) * sizeof *names);
    int n = all_layer_names(m, names); /* every layer of layers.def, in its order, then the library's others */
    const char *near = fe_closest(c->callee, names, n);
    if (near)
      diag_error(m->d, c->callee_loc, "unknown layer '%s'; did you mean '%s'?", c->callee, near);
    else {
      str_buf list;
      str_buf_init(&list);
      for (int k = 0; k < n; k++) str_buf_printf(&list, "%s%s", k == 0 ? "" : k + 1 == n ? " or " : ", ", names[k]);
      diag_error(m->d, c->callee_loc, "unknown layer '%s'; expected %s", c->callee, str_buf_cstr(&list));
      str_buf_fini(&list);
    }
    l->broken = true;
    return;
  }
  if (l->kind == FE_LAYER_INPUT) {
    l->name = l->var;
    l->name_loc = l->var_loc;
    l->explicit_name = true;
  }
  if (!(l->kind == FE_LAYER_LIBRARY ? check_library_call(m, l, c) : check_call(m, l, c))) {
    l->broken = true;
    l->n_inputs = 0;
  }
  l->args = c->args, l->n_args = c->n_args; /* host.c: the Keras config and where each key was written */
}

/* ---- names ---- */

void fe_layers_name(fe_model *m) {
  hmap taken; /* layer name -> its first layer */
  hmap_init(&taken, HMAP_STRINGS);
  /* Duplicates among the names the user chose (explicit and inputs). */
  for (size_t i = 0; i < m->layers.len; i++) {
    fe_layer *l = m->layers.data[i];
    if (!l->explicit_name) continue;
    fe_layer *prev = hmap_get_str(&taken, l->name, strlen(l->name));
    if (!prev) {
      hmap_put_str(&taken, l->name, strlen(l->name), l);
      continue;
    }
    if (fe_error_limit(m)) break;
    diag_error(m->d, l->name_loc, "duplicate layer name '%s'", l->name);
    diag_note(m->d, prev->name_loc, "the first layer named '%s' is here", l->name);
    l->broken = true;
    l->n_inputs = 0;
  }
  /* Keras-style automatic names, skipping the ones the user took. */
  int counter[FE_LAYER_COUNT] = {0};
  int *lib_counter = arena_alloc(m->arena, (size_t)fl_layer_rows() * sizeof *lib_counter); /* FE_LAYER_LIBRARY's */
  for (size_t i = 0; i < m->layers.len; i++) {
    fe_layer *l = m->layers.data[i];
    if (l->explicit_name || l->kind == FE_LAYER_COUNT) continue;
    const char *kind = l->kind_name;
    int *count = l->kind == FE_LAYER_LIBRARY ? &lib_counter[l->lib_row] : &counter[l->kind];
    for (;;) {
      int k = (*count)++;
      const char *cand = k == 0 ? kind : arena_printf(m->arena, "%s_%d", kind, k);
      if (!hmap_get_str(&taken, cand, strlen(cand))) {
        l->name = cand;
        hmap_put_str(&taken, cand, strlen(cand), l);
        break;
      }
    }
  }
  hmap_fini(&taken);
}
