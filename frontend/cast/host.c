/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host.c: the .cast frontend as a host of the Keras layer library
 * (frontend/layers/). A layer call's keyword attributes (checked by
 * layers.c against the .cast syntax) become its Keras config object, key
 * for key (the .cast attributes are Keras's config keys): an identifier
 * true/false/null a JSON literal, another identifier or a string a JSON
 * string, numbers and lists as they are; activation(x, f)'s function is
 * the key "activation". name, dtype, attention_mask and use_causal_mask
 * are not config (the layer's name, its policy, an input, a call
 * argument). The library lowers it; this file answers its questions:
 *
 *   weights   by key (NAME.kernel) from the weights file, or Keras's
 *             initializer (weights.c's Glorot, zeros, ones, uniform)
 *   errors    at the attribute the message is about (its value), the
 *             input it names, or the layer call, worded as .cast's
 *             messages always were ("conv2d needs an input ...")
 *   stamps    the layer's name as note and layer, its dtype= as policy
 */
#include "frontend/cast/internal.h"

#include <math.h>
#include <string.h>

static json_value to_json(arena *a, const fe_value *v) {
  json_value j = {0};
  switch (v->kind) {
  case FE_VAL_IDENT:
    if (str_eq(v->str, "true") || str_eq(v->str, "false") || str_eq(v->str, "null")) {
      j.kind = JSON_LIT, j.lit = v->str[0];
      break;
    }
    /* fallthrough */
  case FE_VAL_STRING: j.kind = JSON_STR, j.s = v->str; break;
  case FE_VAL_INT: j.kind = JSON_INT, j.i = v->ival, j.num = (double)v->ival; break;
  case FE_VAL_FLOAT: j.kind = JSON_FLOAT, j.num = v->dval; break;
  case FE_VAL_LIST:
    j.kind = JSON_ARR, j.n = v->n_items;
    j.items = arena_alloc(a, ((size_t)v->n_items + 1) * sizeof *j.items);
    for (int i = 0; i < v->n_items; i++) j.items[i] = to_json(a, &v->items[i]);
    break;
  }
  return j;
}

static bool is_config(const char *key) {
  return !str_eq(key, "name") && !str_eq(key, "dtype") && !str_eq(key, "attention_mask") &&
         !str_eq(key, "use_causal_mask") && !str_eq(key, "shape");
}

/* The layer's Keras config: its attributes, and activation's positional function. */
static json_value *config_of(arena *a, const fe_layer *l) {
  json_value *o = arena_alloc(a, sizeof *o);
  *o = (json_value){.kind = JSON_OBJ};
  o->items = arena_alloc(a, ((size_t)l->n_args + 1) * sizeof *o->items);
  o->keys = arena_alloc(a, ((size_t)l->n_args + 1) * sizeof *o->keys);
  int n_pos = 0;
  for (int i = 0; i < l->n_args; i++) {
    const fe_arg *arg = &l->args[i];
    const char *key = arg->key;
    if (!key && l->kind == FE_LAYER_ACTIVATION && n_pos++ == 1) key = "activation";
    if (!key || !is_config(key)) continue;
    o->keys[o->n] = key;
    o->items[o->n++] = to_json(a, &arg->value);
  }
  return o;
}

/* Where a message about `key` points: the attribute's value, an input, or the call. */
static diag_loc loc_of(const fe_layer *l, const char *key) {
  if (!key) return l->loc;
  if (str_eq(key, "input")) return l->n_inputs ? l->inputs[0].loc : l->loc;
  if (str_eq(key, "mask")) return l->n_inputs ? l->inputs[l->n_inputs - 1].loc : l->loc;
  if (!strncmp(key, "input", 5) && key[5] >= '0' && key[5] <= '9' && !key[6]) {
    int i = key[5] - '0';
    return i < l->n_inputs ? l->inputs[i].loc : l->loc;
  }
  int n_pos = 0;
  for (int i = 0; i < l->n_args; i++) {
    const fe_arg *a = &l->args[i];
    if (a->key ? str_eq(a->key, key) : l->kind == FE_LAYER_ACTIVATION && n_pos++ == 1 && str_eq(key, "activation"))
      return a->value.loc;
  }
  return l->loc;
}

static void host_error(fl_host *h, fl_layer *fl, const char *key, fl_style style, bool unsupported, const char *msg) {
  (void)unsupported; /* .cast reports every layer error as an error of the model text */
  lowering *lw = h->fe;
  fe_layer *l = fl->fe;
  const char *kind = l->kind_name;
  diag_loc loc = loc_of(l, key);
  diag_sink *d = lw->m->d;
  switch (style) {
  case FL_PLAIN: diag_error(d, loc, "%s", msg); break;
  case FL_KIND: diag_error(d, loc, "%s %s", kind, msg); break;
  case FL_KIND_RULE: diag_error(d, loc, "%s: %s", kind, msg); break;
  case FL_NAME_RULE: diag_error(d, loc, "%s: %s", l->name, msg); break;
  case FL_ITS:
    if (!strncmp(msg, "its ", 4)) diag_error(d, loc, "%s's %s", kind, msg + 4);
    else diag_error(d, loc, "%s %s", kind, msg);
    break;
  }
}

/* Weights skipped after earlier errors have no data; the graph is discarded. */
static const float no_data[1];

static const float *host_weight(fl_host *h, fl_layer *fl, const char *sub, int index, int order, const char *key,
                                const char *what, const ir_type *t, fl_init init) {
  (void)sub, (void)index, (void)order, (void)what;
  lowering *lw = h->fe;
  fe_layer *l = fl->fe;
  const float *data = NULL;
  if (!fe_weights_get(&lw->w, lw->g, key, t, init == FL_INIT_ONES, l->name, l->loc, &data)) return NULL;
  if (!data) return no_data;
  int64_t n = 1;
  for (int r = 0; r < t->rank; r++) n *= t->dims[r];
  if (!lw->w.from_file && init == FL_INIT_ZEROS && t->rank > 1) /* Keras's zeros, not a kernel's Glorot */
    memset((float *)data, 0, (size_t)n * sizeof(float));
  if (!lw->w.from_file && init == FL_INIT_UNIFORM && t->rank == 2) { /* Glorot's U(-limit, limit) as U(-0.05, 0.05) */
    float scale = (float)(0.05 / sqrt(6.0 / ((double)t->dims[0] + (double)t->dims[1])));
    for (int64_t i = 0; i < n; i++) ((float *)data)[i] *= scale;
  }
  if (!lw->w.from_file && init == FL_INIT_ORTHOGONAL)
    fe_weights_orthogonal(&lw->w, key, t, (float *)data, l->name, l->loc);
  if (!lw->w.from_file && init == FL_INIT_UNIT_FORGET_BIAS && t->rank == 1) /* gates i, f, c, o */
    for (int64_t i = n / 4; i < n / 2; i++) ((float *)data)[i] = 1.0f;
  if (!lw->w.from_file && init == FL_INIT_CONSTANT)
    for (int64_t i = 0; i < n; i++) ((float *)data)[i] = (float)h->init_constant;
  return data;
}

static ir_node *host_stamp(fl_host *h, const fl_layer *fl, ir_node *n) {
  return fe_stamp(h->fe, (fe_layer *)fl->fe, n);
}

void fe_host_init(lowering *lw) {
  lw->host = (fl_host){.g = lw->g, .arena = lw->m->arena, .fe = lw, .weight = host_weight, .error = host_error,
                       .stamp = host_stamp};
}

bool fe_lower_library(lowering *lw, fe_layer *l, const char *keras_class, ir_node **in) {
  fl_layer fl = {.row = fl_layer_row(keras_class), .cls = keras_class, .name = l->name, .ir_name = l->name,
                 .cfg = config_of(lw->m->arena, l), .index = l->index, .loc = l->loc, .fe = l};
  CASTOR_ASSERT(fl.row >= 0);
  if (!fl_layer_check(&lw->host, &fl)) return false; /* a value its row's rule refuses (data_format=channels_first) */
  /* the mask its first input carries, as Keras passes it from layer to layer (fl_row_mask's rule) */
  const fe_layer *pl = l->n_inputs ? l->inputs[0].def : NULL;
  ir_node *pm = pl ? pl->mask : NULL, *ins[IR_MAX_SRCS + 1];
  fl_mask_rule rule = fl_row_mask(fl.row);
  int n_in = l->n_inputs, mask_at = l->mask_input ? l->n_inputs : 0;
  memcpy(ins, in, (size_t)n_in * sizeof *in);
  if (pm && rule == FL_MASK_TAKES) ins[n_in++] = pm, mask_at = n_in;
  if (pm && rule == FL_MASK_REFUSES) {
    diag_error_kind(lw->m->d, DIAG_KIND_UNSUPPORTED, l->inputs[0].loc,
                    "%s: '%s' carries the mask of layer '%s', and castor does not compute %s with a mask (Keras's "
                    "result depends on it)", l->kind_name, l->inputs[0].var, pl->mask_from, keras_class);
    return false;
  }
  if (pm && rule == FL_MASK_DROPS)
    diag_warning(lw->m->d, l->loc, "%s does not support masking: the mask of layer '%s' stops here, as Keras 3 "
                 "destroys it", l->kind_name, pl->mask_from);
  fl_call c = {.in = ins, .n_in = n_in, .mask_at = mask_at, .causal = l->use_causal_mask};
  if (!fl_layer_lower(&lw->host, &fl, &c)) return false;
  l->mask = rule == FL_MASK_PASSES ? pm : rule == FL_MASK_MAKES || rule == FL_MASK_TAKES ? c.out_mask : NULL;
  l->mask_from = !l->mask ? NULL : rule == FL_MASK_MAKES ? l->name : pl->mask_from;
  if (c.n_outs > 1) { /* a recurrent layer's return_state, Bidirectional's merge_mode=null */
    bool state = fl_cfg(&fl, "return_state") && fl_cfg(&fl, "return_state")->kind == JSON_LIT &&
                 fl_cfg(&fl, "return_state")->lit == 't';
    diag_error(lw->m->d, loc_of(l, state ? "return_state" : "merge_mode"),
               "%s gives %d values here; a .cast assignment names one (a .keras model can use them all)",
               state ? "return_state=true" : "merge_mode=null", c.n_outs);
    return false;
  }
  l->value = c.out;
  return true;
}
