/* SPDX-License-Identifier: Apache-2.0 */
/*
 * table.c: the layer library's table, one row per Keras class of
 * layers.def (its config keys and its lowering function), the check of a
 * layer's config keys against its row, and the dispatch of a call to its
 * lowering. A class without a row is the host's to report (it names the
 * class, the layer and fl_supported_list()).
 */
#include "frontend/layers/internal.h"

#include <stdio.h>
#include <string.h>

typedef struct key_spec {
  const char *key;
  key_rule rule;
} key_spec;

typedef bool (*fl_lower_fn)(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in);

enum { MAX_KEYS = 24 };

typedef struct layer_row {
  const char *cls;
  fl_lower_fn lower;
  key_spec keys[MAX_KEYS];
} layer_row;

/* Keys every layer has. */
static const key_spec common[] = {{"name", KEY_ANY}, {"trainable", KEY_TRUE}, {"dtype", KEY_ANY}};

static const layer_row rows[] = {
#define LAYER(cls, lower, ...) {#cls, lower, {__VA_ARGS__}},
#include "frontend/layers/layers.def"
#undef LAYER
};
enum { N_ROWS = sizeof rows / sizeof *rows };

int fl_layer_row(const char *cls) {
  for (int i = 0; i < N_ROWS; i++)
    if (!strcmp(rows[i].cls, cls)) return i;
  return -1;
}

int fl_layer_rows(void) { return N_ROWS; }
const char *fl_row_class(int row) { return rows[row].cls; }
bool fl_row_takes_indices(int row) {
  return rows[row].lower == fl_lower_embedding || rows[row].lower == fl_lower_not_equal ||
         rows[row].lower == fl_lower_any || rows[row].lower == fl_lower_cast_op;
}
bool fl_row_is_input(int row) { return rows[row].lower == fl_lower_input; }

/* The rows of the functional API's op nodes (keras.src.ops), which are not layers a model calls by name. */
static bool is_op_node(int row) {
  fl_lower_fn f = rows[row].lower;
  return f == fl_lower_true_divide || f == fl_lower_not_equal || f == fl_lower_any || f == fl_lower_cast_op;
}

/* Keras's to_snake_case (keras.src.utils.naming): '_' before a capital that
 * starts a capitalized word (Conv2D_Transpose) or follows a lower-case letter
 * (Re_LU), then lower case: the name Keras gives a layer, and .cast's. */
static void snake_case(const char *cls, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; cls[i] && o + 2 < cap; i++) {
    char c = cls[i];
    bool upper = c >= 'A' && c <= 'Z';
    bool next_lower = cls[i + 1] >= 'a' && cls[i + 1] <= 'z', prev_lower = i && cls[i - 1] >= 'a' && cls[i - 1] <= 'z';
    if (i && upper && (next_lower || prev_lower) && out[o - 1] != '_') out[o++] = '_';
    out[o++] = upper ? (char)(c - 'A' + 'a') : c;
  }
  out[o] = 0;
}

bool fl_row_cast_name(int row, char out[FL_CAST_NAME_MAX]) {
  out[0] = 0;
  if (is_op_node(row)) return false;
  if (fl_row_is_input(row)) snprintf(out, FL_CAST_NAME_MAX, "input"); /* .cast's input(shape=...), Keras's Input */
  else snake_case(rows[row].cls, out, FL_CAST_NAME_MAX);
  return true;
}

int fl_layer_row_cast(const char *cast_name) {
  char n[FL_CAST_NAME_MAX];
  for (int i = 0; i < N_ROWS; i++)
    if (fl_row_cast_name(i, n) && !strcmp(n, cast_name)) return i;
  return -1;
}

/* A key a .cast call may give: not a regularizer's or constraint's (KEY_NULL:
 * a .cast model has none), not one that chooses an initializer (a .cast
 * model without a weights file starts each weight as Keras's default
 * initializer does, which such a key would not change) and not
 * Bidirectional's backward_layer (a layer's config object; .cast's
 * bidirectional names its layer with layer= and its keys beside it). */
static bool cast_key(const key_spec *k) {
  size_t n = strlen(k->key), s = sizeof "_initializer" - 1;
  return k->rule != KEY_NULL && !(n > s && !strcmp(k->key + n - s, "_initializer")) &&
         strcmp(k->key, "unit_forget_bias") != 0 && strcmp(k->key, "backward_layer") != 0;
}

const char *fl_row_cast_key(int row, int i) {
  for (int c = 0; c < MAX_KEYS && rows[row].keys[c].key; c++)
    if (cast_key(&rows[row].keys[c]) && i-- == 0) return rows[row].keys[c].key;
  return NULL;
}

int fl_row_n_inputs(int row) {
  fl_lower_fn f = rows[row].lower;
  if (f == fl_lower_input) return 0;
  if (f == fl_lower_custom_scale || f == fl_lower_subtract || f == fl_lower_true_divide ||
      f == fl_lower_not_equal)
    return 2;
  if (f == fl_lower_add || f == fl_lower_multiply || f == fl_lower_maximum || f == fl_lower_minimum ||
      f == fl_lower_concatenate || f == fl_lower_multi_head_attention)
    return -2;
  if (f == fl_lower_rnn || f == fl_lower_bidirectional) return -1; /* and its initial states */
  return 1;
}

const char *fl_supported_list(void) {
  static char list[2048];
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
  case KEY_NULL: return fl_is_null(v);
  case KEY_TRUE: return v->kind == JSON_LIT && v->lit == 't';
  case KEY_FALSE: return v->kind == JSON_LIT && v->lit == 'f';
  case KEY_ZERO: return (v->kind == JSON_INT || v->kind == JSON_FLOAT) && v->num == 0;
  case KEY_LAST_AXIS:
    if (v->kind == JSON_ARR && v->n == 1) v = &v->items[0];
    return v->kind == JSON_INT && v->i == -1;
  case KEY_CHANNELS_LAST: return fl_is_null(v) || (v->kind == JSON_STR && !strcmp(v->s, "channels_last"));
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

bool fl_layer_check(fl_host *m, fl_layer *l) {
  const layer_row *row = &rows[l->row];
  for (int i = 0; i < l->cfg->n; i++) {
    const char *key = l->cfg->keys[i];
    const json_value *v = &l->cfg->items[i];
    const key_spec *spec = NULL;
    for (size_t c = 0; c < sizeof common / sizeof *common && !spec; c++)
      if (!strcmp(common[c].key, key)) spec = &common[c];
    for (int c = 0; c < MAX_KEYS && row->keys[c].key && !spec; c++)
      if (!strcmp(row->keys[c].key, key)) spec = &row->keys[c];
    if (!spec) {
      fl_unsupported(m, l, key, FL_PLAIN, "config key '%s' is not supported", key);
      return false;
    }
    if (fl_row_is_input(l->row) && !strcmp(key, "dtype")) continue;
    if (!rule_ok(v, spec->rule)) {
      fl_unsupported(m, l, key, FL_PLAIN, "%s other than %s is not supported", key, rule_text(spec->rule));
      return false;
    }
  }
  return true;
}

bool fl_lower_input(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  (void)k, (void)in, (void)n_in;
  fl_error(m, l, NULL, FL_PLAIN, "an InputLayer called on a tensor");
  return false;
}

bool fl_layer_lower(fl_host *m, fl_layer *l, fl_call *c) {
  fl_call *saved = m->call;
  m->call = c;
  c->n_outs = 0;
  bool ok = rows[l->row].lower(m, l, c->k, c->in, c->n_in);
  if (ok && c->n_outs == 0) c->outs[0] = c->out, c->n_outs = 1;
  m->call = saved;
  return ok;
}
