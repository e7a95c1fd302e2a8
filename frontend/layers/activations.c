/* SPDX-License-Identifier: Apache-2.0 */
/*
 * activations.c: Keras 3's activations (keras/src/activations), each one
 * IR op or a few, and the layers that are activations with settings: ReLU
 * (max_value, negative_slope, threshold) and LayerScale. An activation
 * that lowers to several nodes names them NAME.STEP, the last NAME.
 *
 *   relu6        clip [0, 6]                 (Keras: relu(x, max_value=6))
 *   hard_sigmoid hard_sigmoid                (relu6(x + 3) / 6)
 *   hard_silu    x * hard_sigmoid(x)         (also hard_swish)
 *   mish         x * tanh(softplus(x))
 *   selu         1.0507009873554805 * elu(x, 1.6732632423543772)
 *   elu          elu, alpha 1;   leaky_relu  leaky_relu, negative_slope 0.2
 *   softsign     x / (|x| + 1);  exponential exp
 */
#include "frontend/layers/internal.h"

#include <float.h>

#include <string.h>

static const struct {
  const char *keras;
  fl_act act;
} acts[] = {
    {"linear", FL_LINEAR},         {"relu", IR_OP_RELU},           {"sigmoid", IR_OP_SIGMOID},
    {"tanh", IR_OP_TANH},          {"gelu", IR_OP_GELU},           {"silu", IR_OP_SILU},
    {"swish", IR_OP_SILU},         {"softmax", IR_OP_SOFTMAX},     {"relu6", FL_ACT_RELU6},
    {"hard_sigmoid", IR_OP_HARD_SIGMOID}, {"hard_silu", FL_ACT_HARD_SILU}, {"hard_swish", FL_ACT_HARD_SILU},
    {"mish", FL_ACT_MISH},         {"selu", FL_ACT_SELU},          {"elu", FL_ACT_ELU},
    {"leaky_relu", FL_ACT_LEAKY_RELU}, {"softsign", FL_ACT_SOFTSIGN}, {"softplus", IR_OP_SOFTPLUS},
    {"exponential", FL_ACT_EXP},   {"log_softmax", IR_OP_LOG_SOFTMAX},
};

bool fl_activation_named(fl_host *m, fl_layer *l, const char *key, const char *s, fl_act *out) {
  for (size_t i = 0; i < sizeof acts / sizeof *acts; i++)
    if (!strcmp(s, acts[i].keras)) return *out = acts[i].act, true;
  for (int i = 0; i < IR_OP_COUNT; i++) /* the IR's activation ops by their names (.cast's) */
    if ((ir_op_flags((ir_op)i) & IR_OPF_ACTIVATION) && !strcmp(s, ir_op_name((ir_op)i))) return *out = i, true;
  str_buf b;
  str_buf_init(&b);
  for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) str_buf_printf(&b, "%s%s", i ? ", " : "", acts[i].keras);
  fl_unsupported(m, l, key, FL_PLAIN, "activation '%s' is not supported (%s)", s, str_buf_cstr(&b));
  str_buf_fini(&b);
  return false;
}

/* A Keras activation: a name, or {"class_name": "function", "config": NAME}
 * (some 3.x versions); absent or null: linear. */
bool fl_activation(fl_host *m, fl_layer *l, fl_act *out) {
  const json_value *v = fl_cfg(l, "activation");
  if (fl_is_null(v)) return *out = FL_LINEAR, true;
  const char *s = v->kind == JSON_STR ? v->s : NULL;
  if (v->kind == JSON_OBJ) {
    const json_value *c = json_field(v, "config");
    s = c && c->kind == JSON_STR ? c->s : NULL;
  }
  if (!s) {
    fl_error(m, l, "activation", FL_PLAIN, "activation is not a name");
    return false;
  }
  return fl_activation_named(m, l, "activation", s, out);
}

ir_node *fl_literal(fl_host *m, const fl_layer *l, const char *name, double value) {
  ir_node *lit = ir_node_new(m->g, IR_OP_LITERAL, &(ir_type){DT_F32, 0, {0}}, NULL, 0, name, l->loc);
  lit->attr.value = value;
  ir_graph_append(m->g, lit);
  return fl_stamp(m, l, lit);
}

static ir_node *op1(fl_host *m, fl_layer *l, ir_op op, const char *name, ir_node *x, const ir_attr *a) {
  return fl_stamp(m, l, ir_build_op(m->g, op, name, &x, 1, a, l->loc));
}

static ir_node *op2(fl_host *m, fl_layer *l, ir_op op, const char *name, ir_node *a, ir_node *b) {
  return fl_stamp(m, l, ir_build_binary(m->g, op, name, a, b, l->loc));
}

static const char *step(fl_host *m, const char *name, const char *s) { return arena_printf(m->arena, "%s.%s", name, s); }

ir_node *fl_act_apply(fl_host *m, fl_layer *l, ir_node *x, fl_act act, const char *name) {
  ir_attr none = {0};
  switch (act) {
  case FL_LINEAR: return x;
  case FL_ACT_RELU6: return op1(m, l, IR_OP_CLIP, name, x, &(ir_attr){.min_value = 0, .max_value = 6});
  case FL_ACT_HARD_SILU:
    return op2(m, l, IR_OP_MUL, name, x, op1(m, l, IR_OP_HARD_SIGMOID, step(m, name, "hard_sigmoid"), x, &none));
  case FL_ACT_MISH: {
    ir_node *sp = op1(m, l, IR_OP_SOFTPLUS, step(m, name, "softplus"), x, &none);
    return op2(m, l, IR_OP_MUL, name, x, op1(m, l, IR_OP_TANH, step(m, name, "tanh"), sp, &none));
  }
  case FL_ACT_SELU: {
    ir_node *e = op1(m, l, IR_OP_ELU, step(m, name, "elu"), x, &(ir_attr){.alpha = 1.6732632423543772});
    return op2(m, l, IR_OP_MUL, name, e, fl_literal(m, l, step(m, name, "scale"), 1.0507009873554805));
  }
  case FL_ACT_ELU: return op1(m, l, IR_OP_ELU, name, x, &(ir_attr){.alpha = 1.0});
  case FL_ACT_LEAKY_RELU: return op1(m, l, IR_OP_LEAKY_RELU, name, x, &(ir_attr){.alpha = 0.2});
  case FL_ACT_SOFTSIGN: {
    ir_node *a = op1(m, l, IR_OP_ABS, step(m, name, "abs"), x, &none);
    ir_node *d = op2(m, l, IR_OP_ADD, step(m, name, "plus_one"), a, fl_literal(m, l, step(m, name, "one"), 1.0));
    return op2(m, l, IR_OP_DIV, name, x, d);
  }
  case FL_ACT_EXP: return op1(m, l, IR_OP_EXP, name, x, &none);
  default: return op1(m, l, (ir_op)act, name, x, &none);
  }
}

/* Activation(activation) */
bool fl_lower_activation(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  fl_act act;
  if (!fl_one_input(m, l, n_in) || !fl_activation(m, l, &act)) return false;
  if ((act == IR_OP_SOFTMAX || act == IR_OP_LOG_SOFTMAX) && in[0]->type.rank < 1) {
    fl_error(m, l, NULL, FL_PLAIN, "softmax of a scalar");
    return false;
  }
  m->call->out = fl_act_apply(m, l, in[0], act, fl_node_name(m, l, k, NULL));
  return true;
}

/* ReLU(max_value, negative_slope, threshold), Keras's formula
 * (keras/src/activations/activations.py, ReLU.static_call):
 *   x'  = threshold != 0 ? (x > threshold ? x : 0)     %NAME.thresholded
 *                        : relu(x), clip [0, max_value] with one
 *   x'' = max_value ? clip(x', 0, max_value) : x'
 *   y   = negative_slope ? x'' - negative_slope * relu(threshold - x) : x''
 * with negative_slope and no other setting one leaky_relu. */
bool fl_lower_relu(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  double slope, thr, maxv = 0;
  const json_value *mv = fl_cfg(l, "max_value");
  bool has_max = !fl_is_null(mv);
  if (!fl_cfg_number(m, l, "negative_slope", 0, 0, 1e30, &slope) || !fl_cfg_number(m, l, "threshold", 0, -1e30, 1e30, &thr) ||
      (has_max && !fl_cfg_number(m, l, "max_value", 0, 0, 1e30, &maxv)))
    return false;
  ir_node *x = in[0];
  const char *name = fl_node_name(m, l, k, NULL);
  bool more = slope != 0;
  if (slope != 0 && !has_max && thr == 0) {
    m->call->out = op1(m, l, IR_OP_LEAKY_RELU, name, x, &(ir_attr){.alpha = slope});
    return true;
  }
  ir_node *y;
  if (thr != 0) { /* select(thr >= x, 0, x): Keras's x * (x > thr) */
    ir_node *le = fl_stamp(m, l, ir_build_op(m->g, IR_OP_SELECT_GE, step(m, name, "at_or_below"),
                                             (ir_node *[]){fl_literal(m, l, step(m, name, "one"), 1.0),
                                                           fl_literal(m, l, step(m, name, "threshold"), thr), x},
                                             3, &(ir_attr){0}, l->loc));
    bool last = !has_max && !more;
    y = fl_stamp(m, l, ir_build_op(m->g, IR_OP_SELECT, last ? name : step(m, name, "thresholded"),
                                   (ir_node *[]){le, fl_literal(m, l, step(m, name, "zero"), 0.0), x}, 3,
                                   &(ir_attr){0}, l->loc));
    if (has_max) y = op1(m, l, IR_OP_CLIP, more ? step(m, name, "clip") : name, y,
                         &(ir_attr){.min_value = 0, .max_value = maxv});
  } else if (has_max) {
    y = op1(m, l, IR_OP_CLIP, more ? step(m, name, "clip") : name, x, &(ir_attr){.min_value = 0, .max_value = maxv});
  } else {
    y = op1(m, l, IR_OP_RELU, more ? step(m, name, "relu") : name, x, &(ir_attr){0});
  }
  if (more) {
    ir_node *neg = thr != 0 ? op2(m, l, IR_OP_SUB, step(m, name, "below"), fl_literal(m, l, step(m, name, "thr"), thr), x)
                            : op1(m, l, IR_OP_NEG, step(m, name, "neg"), x, &(ir_attr){0});
    neg = op1(m, l, IR_OP_RELU, step(m, name, "negative_part"), neg, &(ir_attr){0});
    neg = op2(m, l, IR_OP_MUL, step(m, name, "slope"), neg, fl_literal(m, l, step(m, name, "negative_slope"), slope));
    y = op2(m, l, IR_OP_SUB, name, y, neg);
  }
  m->call->out = y;
  return true;
}

/* LayerScale(init_values, projection_dim) (ConvNeXt): x * %NAME.gamma
 * [projection_dim] (vars/0). */
bool fl_lower_layer_scale(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  if (x->type.rank < 2) return fl_error(m, l, "input", FL_KIND, "needs an input with a feature axis"), false;
  int64_t C = x->type.dims[x->type.rank - 1], dim;
  ir_type gt = {DT_F32, 1, {C}};
  double init;
  if (fl_is_null(fl_cfg(l, "init_values")))
    return fl_error(m, l, "init_values", FL_PLAIN, "init_values is required (gamma's initial value)"), false;
  if (!fl_cfg_number(m, l, "init_values", 0, -FLT_MAX, FLT_MAX, &init) ||
      !fl_cfg_int(m, l, "projection_dim", C, 1, (int64_t)1 << 30, &dim))
    return false;
  if (dim != C) {
    fl_error(m, l, "projection_dim", FL_PLAIN, "projection_dim %lld is not the %lld channels of the input %s",
             (long long)dim, (long long)C, fl_type_str(m, &x->type));
    return false;
  }
  if (!l->weights_done) {
    const char *key = arena_printf(m->arena, "%s.gamma", l->ir_name);
    m->init_constant = init; /* Keras's Constant(init_values) */
    const float *d = fl_weight(m, l, 0, key, "gamma", &gt, FL_INIT_CONSTANT);
    if (!d) return false;
    l->w[0] = fl_stamp(m, l, ir_build_const(m->g, key, &gt, key, d, l->loc));
    l->weights_done = true;
  }
  m->call->out = op2(m, l, IR_OP_MUL, fl_node_name(m, l, k, NULL), x, l->w[0]);
  return true;
}
