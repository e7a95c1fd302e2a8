/* SPDX-License-Identifier: Apache-2.0 */
/*
 * image.c: the image layers of segmentation and generative heads that the
 * IR's existing ops express (issue 37):
 *
 *   Conv2DTranspose NAME  %NAME.kernel [KH, KW, filters, C] (Keras's shape,
 *                         vars/0), %NAME.bias [filters] (vars/1),
 *                         %NAME.conv_transpose = conv2d_input_grad (the
 *                         gradient of the convolution whose input it
 *                         produces, as ONNX's ConvTranspose), the bias add
 *                         and the activation as Conv2D's
 *   GroupNormalization    %NAME.groups [N, .., G, C/G] (a reshape), the
 *                         moments over every axis but the batch and the
 *                         group (%NAME.mean, .centered, .variance), then
 *                         Keras's x * inv + (beta - mean * inv) with inv =
 *                         rsqrt(variance + epsilon) * gamma (%NAME.gamma,
 *                         %NAME.beta [C], used as [G, C/G]), back to x's
 *                         shape
 *   UpSampling2D bilinear Keras's resize (half-pixel centres, edge samples
 *                         clamped) by an integer factor: per output phase r
 *                         two neighbours with [] literal weights
 *                         (%NAME.rows_R.*, %NAME.cols_R.*), the phases
 *                         interleaved by concat and reshape
 *
 * All channels last (NHWC), as the rest of the library.
 */
#include "frontend/layers/internal.h"

#include <math.h>

/* ---- Conv2DTranspose ---- */

/* Keras's padding of the transposed convolution along one axis, as its
 * JAX backend computes it (backend_utils.py,
 * _convert_conv_transpose_padding_args_from_keras_to_jax): the dilated
 * input is padded by lo and hi before a stride-1 convolution with the
 * kernel (dk its dilated extent); op < 0 means output_padding null. */
static void keras_transpose_pads(bool same, int64_t dk, int64_t stride, int64_t op, int64_t *lo, int64_t *hi) {
  if (!same) {
    if (op < 0) op = (dk > stride ? dk : stride) - dk;
    *lo = dk - 1;
    *hi = dk - 1 + op;
    return;
  }
  int64_t pad_len = op < 0 ? stride + dk - 2 : dk + dk % 2 - 2 + op;
  int64_t left = pad_len / 2 + pad_len % 2;
  *lo = left < dk - 1 ? left : dk - 1;
  *hi = pad_len - *lo;
}

bool fl_lower_conv2d_transpose(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int64_t filters, ks[2], st[2], dil[2], op[2] = {-1, -1};
  bool same, use_bias;
  fl_act act;
  if (!fl_cfg_int(m, l, "filters", INT64_MIN, 1, (int64_t)1 << 31, &filters) ||
      !fl_cfg_pair(m, l, "kernel_size", NULL, ks) || !fl_cfg_pair(m, l, "strides", (int64_t[]){1, 1}, st) ||
      !fl_cfg_pair(m, l, "dilation_rate", (int64_t[]){1, 1}, dil) || !fl_cfg_padding(m, l, &same) ||
      !fl_cfg_bool(m, l, "use_bias", true, &use_bias) || !fl_activation(m, l, &act) || !fl_image_input(m, l, x))
    return false;
  const json_value *opv = fl_cfg(l, "output_padding");
  if (!fl_is_null(opv)) {
    bool ok = opv->kind == JSON_INT || (opv->kind == JSON_ARR && opv->n == 2);
    for (int i = 0; ok && i < 2; i++) {
      const json_value *e = opv->kind == JSON_INT ? opv : &opv->items[i];
      ok = e->kind == JSON_INT && e->i >= 0 && (e->i < st[i] || e->i < dil[i]);
      if (ok) op[i] = e->i;
    }
    if (!ok) {
      fl_error(m, l, "output_padding", FL_PLAIN, "output_padding must be null, an integer or [rows, cols] of "
               "integers >= 0, each below its stride (strides [%lld, %lld])", (long long)st[0], (long long)st[1]);
      return false;
    }
  }
  int64_t C = x->type.dims[3];
  ir_type kt = {DT_F32, 4, {ks[0], ks[1], filters, C}}, bt = {DT_F32, 1, {filters}};
  int64_t bytes;
  if (!ir_type_bytes(&kt, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    fl_error(m, l, NULL, FL_PLAIN, "its kernel %s is larger than castor's tensor limit", fl_type_str(m, &kt));
    return false;
  }
  /* The output row h sums the input rows i with h = i*s - top + p*d: the
   * forward convolution's top pad is dk - 1 - lo; its bottom pad only has
   * to make that convolution's output the input's size again. */
  ir_attr a = {.acc = DT_F32, .strides = {2, {st[0], st[1]}}, .dilations = {2, {dil[0], dil[1]}}, .pads = {4, {0}},
               .shape = {4, {x->type.dims[0], 0, 0, filters}}};
  for (int i = 0; i < 2; i++) {
    int64_t in_len = x->type.dims[1 + i], dk = (ks[i] - 1) * dil[i] + 1, lo, hi;
    keras_transpose_pads(same, dk, st[i], op[i], &lo, &hi);
    int64_t len = (in_len - 1) * st[i] + 1 + lo + hi - (dk - 1);
    if (hi > dk + st[i] - 2 || len < 1 || len > ((int64_t)1 << 30)) {
      fl_error(m, l, NULL, FL_PLAIN, "kernel %lld, stride %lld and output_padding %lld give no output castor "
               "computes from %s", (long long)ks[i], (long long)st[i], (long long)op[i], fl_type_str(m, &x->type));
      return false;
    }
    a.pads.v[2 * i] = dk - 1 - lo;
    a.pads.v[2 * i + 1] = dk - 1 - hi > 0 ? dk - 1 - hi : 0;
    a.shape.dims[1 + i] = len;
  }
  ir_node probe = {.type = kt};
  ir_type out;
  char err[256];
  if (!ir_infer_type(IR_OP_CONV2D_INPUT_GRAD, (ir_node *[]){x, &probe}, 2, &a, &out, err, sizeof err)) {
    fl_error(m, l, NULL, FL_NAME_RULE, "%s", err);
    return false;
  }
  if (!ir_type_bytes(&out, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    fl_error(m, l, NULL, FL_PLAIN, "its output %s is larger than castor's tensor limit", fl_type_str(m, &out));
    return false;
  }
  if (!fl_kernel_bias(m, l, x, &kt, &bt, use_bias, false)) return false;
  bool has_act = act != FL_LINEAR;
  const char *cv = has_act || use_bias ? fl_node_name(m, l, k, "conv_transpose") : fl_node_name(m, l, k, NULL);
  const char *add = has_act ? fl_node_name(m, l, k, "bias_add") : fl_node_name(m, l, k, NULL);
  ir_node *y = fl_stamp(m, l, ir_build_op(m->g, IR_OP_CONV2D_INPUT_GRAD, cv, (ir_node *[]){x, l->w[0]}, 2, &a, l->loc));
  m->call->out = fl_bias_act(m, l, k, y, add, use_bias, act);
  return true;
}

/* ---- GroupNormalization ---- */

static ir_node *op2(fl_host *m, fl_layer *l, ir_op op, const char *name, ir_node *a, ir_node *b) {
  return fl_stamp(m, l, ir_build_binary(m->g, op, name, a, b, l->loc));
}

/* GroupNormalization(groups, axis=-1, epsilon, center, scale): Keras's
 * formula (group_normalization.py) in float32, in its order: x as [N, ..,
 * G, C/G], the mean and the (biased) variance over every axis but N and G,
 * inv = rsqrt(variance + epsilon) * gamma, x * inv + (beta - mean * inv)
 * (vars/0 gamma when scale, then beta when center). groups -1: one per
 * channel. */
bool fl_lower_group_norm(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  if (!fl_one_input(m, l, n_in)) return false;
  ir_node *x = in[0];
  int rank = x->type.rank;
  int64_t axis, groups;
  double eps;
  bool center, scale;
  if (!fl_cfg_int(m, l, "axis", -1, -IR_MAX_RANK, IR_MAX_RANK, &axis) ||
      !fl_cfg_int(m, l, "groups", 32, -1, (int64_t)1 << 31, &groups) ||
      !fl_cfg_number(m, l, "epsilon", 1e-3, 0, 1, &eps) || !fl_cfg_bool(m, l, "center", true, &center) ||
      !fl_cfg_bool(m, l, "scale", true, &scale))
    return false;
  if (rank < 2 || rank >= IR_MAX_RANK || x->type.dtype != DT_F32 || !ir_type_is_batched(&x->type)) {
    fl_error(m, l, "input", FL_KIND, "needs a float input [N, .., channels] of rank 2 to %d, got %s", IR_MAX_RANK - 1,
             fl_type_str(m, &x->type));
    return false;
  }
  if (axis != -1 && axis != rank - 1) {
    fl_unsupported(m, l, "axis", FL_KIND, "normalizes groups of the last (channel) axis of %s: axis=-1 or axis=%d "
                   "(channels last)", fl_type_str(m, &x->type), rank - 1);
    return false;
  }
  int64_t C = x->type.dims[rank - 1];
  if (groups == -1) groups = C;
  if (groups == 0 || C % groups) {
    fl_error(m, l, "groups", FL_PLAIN, "groups=%lld must divide the input's %lld channels", (long long)groups,
             (long long)C);
    return false;
  }
  ir_type ct = {DT_F32, 1, {C}};
  if (!l->weights_done) {
    int var = 0;
    static const char *const names[2] = {"gamma", "beta"};
    for (int i = 0; i < 2; i++) {
      if (!(i == 0 ? scale : center)) continue;
      const char *key = arena_printf(m->arena, "%s.%s", l->ir_name, names[i]);
      const float *d = fl_weight(m, l, var++, key, names[i], &ct, i == 0 ? FL_INIT_ONES : FL_INIT_ZEROS);
      if (!d) return false;
      l->w[i] = fl_stamp(m, l, ir_build_const(m->g, key, &ct, key, d, l->loc));
    }
    l->weights_done = true;
  } else if ((l->w[0] && !ir_type_eq(&l->w[0]->type, &ct)) || (l->w[1] && !ir_type_eq(&l->w[1]->type, &ct))) {
    fl_error(m, l, NULL, FL_PLAIN, "a shared call with input %s, the first call's channels differ",
             fl_type_str(m, &x->type));
    return false;
  }
  /* [N, d1.., C] -> [N, d1.., G, C/G]; the moments over all but 0 and G's axis */
  ir_attr ga = {.shape = {rank + 1, {0}}}, back = {.shape = {rank, {0}}}, ra = {.keepdims = 1};
  for (int r = 0; r < rank; r++) ga.shape.dims[r] = back.shape.dims[r] = x->type.dims[r];
  ga.shape.dims[rank - 1] = groups;
  ga.shape.dims[rank] = C / groups;
  for (int r = 1; r <= rank; r++)
    if (r != rank - 1) ra.axes.v[ra.axes.n++] = r;
  ir_node *g, *mean, *var;
  if (!fl_layout_op(m, l, k, IR_OP_RESHAPE, "groups", &x, 1, &ga, &g) ||
      !fl_op_styled(m, l, k, IR_OP_REDUCE_MEAN, "mean", &g, 1, &ra, FL_NAME_RULE, &mean))
    return false;
  ir_node *d = op2(m, l, IR_OP_SUB, fl_node_name(m, l, k, "centered"), g, mean);
  ir_node *sq = op2(m, l, IR_OP_MUL, fl_node_name(m, l, k, "squared"), d, d);
  if (!fl_op_styled(m, l, k, IR_OP_REDUCE_MEAN, "variance", &sq, 1, &ra, FL_NAME_RULE, &var)) return false;
  ir_node *ve = op2(m, l, IR_OP_ADD, fl_node_name(m, l, k, "variance_eps"), var,
                    fl_literal(m, l, fl_node_name(m, l, k, "epsilon"), eps));
  ir_node *inv = fl_stamp(m, l, ir_build_unary(m->g, IR_OP_RSQRT, fl_node_name(m, l, k, "inv"), ve, l->loc));
  /* Keras's order: inv = rsqrt(var + eps) * gamma, res = -mean * inv + beta, y = x * inv + res (gamma
   * and beta as [G, C/G], broadcast against the groups) */
  ir_attr pa = {.shape = {2, {groups, C / groups}}};
  ir_node *gb[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++)
    if (l->w[i] && !fl_layout_op(m, l, k, IR_OP_RESHAPE, i ? "beta_groups" : "gamma_groups", &l->w[i], 1, &pa, &gb[i]))
      return false;
  if (gb[0]) inv = op2(m, l, IR_OP_MUL, fl_node_name(m, l, k, "inv_gamma"), inv, gb[0]);
  ir_node *mi = op2(m, l, IR_OP_MUL, fl_node_name(m, l, k, "mean_inv"), mean, inv);
  ir_node *res = gb[1] ? op2(m, l, IR_OP_SUB, fl_node_name(m, l, k, "shift"), gb[1], mi)
                       : fl_stamp(m, l, ir_build_unary(m->g, IR_OP_NEG, fl_node_name(m, l, k, "shift"), mi, l->loc));
  ir_node *y = op2(m, l, IR_OP_ADD, fl_node_name(m, l, k, "normalized"),
                   op2(m, l, IR_OP_MUL, fl_node_name(m, l, k, "scaled"), g, inv), res);
  if (!fl_layout_op(m, l, k, IR_OP_RESHAPE, NULL, &y, 1, &back, &y)) return false;
  m->call->out = y;
  return true;
}

/* ---- UpSampling2D, bilinear ---- */

/* x's slice [lo, hi) along axis a (1 or 2). */
static bool slice_axis(fl_host *m, fl_layer *l, int k, ir_node *x, int a, int64_t lo, int64_t hi, const char *sfx,
                       ir_node **out) {
  ir_attr sa = {.starts = {4, {0, 0, 0, 0}}, .ends = {4, {0, x->type.dims[1], x->type.dims[2], x->type.dims[3]}},
                .steps = {4, {1, 1, 1, 1}}};
  sa.starts.v[a] = lo;
  sa.ends.v[a] = hi;
  return fl_layout_op(m, l, k, IR_OP_STRIDED_SLICE, sfx, &x, 1, &sa, out);
}

/* x shifted by one along axis a, the edge element repeated: the previous
 * neighbour (dir -1) or the next (dir +1) of every element. */
static bool shifted(fl_host *m, fl_layer *l, int k, ir_node *x, int a, int dir, const char *ax, ir_node **out) {
  int64_t len = x->type.dims[a];
  if (len == 1) return *out = x, true;
  ir_node *p[2];
  const char *nm = arena_printf(m->arena, "%s_%s", ax, dir < 0 ? "prev" : "next");
  if (!slice_axis(m, l, k, x, a, dir < 0 ? 0 : 1, dir < 0 ? 1 : len, arena_printf(m->arena, "%s.a", nm), &p[0]) ||
      !slice_axis(m, l, k, x, a, dir < 0 ? 0 : len - 1, dir < 0 ? len - 1 : len, arena_printf(m->arena, "%s.b", nm),
                  &p[1]))
    return false;
  return fl_layout_op(m, l, k, IR_OP_CONCAT, nm, p, 2, &(ir_attr){.axis = a}, out);
}

/* Axis a (1: rows, 2: columns) of x resized by the integer factor s as Keras's bilinear resize
 * does (jax.image.resize: output o samples the input at (o + 0.5) / s - 0.5, its two neighbours
 * weighted by distance, a sample outside the first or last centre taking that edge element
 * whole). With an integer factor output i*s + r depends on r alone: at f = (r + 0.5) / s - 0.5,
 * x*(1 - f) + next*f for f >= 0, prev*(-f) + x*(1 + f) for f < 0, the weights [] literals (no
 * constant a training step could take for a weight). The s phases are interleaved by a concat
 * along a new axis after a (a chain past IR_MAX_SRCS) and a reshape. */
static bool bilinear_axis(fl_host *m, fl_layer *l, int k, ir_node *x, int a, int64_t s, bool last, ir_node **out) {
  const char *ax = a == 1 ? "rows" : "cols";
  ir_node *prev, *next;
  if (!shifted(m, l, k, x, a, -1, ax, &prev) || !shifted(m, l, k, x, a, +1, ax, &next)) return false;
  int64_t N = x->type.dims[0], H = x->type.dims[1], W = x->type.dims[2], C = x->type.dims[3];
  /* each phase as [N, H, 1, W*C] (rows) or [N, H, W, 1, C] (columns) */
  ir_attr pa = a == 1 ? (ir_attr){.shape = {4, {N, H, 1, W * C}}} : (ir_attr){.shape = {5, {N, H, W, 1, C}}};
  ir_node *acc = NULL, *ops[IR_MAX_SRCS];
  int n = 0;
  for (int64_t r = 0; r < s; r++) {
    double f = ((double)r + 0.5) / (double)s - 0.5;
    const char *ph = arena_printf(m->arena, "%s_%lld", ax, (long long)r);
    ir_node *y = x;
    if (f != 0) {
      ir_node *nb = f > 0 ? next : prev;
      double wn = fabs(f), wx = 1 - fabs(f);
      ir_node *t0 = op2(m, l, IR_OP_MUL, fl_node_name(m, l, k, arena_printf(m->arena, "%s.self", ph)), x,
                        fl_literal(m, l, fl_node_name(m, l, k, arena_printf(m->arena, "%s.w_self", ph)), wx));
      ir_node *t1 = op2(m, l, IR_OP_MUL, fl_node_name(m, l, k, arena_printf(m->arena, "%s.near", ph)), nb,
                        fl_literal(m, l, fl_node_name(m, l, k, arena_printf(m->arena, "%s.w_near", ph)), wn));
      y = op2(m, l, IR_OP_ADD, fl_node_name(m, l, k, arena_printf(m->arena, "%s.sum", ph)), t0, t1);
    }
    if (!fl_layout_op(m, l, k, IR_OP_RESHAPE, ph, &y, 1, &pa, &y)) return false;
    if (n == IR_MAX_SRCS) { /* join what is there, go on from it */
      if (!fl_layout_op(m, l, k, IR_OP_CONCAT, arena_printf(m->arena, "%s_part%lld", ax, (long long)r), ops, n,
                        &(ir_attr){.axis = a + 1}, &acc))
        return false;
      n = 0;
      ops[n++] = acc;
    }
    ops[n++] = y;
  }
  ir_node *j = ops[0];
  if (n > 1 && !fl_layout_op(m, l, k, IR_OP_CONCAT, arena_printf(m->arena, "%s_phases", ax), ops, n,
                             &(ir_attr){.axis = a + 1}, &j))
    return false;
  ir_attr ba = {.shape = {4, {N, a == 1 ? H * s : H, a == 2 ? W * s : W, C}}};
  return fl_layout_op(m, l, k, IR_OP_RESHAPE, last ? NULL : arena_printf(m->arena, "%s_up", ax), &j, 1, &ba, out);
}

/* x [N, H, W, C] resized to [N, H*sh, W*sw, C]: the rows, then the columns (a factor 1 leaves its
 * axis as it is). Factors up to 64 (each phase is a few nodes). */
bool fl_upsample_bilinear(fl_host *m, fl_layer *l, int k, ir_node *x, const int64_t *s) {
  if (s[0] > 64 || s[1] > 64) {
    fl_unsupported(m, l, "size", FL_PLAIN, "bilinear size [%lld, %lld] is not supported: castor interpolates "
                   "factors up to 64", (long long)s[0], (long long)s[1]);
    return false;
  }
  if (s[0] > 1 && !bilinear_axis(m, l, k, x, 1, s[0], s[1] == 1, &x)) return false;
  if (s[1] > 1 && !bilinear_axis(m, l, k, x, 2, s[1], true, &x)) return false;
  m->call->out = x;
  return true;
}
