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
 * A shared layer's second call is named NAME.call1 (and so on), with the
 * same weights; as an output it is NAME_1.
 */
#include "frontend/keras/internal.h"

#include <stdio.h>
#include <string.h>

typedef enum key_rule { KEY_ANY, KEY_NULL, KEY_TRUE, KEY_FALSE, KEY_LAST_AXIS, KEY_ZERO } key_rule;

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
  if (x->type.rank != 2) {
    kr_layer_error(m, l, "an input of rank %d (%s) is not supported yet (castor's dense takes "
                   "[N, features])", x->type.rank, type_str(m, &x->type));
    return false;
  }
  ir_type kt = {DT_F32, 2, {x->type.dims[1], u->i}}, bt = {DT_F32, 1, {u->i}};
  int64_t bytes;
  if (!ir_type_bytes(&kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    kr_layer_error(m, l, "its kernel %s is larger than castor's tensor limit", type_str(m, &kt));
    return false;
  }
  if (!l->weights_done) {
    const char *kkey = arena_printf(m->arena, "%s.kernel", l->ir_name);
    const char *bkey = arena_printf(m->arena, "%s.bias", l->ir_name);
    const float *kd = kr_weight(m, l, 0, "kernel", &kt), *bd = NULL;
    if (!kd || (use_bias && !(bd = kr_weight(m, l, 1, "bias", &bt)))) return false;
    l->w[0] = kr_stamp(m, l, ir_build_const(g, kkey, &kt, kkey, kd, kr_loc(m)));
    if (use_bias) l->w[1] = kr_stamp(m, l, ir_build_const(g, bkey, &bt, bkey, bd, kr_loc(m)));
    l->weights_done = true;
  } else if (!ir_type_eq(&l->w[0]->type, &kt)) {
    kr_layer_error(m, l, "a shared call with input %s, the first call's kernel is %s",
                   type_str(m, &x->type), type_str(m, &l->w[0]->type));
    return false;
  }
  bool has_act = act != IR_OP_COUNT;
  const char *mm = has_act || use_bias ? node_name(m, l, k, "matmul") : node_name(m, l, k, NULL);
  const char *add = has_act ? node_name(m, l, k, "bias_add") : node_name(m, l, k, NULL);
  ir_node *y = kr_stamp(m, l, ir_build_matmul(g, mm, x, l->w[0], DT_F32, kr_loc(m)));
  if (use_bias) y = kr_stamp(m, l, ir_build_binary(g, IR_OP_ADD, add, y, l->w[1], kr_loc(m)));
  if (has_act) y = kr_stamp(m, l, ir_build_unary(g, act, node_name(m, l, k, NULL), y, kr_loc(m)));
  l->calls[k].out = y;
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

static bool lower_softmax(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  return one_input(m, l, n_in) && unary(m, l, k, in[0], IR_OP_SOFTMAX);
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

static bool lower_layer_norm(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  if (!one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  const json_value *eps = kr_cfg(l, "epsilon");
  if (!eps || (eps->kind != JSON_INT && eps->kind != JSON_FLOAT) || !(eps->num > 0) || eps->num > 1) {
    kr_layer_error(m, l, "epsilon must be a number in (0, 1]");
    return false;
  }
  if (x->type.rank < 1) return kr_layer_error(m, l, "a scalar input"), false;
  ir_type pt = {DT_F32, 1, {x->type.dims[x->type.rank - 1]}};
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
  ir_attr attr = {.axis = -1, .epsilon = eps->num};
  l->calls[k].out = kr_stamp(m, l, ir_build_op(m->g, IR_OP_LAYER_NORM, node_name(m, l, k, NULL),
                                               (ir_node *[]){x, l->w[0], l->w[1]}, 3, &attr, kr_loc(m)));
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
    {"Softmax", lower_softmax, {{"axis", KEY_LAST_AXIS}}},
    {"Add", lower_add, {{"activity_regularizer", KEY_NULL}}},
    {"Multiply", lower_multiply, {{"activity_regularizer", KEY_NULL}}},
    {"LayerNormalization", lower_layer_norm,
     {{"axis", KEY_LAST_AXIS}, {"epsilon", KEY_ANY}, {"center", KEY_TRUE}, {"scale", KEY_TRUE},
      {"rms_scaling", KEY_FALSE}, {"beta_initializer", KEY_ANY}, {"gamma_initializer", KEY_ANY},
      {"beta_regularizer", KEY_NULL}, {"gamma_regularizer", KEY_NULL},
      {"beta_constraint", KEY_NULL}, {"gamma_constraint", KEY_NULL}}},
};
enum { N_ROWS = sizeof rows / sizeof *rows };

int kr_layer_row(const char *cls) {
  for (int i = 0; i < N_ROWS; i++)
    if (!strcmp(rows[i].cls, cls)) return i;
  return -1;
}

const char *kr_supported_list(void) {
  static char list[512];
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
  return row->lower(m, l, k, in, n_in);
}
