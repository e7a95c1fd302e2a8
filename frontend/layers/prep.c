/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prep.c: the preprocessing and cropping layers keras.applications build
 * into their models:
 *
 *   Rescaling(scale, offset)   %NAME.scale, %NAME.scaled = x * scale,
 *                              %NAME = + %NAME.offset (none for offset 0);
 *                              a number is a [] literal, a list a [C] const;
 *                              both ops {compute=policy}: in the layer's
 *                              compute dtype, as Keras's call casts
 *   Normalization(axis=-1)     %NAME.mean, %NAME.variance (vars/0, vars/1;
 *                              vars/2 is Keras's count, read and unused), or
 *                              the config's mean and variance; Keras's
 *                              (x - mean) / max(sqrt(variance), 1e-7)
 *                              (invert: mean + x * max(...)), each op
 *                              {compute=policy}, as Keras's call converts
 *   Cropping2D(cropping=0)     %NAME = strided_slice of the rows and columns
 *   CustomScaleLayer(scale)    InceptionResNetV2's residual: inputs[0] +
 *                              inputs[1] * scale (%NAME.scaled, %NAME)
 *
 * The stored statistics are nontrainable variables (Keras's are not
 * trained); the config's are constants.
 */
#include "frontend/layers/internal.h"

#include <string.h>

/* A number of the config (a [] literal) or a list of them (a [C] const named `name`), or NULL after an error. */
static ir_node *number_or_list(fl_host *m, fl_layer *l, const json_value *v, const char *key, const char *name, int64_t C) {
  if (v && (v->kind == JSON_INT || v->kind == JSON_FLOAT)) return fl_literal(m, l, name, v->num);
  bool ok = v && v->kind == JSON_ARR && (v->n == C || v->n == 1);
  for (int i = 0; ok && i < v->n; i++) ok = v->items[i].kind == JSON_INT || v->items[i].kind == JSON_FLOAT;
  if (!ok) {
    fl_error(m, l, key, FL_PLAIN, "%s must be a number or a list of %lld numbers (one per channel)", key, (long long)C);
    return NULL;
  }
  if (v->n == 1) return fl_literal(m, l, name, v->items[0].num);
  float *d = arena_alloc(m->g->arena, (size_t)C * sizeof *d);
  for (int64_t i = 0; i < C; i++) d[i] = (float)v->items[i].num;
  ir_type t = {DT_F32, 1, {C}};
  return fl_stamp(m, l, ir_build_const(m->g, name, &t, name, d, l->loc));
}

static ir_node *bin(fl_host *m, fl_layer *l, ir_op op, const char *name, ir_node *a, ir_node *b) {
  return fl_stamp(m, l, ir_build_binary(m->g, op, name, a, b, l->loc));
}

bool fl_lower_rescaling(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  if (x->type.rank < 2) return fl_error(m, l, "input", FL_KIND, "needs an input with a feature axis"), false;
  int64_t C = x->type.dims[x->type.rank - 1];
  const json_value *sv = fl_cfg(l, "scale"), *ov = fl_cfg(l, "offset");
  bool has_offset = !fl_is_null(ov) && !((ov->kind == JSON_INT || ov->kind == JSON_FLOAT) && ov->num == 0);
  ir_node *s = number_or_list(m, l, sv, "scale", fl_node_name(m, l, k, "scale"), C);
  ir_node *o = s && has_offset ? number_or_list(m, l, ov, "offset", fl_node_name(m, l, k, "offset"), C) : NULL;
  if (!s || (has_offset && !o)) return false;
  /* Keras's call: cast(x, compute) * cast(scale, compute) + cast(offset, compute), each op in
   * the compute dtype: under mixed_bfloat16 the input and 1/255 are rounded to bfloat16 (2^-8),
   * which TF-AMP's infer rule (f32 before the first convolution) would not do. */
  ir_node *y = bin(m, l, IR_OP_MUL, fl_node_name(m, l, k, has_offset ? "scaled" : NULL), x, s);
  y->in_policy = true;
  if (has_offset) (y = bin(m, l, IR_OP_ADD, fl_node_name(m, l, k, NULL), y, o))->in_policy = true;
  m->call->out = y;
  return true;
}

/* A stored statistic: a nontrainable variable, as Keras's (castor train
 * never updates it, and --save writes it back as loaded). */
static ir_node *statistic(fl_host *m, fl_layer *l, const char *key, const ir_type *t, const float *d) {
  ir_node *v = ir_node_new(m->g, IR_OP_VARIABLE, t, NULL, 0, key, l->loc);
  v->attr.weight = arena_strdup(m->g->arena, key);
  v->attr.kind = IR_STATE_NONTRAINABLE;
  v->attr.data = d;
  ir_graph_append(m->g, v);
  return fl_stamp(m, l, v);
}

bool fl_lower_normalization(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  const json_value *ax = fl_cfg(l, "axis"), *mv = fl_cfg(l, "mean"), *vv = fl_cfg(l, "variance");
  static const json_value last = {.kind = JSON_INT, .i = -1}; /* Keras's default */
  if (fl_is_null(ax)) ax = &last;
  if (ax->kind == JSON_ARR && ax->n == 1) ax = &ax->items[0];
  int rank = x->type.rank;
  if (ax->kind != JSON_INT || (ax->i != -1 && ax->i != rank - 1) || rank < 2) {
    fl_unsupported(m, l, "axis", FL_PLAIN, "axis other than -1 (the last, the channels) is not supported");
    return false;
  }
  bool invert;
  if (!fl_cfg_bool(m, l, "invert", false, &invert)) return false;
  int64_t C = x->type.dims[rank - 1];
  ir_node *mean, *var;
  if (!fl_is_null(mv) || !fl_is_null(vv)) {
    mean = number_or_list(m, l, mv, "mean", fl_node_name(m, l, k, "mean"), C);
    var = mean ? number_or_list(m, l, vv, "variance", fl_node_name(m, l, k, "variance"), C) : NULL;
    if (!mean || !var) return false;
  } else {
    if (!l->weights_done) {
      ir_type ct = {DT_F32, 1, {C}};
      const char *mk = arena_printf(m->arena, "%s.mean", l->ir_name), *vk = arena_printf(m->arena, "%s.variance", l->ir_name);
      const float *md = fl_weight(m, l, 0, mk, "mean", &ct, FL_INIT_ZEROS);
      const float *vd = md ? fl_weight(m, l, 1, vk, "variance", &ct, FL_INIT_ONES) : NULL;
      if (!vd) return false;
      if (m->ignore_weight) m->ignore_weight(m, l, 2); /* the count of adapt() */
      l->w[0] = statistic(m, l, mk, &ct, md);
      l->w[1] = statistic(m, l, vk, &ct, vd);
      l->weights_done = true;
    }
    mean = l->w[0], var = l->w[1];
  }
  /* Each op in the layer's compute dtype ({compute=policy}), as Keras's call converts the input,
   * the mean and the variance to it (under mixed_bfloat16 ImageNet's mean and variance round to
   * bfloat16: EfficientNetV2's first layers). */
  ir_node *sd = fl_stamp(m, l, ir_build_unary(m->g, IR_OP_SQRT, fl_node_name(m, l, k, "stddev"), var, l->loc));
  sd->in_policy = true;
  sd = bin(m, l, IR_OP_MAXIMUM, fl_node_name(m, l, k, "stddev_eps"), sd,
           fl_literal(m, l, fl_node_name(m, l, k, "epsilon"), 1e-7));
  sd->in_policy = true;
  ir_node *y = bin(m, l, invert ? IR_OP_MUL : IR_OP_SUB, fl_node_name(m, l, k, invert ? "scaled" : "centered"), x,
                   invert ? sd : mean);
  y->in_policy = true;
  y = invert ? bin(m, l, IR_OP_ADD, fl_node_name(m, l, k, NULL), mean, y)
             : bin(m, l, IR_OP_DIV, fl_node_name(m, l, k, NULL), y, sd);
  y->in_policy = true;
  m->call->out = y;
  return true;
}

/* Cropping2D(cropping): an int, [h, w] or [[top, bottom], [left, right]]. */
bool fl_lower_cropping2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  if (!fl_image_input(m, l, x)) return false;
  const json_value *v = fl_cfg(l, "cropping");
  static const json_value no_crop = {.kind = JSON_INT, .i = 0}; /* Keras's default: ((0, 0), (0, 0)) */
  if (fl_is_null(v)) v = &no_crop;
  int64_t p[4];
  bool ok = v->kind == JSON_INT || (v->kind == JSON_ARR && v->n == 2);
  for (int i = 0; ok && i < 2; i++) {
    const json_value *e = v->kind == JSON_INT ? v : &v->items[i];
    for (int j = 0; ok && j < 2; j++) {
      const json_value *f = e->kind == JSON_ARR ? (e->n == 2 ? &e->items[j] : NULL) : e;
      ok = f && f->kind == JSON_INT && f->i >= 0 && f->i <= ((int64_t)1 << 20);
      if (ok) p[2 * i + j] = f->i;
    }
  }
  if (!ok) {
    fl_error(m, l, "cropping", FL_PLAIN, "cropping must be an integer, [h, w] or [[top, bottom], [left, right]] of "
             "integers >= 0");
    return false;
  }
  int64_t H = x->type.dims[1], W = x->type.dims[2];
  if (p[0] + p[1] >= H || p[2] + p[3] >= W) {
    fl_error(m, l, "cropping", FL_PLAIN, "cropping [[%lld, %lld], [%lld, %lld]] leaves nothing of %s",
             (long long)p[0], (long long)p[1], (long long)p[2], (long long)p[3], fl_type_str(m, &x->type));
    return false;
  }
  ir_attr a = {.starts = {4, {0, p[0], p[2], 0}}, .ends = {4, {0, H - p[1], W - p[3], x->type.dims[3]}},
               .steps = {4, {1, 1, 1, 1}}};
  return fl_layout_op(m, l, k, IR_OP_STRIDED_SLICE, NULL, &x, 1, &a, &m->call->out);
}

/* UpSampling2D, nearest: each row repeated size[0] times, each column size[1] times, as
 * broadcasts of the rows [N, H, 1, W*C] -> [N, H, sh, W*C] (%NAME.rows, %NAME.rows_up), then of
 * the columns [N, H*sh, W, 1, C] -> [N, H*sh, W, sw, C] (%NAME.cols, %NAME.cols_up), reshaped back
 * to [N, H*sh, W*sw, C]. Bilinear: image.c (fl_upsample_bilinear); the other interpolations are
 * refused by name. */
bool fl_lower_up_sampling2d(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  if (!fl_image_input(m, l, x)) return false;
  const json_value *it = fl_cfg(l, "interpolation");
  bool bilinear = !fl_is_null(it) && it->kind == JSON_STR && strcmp(it->s, "bilinear") == 0;
  if (!fl_is_null(it) && !bilinear && (it->kind != JSON_STR || strcmp(it->s, "nearest") != 0)) {
    if (it->kind == JSON_STR)
      fl_unsupported(m, l, "interpolation", FL_PLAIN, "interpolation '%s' is not supported (nearest, bilinear)", it->s);
    else
      fl_error(m, l, "interpolation", FL_PLAIN, "interpolation must be a name: nearest or bilinear");
    return false;
  }
  const json_value *v = fl_cfg(l, "size");
  static const json_value twice = {.kind = JSON_INT, .i = 2}; /* Keras's default: (2, 2) */
  if (fl_is_null(v)) v = &twice;
  int64_t s[2];
  bool ok = v->kind == JSON_INT || (v->kind == JSON_ARR && v->n == 2);
  for (int i = 0; ok && i < 2; i++) {
    const json_value *e = v->kind == JSON_INT ? v : &v->items[i];
    ok = e->kind == JSON_INT && e->i >= 1 && e->i <= 4096;
    if (ok) s[i] = e->i;
  }
  if (!ok) {
    fl_error(m, l, "size", FL_PLAIN, "size must be an integer or [rows, cols] of integers from 1 to 4096");
    return false;
  }
  int64_t H = x->type.dims[1], W = x->type.dims[2], C = x->type.dims[3];
  ir_type t = {x->type.dtype, 4, {IR_DIM_BATCH, H * s[0], W * s[1], C}};
  int64_t bytes;
  if (!ir_type_bytes(&t, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    fl_error(m, l, "size", FL_PLAIN, "size [%lld, %lld] makes %s larger than castor's tensor limit", (long long)s[0],
             (long long)s[1], fl_type_str(m, &x->type));
    return false;
  }
  if (bilinear) return fl_upsample_bilinear(m, l, k, x, s);
  ir_attr a1 = {.shape = {4, {IR_DIM_BATCH, H, 1, W * C}}}, a2 = {.shape = {4, {IR_DIM_BATCH, H, s[0], W * C}}},
          a3 = {.shape = {5, {IR_DIM_BATCH, H * s[0], W, 1, C}}},
          a4 = {.shape = {5, {IR_DIM_BATCH, H * s[0], W, s[1], C}}},
          a5 = {.shape = {4, {IR_DIM_BATCH, H * s[0], W * s[1], C}}};
  return fl_layout_op(m, l, k, IR_OP_RESHAPE, "rows", &x, 1, &a1, &x) &&
         fl_layout_op(m, l, k, IR_OP_BROADCAST_TO, "rows_up", &x, 1, &a2, &x) &&
         fl_layout_op(m, l, k, IR_OP_RESHAPE, "cols", &x, 1, &a3, &x) &&
         fl_layout_op(m, l, k, IR_OP_BROADCAST_TO, "cols_up", &x, 1, &a4, &x) &&
         fl_layout_op(m, l, k, IR_OP_RESHAPE, NULL, &x, 1, &a5, &m->call->out);
}

/* CustomScaleLayer (keras.src.applications.inception_resnet_v2; the host
 * takes the class from that module only): inputs[0] + inputs[1] * scale,
 * broadcast as numpy's, scale a [] literal (%NAME.scale). */
bool fl_lower_custom_scale(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  double scale;
  if (fl_is_null(fl_cfg(l, "scale"))) return fl_error(m, l, "scale", FL_PLAIN, "scale is required"), false;
  if (!fl_cfg_number(m, l, "scale", 0, -1e30, 1e30, &scale)) return false;
  if (n_in != 2) {
    fl_error(m, l, NULL, FL_PLAIN, "takes exactly two inputs (the shortcut and the residual), its call has %d", n_in);
    return false;
  }
  ir_node *r = bin(m, l, IR_OP_MUL, fl_node_name(m, l, k, "scaled"), in[1],
                   fl_literal(m, l, fl_node_name(m, l, k, "scale"), scale));
  ir_node *srcs[2] = {in[0], r};
  return fl_op_styled(m, l, k, IR_OP_ADD, NULL, srcs, 2, &(ir_attr){0}, FL_NAME_RULE, &m->call->out);
}
