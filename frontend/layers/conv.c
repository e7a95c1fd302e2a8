/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conv.c: the library's convolutional layers: Conv2D, MaxPooling2D,
 * AveragePooling2D, BatchNormalization, the global poolings,
 * ZeroPadding2D, DepthwiseConv2D, SeparableConv2D (NHWC images, HWIO
 * kernels, Keras's padding):
 *   Conv2D NAME     %NAME.kernel, %NAME.bias, %NAME.conv, %NAME.bias_add, the
 *                   activation (as Dense's)
 *   Depthwise       %NAME.kernel [KH, KW, C, M] read as [KH, KW, 1, C*M]
 *                   (%NAME.kernel.hwio), %NAME.bias, %NAME.depthwise
 */
#include "frontend/layers/internal.h"

#include <string.h>

bool fl_lower_conv2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  ir_graph *g = m->g;
  int64_t filters, ks[2], st[2], dil[2], groups;
  bool same;
  fl_act act;
  const json_value *ub = fl_cfg(l, "use_bias");
  if (!fl_cfg_int(m, l, "filters", INT64_MIN, 1, (int64_t)1 << 31, &filters) || !fl_cfg_pair(m, l, "kernel_size", NULL, ks) ||
      !fl_cfg_pair(m, l, "strides", (int64_t[]){1, 1}, st) || !fl_cfg_pair(m, l, "dilation_rate", (int64_t[]){1, 1}, dil) ||
      !fl_cfg_int(m, l, "groups", 1, 1, (int64_t)1 << 20, &groups) || !fl_cfg_padding(m, l, &same) ||
      !fl_activation(m, l, &act) || !fl_image_input(m, l, x))
    return false;
  bool use_bias = !ub || (ub->kind == JSON_LIT && ub->lit == 't');
  int64_t C = x->type.dims[3];
  if (C % groups || filters % groups) {
    fl_error(m, l, "groups", FL_PLAIN, "groups=%lld must divide the input's %lld channels and the %lld filters",
             (long long)groups, (long long)C, (long long)filters);
    return false;
  }
  ir_op op = groups == 1 ? IR_OP_CONV2D : IR_OP_GROUP_CONV2D;
  ir_type kt = {DT_F32, 4, {ks[0], ks[1], C / groups, filters}}, bt = {DT_F32, 1, {filters}};
  int64_t bytes;
  if (!ir_type_bytes(&kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    fl_error(m, l, NULL, FL_PLAIN, "its kernel %s is larger than castor's tensor limit", fl_type_str(m, &kt));
    return false;
  }
  ir_attr a = {.acc = DT_F32, .strides = {2, {st[0], st[1]}}, .dilations = {2, {dil[0], dil[1]}}, .pads = {4, {0}}};
  fl_same_pads(same, x->type.dims[1], ks[0], st[0], dil[0], &a.pads.v[0], &a.pads.v[1]);
  fl_same_pads(same, x->type.dims[2], ks[1], st[1], dil[1], &a.pads.v[2], &a.pads.v[3]);
  ir_node probe = {.type = kt};
  ir_type out;
  char err[256];
  if (!ir_infer_type(op, (ir_node *[]){x, &probe}, 2, &a, &out, err, sizeof err)) {
    fl_error(m, l, NULL, FL_NAME_RULE, "%s", err);
    return false;
  }
  if (!fl_kernel_bias(m, l, x, &kt, &bt, use_bias, false)) return false;
  bool has_act = act != FL_LINEAR;
  const char *cv = has_act || use_bias ? fl_node_name(m, l, k, "conv") : fl_node_name(m, l, k, NULL);
  const char *add = has_act ? fl_node_name(m, l, k, "bias_add") : fl_node_name(m, l, k, NULL);
  ir_node *y = fl_stamp(m, l, ir_build_op(g, op, cv, (ir_node *[]){x, l->w[0]}, 2, &a, l->loc));
  m->call->out = fl_bias_act(m, l, k, y, add, use_bias, act);
  return true;
}

/* MaxPooling2D, AveragePooling2D: strides null means pool_size. */
static bool pool2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in, ir_op op) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int64_t ps[2], st[2];
  bool same;
  if (!fl_cfg_pair(m, l, "pool_size", (int64_t[]){2, 2}, ps) || !fl_cfg_pair(m, l, "strides", ps, st) || !fl_cfg_padding(m, l, &same) ||
      !fl_image_input(m, l, x))
    return false;
  ir_attr a = {.pool = {2, {ps[0], ps[1]}}, .strides = {2, {st[0], st[1]}}, .pads = {4, {0}}};
  fl_same_pads(same, x->type.dims[1], ps[0], st[0], 1, &a.pads.v[0], &a.pads.v[1]);
  fl_same_pads(same, x->type.dims[2], ps[1], st[1], 1, &a.pads.v[2], &a.pads.v[3]);
  return fl_op_styled(m, l, k, op, NULL, &x, 1, &a, FL_NAME_RULE, &m->call->out);
}

bool fl_lower_max_pool(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return pool2d(m, l, k, in, n_in, IR_OP_MAX_POOL2D);
}

bool fl_lower_avg_pool(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return pool2d(m, l, k, in, n_in, IR_OP_AVG_POOL2D);
}

/* CNN: BatchNormalization(axis=-1, momentum, epsilon, center, scale):
 * batch_norm over the last (channel) axis: %NAME.gamma, %NAME.beta,
 * %NAME.moving_mean, %NAME.moving_variance, all [C], Keras's variables in
 * that order with gamma or beta left out when scale or center is false (an
 * [] literal 1 or 0 takes its place). Inference uses the moving
 * statistics; a training step the batch's and updates them with momentum
 * (passes/grad_bn.c). */
bool fl_lower_batch_norm(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int rank = x->type.rank;
  int64_t axis;
  double eps, mom;
  bool center, scale;
  if (!fl_cfg_int(m, l, "axis", -1, -IR_MAX_RANK, IR_MAX_RANK, &axis) || !fl_cfg_number(m, l, "epsilon", 1e-3, 1e-12, 1, &eps) ||
      !fl_cfg_number(m, l, "momentum", 0.99, 0, 1, &mom) || !fl_cfg_bool(m, l, "center", true, &center) ||
      !fl_cfg_bool(m, l, "scale", true, &scale))
    return false;
  if (rank < 2 || x->type.dtype != DT_F32) {
    fl_error(m, l, NULL, FL_KIND, "needs a float input with a feature dimension, got %s", fl_type_str(m, &x->type));
    return false;
  }
  if (axis != -1 && axis != rank - 1) {
    fl_unsupported(m, l, "axis", FL_KIND, "normalizes over the last (channel) axis of %s: axis=-1 or axis=%d "
                   "(channels last, NHWC)", fl_type_str(m, &x->type), rank - 1);
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
        ir_node *lit = ir_node_new(m->g, IR_OP_LITERAL, &st, NULL, 0, key, l->loc);
        lit->attr.value = i == 0 ? 1.0 : 0.0;
        ir_graph_append(m->g, lit);
        l->w[i] = fl_stamp(m, l, lit);
        continue;
      }
      const float *d = fl_weight(m, l, var++, key, names[i], &ct, i == 0 || i == 3 ? FL_INIT_ONES : FL_INIT_ZEROS);
      if (!d) return false;
      l->w[i] = fl_stamp(m, l, ir_build_const(m->g, key, &ct, key, d, l->loc));
    }
    l->weights_done = true;
  } else if (!ir_type_eq(&l->w[2]->type, &ct)) {
    fl_error(m, l, NULL, FL_PLAIN, "a shared call with input %s, the first call's moving_mean is %s", fl_type_str(m, &x->type),
                   fl_type_str(m, &l->w[2]->type));
    return false;
  }
  ir_attr a = {.epsilon = eps, .momentum = mom};
  ir_node *srcs[5] = {x, l->w[0], l->w[1], l->w[2], l->w[3]};
  return fl_op_styled(m, l, k, IR_OP_BATCH_NORM, NULL, srcs, 5, &a, FL_NAME_RULE, &m->call->out);
}

/* CNN: GlobalAveragePooling2D / GlobalMaxPooling2D (keepdims): one
 * avg_pool2d / max_pool2d window over the whole image, as the .cast
 * frontend lowers them, then [N, C] (%NAME.pool, a reshape %NAME) or, with
 * keepdims, [N, 1, 1, C] (%NAME). GlobalAveragePooling1D: [N, T, C] as the
 * image [N, 1, T, C] (%NAME.image), a [1, T] window, [N, C] or [N, 1, C]. */
static bool global_pool(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in, ir_op op, bool one_d) {
  if (!fl_one_input(m, l, n_in)) return false;
  bool keep;
  if (!fl_cfg_bool(m, l, "keepdims", false, &keep)) return false;
  ir_node *x = in[0];
  if (one_d) {
    if (x->type.rank != 3 || !ir_type_is_batched(&x->type)) {
      fl_error(m, l, "input", FL_KIND, "needs an input [N, steps, features], got %s", fl_type_str(m, &x->type));
      return false;
    }
    ir_attr ra = {.shape = {4, {IR_DIM_BATCH, 1, x->type.dims[1], x->type.dims[2]}}};
    if (!fl_layout_op(m, l, k, IR_OP_RESHAPE, "image", &x, 1, &ra, &x)) return false;
  } else if (!fl_image_input(m, l, x)) {
    return false;
  }
  int64_t C = x->type.dims[3];
  /* one window: the strides change nothing (GlobalAveragePooling1D's are the .cast frontend's, kept for its dumps) */
  ir_attr a = {.pool = {2, {x->type.dims[1], x->type.dims[2]}}, .strides = {2, {1, one_d && op == IR_OP_AVG_POOL2D ? x->type.dims[2] : 1}},
               .pads = {4, {0}}};
  bool last = keep && !one_d;
  ir_node *y;
  if (!fl_op_styled(m, l, k, op, last ? NULL : "pool", &x, 1, &a, FL_NAME_RULE, &y)) return false;
  if (!last) {
    ir_attr ra = {.shape = keep ? (ir_shape){3, {IR_DIM_BATCH, 1, C}} : (ir_shape){2, {IR_DIM_BATCH, C}}};
    if (!fl_layout_op(m, l, k, IR_OP_RESHAPE, NULL, &y, 1, &ra, &y)) return false;
  }
  m->call->out = y;
  return true;
}

bool fl_lower_global_avg_pool2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return global_pool(m, l, k, in, n_in, IR_OP_AVG_POOL2D, false);
}

bool fl_lower_global_max_pool2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return global_pool(m, l, k, in, n_in, IR_OP_MAX_POOL2D, false);
}

bool fl_lower_global_avg_pool1d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return global_pool(m, l, k, in, n_in, IR_OP_AVG_POOL2D, true);
}

bool fl_lower_global_max_pool1d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  return global_pool(m, l, k, in, n_in, IR_OP_MAX_POOL2D, true);
}

/* CNN: ZeroPadding2D(padding): an int (all sides), [h, w] (symmetric) or
 * [[top, bottom], [left, right]]; pad_constant with zeros. */
bool fl_lower_zero_padding2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  if (!fl_image_input(m, l, x)) return false;
  const json_value *v = fl_cfg(l, "padding");
  static const json_value one = {.kind = JSON_INT, .i = 1, .num = 1}; /* Keras's default (1, 1) */
  if (!v) v = &one;
  int64_t p[4];
  bool ok = (v->kind == JSON_INT || (v->kind == JSON_ARR && v->n == 2));
  for (int i = 0; ok && i < 2; i++) {
    const json_value *e = v->kind == JSON_INT ? v : &v->items[i];
    for (int j = 0; ok && j < 2; j++) {
      const json_value *f = e->kind == JSON_ARR ? (e->n == 2 ? &e->items[j] : NULL) : e;
      ok = f && f->kind == JSON_INT && f->i >= 0 && f->i <= ((int64_t)1 << 20);
      if (ok) p[2 * i + j] = f->i;
    }
  }
  if (!ok) {
    fl_error(m, l, "padding", FL_PLAIN, "padding must be an integer, [h, w] or [[top, bottom], [left, right]] of integers >= 0");
    return false;
  }
  ir_attr a = {.shape = {4, {IR_DIM_BATCH, x->type.dims[1] + p[0] + p[1], x->type.dims[2] + p[2] + p[3], x->type.dims[3]}},
               .starts = {4, {0, p[0], p[2], 0}}, .steps = {4, {1, 1, 1, 1}}, .value = 0};
  return fl_layout_op(m, l, k, IR_OP_PAD_CONSTANT, NULL, &x, 1, &a, &m->call->out);
}

/* ---- convolutional networks: DepthwiseConv2D, SeparableConv2D ---- */

/* The bias vars/`bi` [n] of a layer, read on its first call. */
static bool conv_bias(fl_host *m, fl_layer *l, int bi, int64_t n) {
  if (l->w[bi]) return true;
  ir_type bt = {DT_F32, 1, {n}};
  const char *key = arena_printf(m->arena, "%s.bias", l->ir_name);
  const float *d = fl_weight(m, l, bi, key, "bias", &bt, FL_INIT_ZEROS);
  if (!d) return false;
  l->w[bi] = fl_stamp(m, l, ir_build_const(m->g, key, &bt, key, d, l->loc));
  return true;
}

/* The depthwise step of both: x [N, H, W, C] by kernel vars/`wi` [KH, KW,
 * C, depth_multiplier] (Keras's shape, checked against the file), read as
 * the HWIO kernel [KH, KW, 1, C*M] (%NAME.<wname>.hwio, a reshape): the
 * IR's group_conv2d with one group per channel, output channel c*M + m as
 * Keras's. Strides, padding and dilation_rate as Conv2D's. */
static ir_node *depthwise_step(fl_host *m, fl_layer *l, int k, ir_node *x, int wi, const char *wname, const char *name,
                           int bias_at, int64_t *cm) {
  int64_t ks[2], st[2], dil[2], mult;
  bool same;
  if (!fl_cfg_pair(m, l, "kernel_size", NULL, ks) || !fl_cfg_pair(m, l, "strides", (int64_t[]){1, 1}, st) ||
      !fl_cfg_pair(m, l, "dilation_rate", (int64_t[]){1, 1}, dil) || !fl_cfg_padding(m, l, &same) ||
      !fl_cfg_int(m, l, "depth_multiplier", 1, 1, (int64_t)1 << 20, &mult) || !fl_image_input(m, l, x))
    return NULL;
  if ((st[0] > 1 || st[1] > 1) && (dil[0] > 1 || dil[1] > 1)) { /* Keras refuses both at construction */
    fl_error(m, l, NULL, FL_PLAIN, "strides > 1 together with dilation_rate > 1 is not supported (nor by Keras)");
    return NULL;
  }
  int64_t C = x->type.dims[3];
  ir_type kt = {DT_F32, 4, {ks[0], ks[1], C, mult}}, ct = {DT_F32, 4, {ks[0], ks[1], 1, C * mult}};
  int64_t bytes;
  if (C * mult > ((int64_t)1 << 31) || !ir_type_bytes(&kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    fl_error(m, l, NULL, FL_PLAIN, "its %s %s is larger than castor's tensor limit", wname, fl_type_str(m, &kt));
    return NULL;
  }
  ir_attr a = {.acc = DT_F32, .strides = {2, {st[0], st[1]}}, .dilations = {2, {dil[0], dil[1]}}, .pads = {4, {0}}};
  fl_same_pads(same, x->type.dims[1], ks[0], st[0], dil[0], &a.pads.v[0], &a.pads.v[1]);
  fl_same_pads(same, x->type.dims[2], ks[1], st[1], dil[1], &a.pads.v[2], &a.pads.v[3]);
  ir_op op = C == 1 ? IR_OP_CONV2D : IR_OP_GROUP_CONV2D;
  ir_node probe = {.type = ct};
  ir_type out;
  char err[256];
  if (!ir_infer_type(op, (ir_node *[]){x, &probe}, 2, &a, &out, err, sizeof err)) {
    fl_error(m, l, NULL, FL_NAME_RULE, "%s", err);
    return NULL;
  }
  if (!l->weights_done) {
    const char *key = arena_printf(m->arena, "%s.%s", l->ir_name, wname);
    const float *d = fl_weight(m, l, wi, key, wname, &kt, FL_INIT_GLOROT);
    if (!d) return NULL;
    l->w[wi] = fl_stamp(m, l, ir_build_const(m->g, key, &kt, key, d, l->loc));
    if (bias_at >= 0 && !conv_bias(m, l, bias_at, C * mult)) return NULL;
  } else if (!ir_type_eq(&l->w[wi]->type, &kt)) {
    fl_error(m, l, NULL, FL_PLAIN, "a shared call with input %s, the first call's %s is %s", fl_type_str(m, &x->type), wname,
                   fl_type_str(m, &l->w[wi]->type));
    return NULL;
  }
  ir_node *w = l->w[wi];
  if (C != 1) { /* [KH, KW, C, M] is not already [KH, KW, 1, C*M] */
    ir_attr ra = {.shape = {4, {ct.dims[0], ct.dims[1], ct.dims[2], ct.dims[3]}}};
    const char *rn = k ? arena_printf(m->arena, "%s.%s.hwio.call%d", l->ir_name, wname, k)
                       : arena_printf(m->arena, "%s.%s.hwio", l->ir_name, wname);
    w = fl_stamp(m, l, ir_build_op(m->g, IR_OP_RESHAPE, rn, &w, 1, &ra, l->loc));
  }
  *cm = C * mult;
  return fl_stamp(m, l, ir_build_op(m->g, op, name, (ir_node *[]){x, w}, 2, &a, l->loc));
}

/* DepthwiseConv2D: %NAME.kernel [KH, KW, C, depth_multiplier] (vars/0),
 * %NAME.bias [C*M] (vars/1), %NAME.depthwise, %NAME.bias_add, the
 * activation (as Conv2D's). */
bool fl_lower_depthwise_conv2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  bool use_bias;
  fl_act act;
  if (!fl_one_input(m, l, n_in) || !fl_cfg_bool(m, l, "use_bias", true, &use_bias) || !fl_activation(m, l, &act)) return false;
  bool has_act = act != FL_LINEAR;
  int64_t cm;
  ir_node *y = depthwise_step(m, l, k, in[0], 0, "kernel",
                                 has_act || use_bias ? fl_node_name(m, l, k, "depthwise") : fl_node_name(m, l, k, NULL),
                                 use_bias ? 1 : -1, &cm);
  if (!y) return false;
  l->weights_done = true;
  const char *add = has_act ? fl_node_name(m, l, k, "bias_add") : fl_node_name(m, l, k, NULL);
  m->call->out = fl_bias_act(m, l, k, y, add, use_bias, act);
  return true;
}

/* SeparableConv2D: the depthwise step of %NAME.depthwise_kernel [KH, KW, C,
 * M] (vars/0; %NAME.depthwise), the 1x1 conv2d of %NAME.pointwise_kernel
 * [1, 1, C*M, filters] (vars/1; %NAME.pointwise), %NAME.bias [filters]
 * (vars/2), the activation. */
bool fl_lower_separable_conv2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  bool use_bias;
  fl_act act;
  int64_t filters, cm;
  if (!fl_one_input(m, l, n_in) || !fl_cfg_bool(m, l, "use_bias", true, &use_bias) ||
      !fl_cfg_int(m, l, "filters", INT64_MIN, 1, (int64_t)1 << 31, &filters) || !fl_activation(m, l, &act))
    return false;
  ir_node *d = depthwise_step(m, l, k, in[0], 0, "depthwise_kernel", fl_node_name(m, l, k, "depthwise"), -1, &cm);
  if (!d) return false;
  ir_type pt = {DT_F32, 4, {1, 1, cm, filters}};
  int64_t bytes;
  if (!ir_type_bytes(&pt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    fl_error(m, l, NULL, FL_PLAIN, "its pointwise_kernel %s is larger than castor's tensor limit", fl_type_str(m, &pt));
    return false;
  }
  if (!l->weights_done) {
    const char *key = arena_printf(m->arena, "%s.pointwise_kernel", l->ir_name);
    const float *pd = fl_weight(m, l, 1, key, "pointwise_kernel", &pt, FL_INIT_GLOROT);
    if (!pd) return false;
    l->w[1] = fl_stamp(m, l, ir_build_const(m->g, key, &pt, key, pd, l->loc));
    if (use_bias && !conv_bias(m, l, 2, filters)) return false;
    l->weights_done = true;
  } else if (!ir_type_eq(&l->w[1]->type, &pt)) {
    fl_error(m, l, NULL, FL_PLAIN, "a shared call with input %s, the first call's pointwise_kernel is %s",
                   fl_type_str(m, &in[0]->type), fl_type_str(m, &l->w[1]->type));
    return false;
  }
  bool has_act = act != FL_LINEAR;
  ir_attr pa = {.acc = DT_F32, .strides = {2, {1, 1}}, .dilations = {2, {1, 1}}, .pads = {4, {0}}};
  const char *pw = has_act || use_bias ? fl_node_name(m, l, k, "pointwise") : fl_node_name(m, l, k, NULL);
  ir_node *y = fl_stamp(m, l, ir_build_op(m->g, IR_OP_CONV2D, pw, (ir_node *[]){d, l->w[1]}, 2, &pa, l->loc));
  if (use_bias) /* the bias is vars/2: bias_act's l->w[1] is the pointwise kernel here */
    y = fl_stamp(m, l, ir_build_binary(m->g, IR_OP_ADD, has_act ? fl_node_name(m, l, k, "bias_add") : fl_node_name(m, l, k, NULL),
                                       y, l->w[2], l->loc));
  if (has_act) y = fl_act_apply(m, l, y, act, fl_node_name(m, l, k, NULL));
  m->call->out = y;
  return true;
}


