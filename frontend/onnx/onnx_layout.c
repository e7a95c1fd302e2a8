/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_layout.c: NCHW graphs run in NHWC (internal.h), and the ops that
 * need it: Conv, MaxPool, AveragePool, the global pools, ReduceMean over
 * the spatial axes, BatchNormalization.
 *
 * ONNX's convolutions and pooling are channels first ([N, C, H, W]);
 * castor's conv2d and pooling are channels last ([N, H, W, C]). Each
 * run-time value carries a layout (imp_val.layout):
 *
 *   OI_PLAIN    the IR node holds the ONNX dims in ONNX's order;
 *   OI_CL       an ONNX [N, C, S1..Sk] held as IR [N, S1..Sk, C];
 *   OI_FLAT_CL  an ONNX [N, C*S] (Flatten or Reshape of a channels-last
 *               value at axis 1) held as IR [N, S*C]: the features in
 *               channels-last order.
 *
 * Convolutions and pooling produce OI_CL; element-wise ops, batch
 * normalization and the axis-taking ops that know layouts (Concat,
 * Softmax) keep it; every other op takes its operands through oi_operand,
 * which transposes a value back to ONNX's order (once per value, in the
 * producer's layer), and so do graph outputs. A MatMul or Gemm whose input
 * is OI_FLAT_CL with constant weights permutes the weights' rows at import
 * instead: PyTorch's conv -> flatten -> linear has no transpose at run
 * time.
 */
#include "frontend/onnx/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- layouts ---- */

/* Dimension r of a channels-last IR value of rank R is ONNX dimension
 * cl_dim(r, R): [0, 2, 3, .., R-1, 1]. */
static int cl_dim(int r, int R) { return r == 0 ? 0 : r == R - 1 ? 1 : r + 1; }

void oi_onnx_dims(const imp_val *v, int *rank, int64_t *dims) {
  if (v->k) {
    *rank = v->k->rank;
    for (int r = 0; r < *rank; r++) dims[r] = v->k->dims[r];
    return;
  }
  const ir_type *t = &v->node->type;
  *rank = t->rank;
  for (int r = 0; r < t->rank; r++) dims[v->layout == OI_CL ? cl_dim(r, t->rank) : r] = t->dims[r];
}

/* Builds a one-operand op in v's producer's layer and location (a
 * transpose added when a later node needs v in another layout). */
static ir_node *build_for(imp *im, const imp_val *v, ir_op op, const char *suffix, ir_node *src,
                          const ir_attr *a) {
  const char *layer = im->layer;
  diag_loc loc = im->loc;
  if (v->layer) im->layer = v->layer, im->loc = v->loc;
  ir_node *y = oi_build(im, op, suffix, &src, 1, a);
  im->layer = layer, im->loc = loc;
  return y;
}

static ir_node *reshape(imp *im, const imp_val *v, const char *suffix, ir_node *x, int rank, const int64_t *dims) {
  ir_attr a = {.shape = {.rank = rank}};
  for (int r = 0; r < rank; r++) a.shape.dims[r] = dims[r];
  return build_for(im, v, IR_OP_RESHAPE, suffix, x, &a);
}

/* A transpose, or a reshape where it keeps the element order (the
 * dimensions it moves are 1s: a one-channel image). */
static ir_node *transpose(imp *im, const imp_val *v, const char *suffix, ir_node *x, const int *perm) {
  int last = -1;
  bool order_kept = true;
  int64_t dims[IR_MAX_RANK];
  for (int r = 0; r < x->type.rank; r++) {
    dims[r] = x->type.dims[perm[r]];
    if (dims[r] == 1) continue;
    order_kept &= perm[r] > last;
    last = perm[r];
  }
  if (order_kept) return reshape(im, v, suffix, x, x->type.rank, dims);
  ir_attr a = {.perm = {.n = x->type.rank}};
  for (int r = 0; r < x->type.rank; r++) a.perm.v[r] = perm[r];
  return build_for(im, v, IR_OP_TRANSPOSE, suffix, x, &a);
}

static bool spatial_ones(const ir_type *cl) {
  for (int r = 1; r < cl->rank - 1; r++)
    if (cl->dims[r] != 1) return false;
  return true;
}

/* A channels-last value in ONNX's order: a transpose, or a reshape when
 * every spatial dimension is 1 (the same element order). */
static ir_node *cl_to_plain(imp *im, const imp_val *v, ir_node *x) {
  int R = x->type.rank;
  int64_t dims[IR_MAX_RANK];
  int perm[IR_MAX_RANK];
  for (int r = 0; r < R; r++) dims[cl_dim(r, R)] = x->type.dims[r];
  if (spatial_ones(&x->type)) return reshape(im, v, "nchw", x, R, dims);
  /* plain dimension p is channels-last dimension perm[p] */
  for (int r = 0; r < R; r++) perm[cl_dim(r, R)] = r;
  return transpose(im, v, "nchw", x, perm);
}

ir_node *oi_plain(imp *im, imp_val *v) {
  if (v->layout == OI_PLAIN || !v->node) return oi_operand(im, v);
  if (v->alt) return v->alt;
  ir_node *y = NULL;
  if (v->layout == OI_CL) {
    y = cl_to_plain(im, v, v->node);
  } else { /* OI_FLAT_CL: back to [N, S.., C], to [N, C, S..], flat again */
    ir_node *x = reshape(im, v, "unflat", v->node, v->cl.rank, v->cl.dims);
    x = x ? cl_to_plain(im, v, x) : NULL;
    y = x ? reshape(im, v, "flat", x, v->node->type.rank, v->node->type.dims) : NULL;
  }
  return v->alt = y;
}

/* Host data of ONNX dims `dims` (rank R) permuted to channels last. */
static float *cl_data(imp *im, const float *src, int R, const int64_t *dims, int64_t numel) {
  float *dst = arena_alloc_aligned(im->g->arena, (size_t)(numel ? numel : 1) * sizeof *dst, 64);
  int64_t stride[ONNX_MAX_RANK], c[ONNX_MAX_RANK] = {0};
  stride[R - 1] = 1;
  for (int r = R - 2; r >= 0; r--) stride[r] = stride[r + 1] * dims[r + 1];
  for (int64_t i = 0; i < numel; i++) { /* c walks the channels-last order */
    int64_t off = 0;
    for (int r = 0; r < R; r++) off += c[r] * stride[cl_dim(r, R)];
    dst[i] = src[off];
    for (int r = R - 1; r >= 0; r--) {
      if (++c[r] < dims[cl_dim(r, R)]) break;
      c[r] = 0;
    }
  }
  return dst;
}

/* A constant as the operand of a channels-last op of rank R: its dims
 * aligned to the right (numpy), padded to R, permuted, leading 1s dropped
 * (so it broadcasts against the batch N). */
static ir_node *const_cl(imp *im, imp_val *v, int R) {
  const onnx_tensor *k = v->k;
  if (k->rank > R) return NULL;
  const float *src = oi_const_f32(im, k);
  if (!src) return NULL;
  int64_t dims[ONNX_MAX_RANK];
  for (int r = 0; r < R; r++) dims[r] = r < R - k->rank ? 1 : k->dims[r - (R - k->rank)];
  float *data = cl_data(im, src, R, dims, k->numel);
  ir_type t = {.dtype = DT_F32};
  int first = 0;
  while (first < R - 1 && dims[cl_dim(first, R)] == 1) first++;
  t.rank = R - first;
  for (int r = first; r < R; r++) t.dims[r - first] = dims[cl_dim(r, R)];
  const char *wname = arena_printf(im->g->arena, "%s'", k->name);
  ir_node *c = ir_build_const(im->g, oi_ir_name(im, k->name, "const"), &t, wname, data, im->loc);
  c->layer = im->layer;
  c->frozen = !v->param;
  return c;
}

ir_node *oi_channels_last(imp *im, imp_val *v) {
  if (!v) return NULL;
  if (v->node && v->layout == OI_CL) return v->node;
  if (v->alt) return v->alt;
  int R;
  int64_t dims[ONNX_MAX_RANK];
  oi_onnx_dims(v, &R, dims);
  if (R < 3 || v->layout != OI_PLAIN) {
    FAIL(im, "%s needs a tensor [N, C, spatial..] of rank 3 or more, got rank %d", im->node->op_type, R);
    return NULL;
  }
  if (!v->node && v->k) return v->alt = const_cl(im, v, R);
  int perm[IR_MAX_RANK];
  for (int r = 0; r < R; r++) perm[r] = cl_dim(r, R);
  /* a graph input has no producer: the transpose is the first user's */
  return v->alt = transpose(im, v, "nhwc", v->node, perm);
}

ir_node *oi_operand_as(imp *im, imp_val *v, oi_layout *layout) {
  *layout = v && v->node ? v->layout : OI_PLAIN;
  return v && v->node ? v->node : oi_operand(im, v);
}

bool oi_define_output_as(imp *im, int k, ir_node *n, oi_layout layout, const ir_type *cl) {
  if (!oi_define_output(im, k, n)) return false;
  imp_val *v = *im->node->outputs[k] ? oi_val_find(im, im->node->outputs[k]) : NULL;
  if (v) {
    v->layout = layout;
    if (cl) v->cl = *cl;
  }
  return true;
}

bool oi_val_alias(imp *im, const char *name, const imp_val *v) {
  if (!oi_val_define(im, name, v->node, v->k)) return false;
  imp_val *a = *name ? oi_val_find(im, name) : NULL;
  if (a) a->layout = v->layout, a->cl = v->cl, a->alt = v->alt;
  return true;
}

/* The operands of an element-wise op in one layout: channels last when a
 * channels-last value meets only channels-last values of its rank (any
 * shapes that broadcast, or join: the same dims permuted alike),
 * constants (permuted at import) and run-time values of its rank
 * (transposed); OI_FLAT_CL when flattened values of one shape meet only
 * scalar constants; otherwise ONNX's order. */
bool oi_eltwise_operands(imp *im, imp_val **vals, int n, ir_node **out, oi_layout *layout, ir_type *cl) {
  *layout = OI_PLAIN;
  if (cl) *cl = (ir_type){0};
  bool ints = false;
  for (int i = 0; i < n; i++) {
    if (!vals[i]) return false;
    ints |= vals[i]->node && !dtype_is_float(vals[i]->node->type.dtype);
  }
  if (ints) { /* integers and booleans (onnx_int.c): plain, constants in their own dtype */
    for (int i = 0; i < n; i++)
      if (!(out[i] = oi_int_operand(im, vals[i]))) return false;
    return oi_check_numeric(im, out, n);
  }
  const imp_val *lead = NULL;
  for (int i = 0; i < n && !lead; i++)
    if (vals[i]->node && vals[i]->layout != OI_PLAIN) lead = vals[i];
  if (lead) {
    int R = lead->node->type.rank;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
      const imp_val *v = vals[i];
      if (v->node && v->layout != OI_PLAIN && !v->k)
        ok = v->layout == lead->layout && v->node->type.rank == R &&
             (v->layout == OI_CL || ir_type_eq(&v->cl, &lead->cl));
      else if (v->k)
        ok = lead->layout == OI_CL ? v->k->rank <= R : v->k->numel == 1;
      else
        ok = lead->layout == OI_CL && v->node->type.rank == R;
    }
    if (ok) {
      *layout = lead->layout;
      if (cl) *cl = lead->cl;
      for (int i = 0; i < n; i++) {
        imp_val *v = vals[i];
        if (v->node && v->layout == lead->layout && !v->k) out[i] = v->node;
        else if (lead->layout == OI_FLAT_CL) out[i] = oi_operand(im, v); /* a scalar */
        else if (v->k) out[i] = const_cl(im, v, R);
        else out[i] = oi_channels_last(im, v);
        if (!out[i]) return false;
      }
      return true;
    }
  }
  for (int i = 0; i < n; i++)
    if (!(out[i] = oi_operand(im, vals[i]))) return false;
  return true;
}

/* Flatten at axis 1 of a channels-last value: [N, S.., C] to [N, S*C]
 * kept in channels-last order (OI_FLAT_CL; plain when S is 1). *done is
 * false for a value that is not channels last. */
bool oi_flatten_cl(imp *im, imp_val *v, bool *done) {
  *done = false;
  if (!v->node || v->layout != OI_CL || v->k) return true;
  *done = true;
  const ir_type *t = &v->node->type;
  int64_t dims[2] = {t->dims[0], 1};
  for (int r = 1; r < t->rank; r++) dims[1] *= t->dims[r];
  ir_attr a = {.shape = {.rank = 2, .dims = {dims[0], dims[1]}}};
  ir_node *y = oi_build(im, IR_OP_RESHAPE, NULL, &v->node, 1, &a);
  if (spatial_ones(t)) return oi_define_output(im, 0, y);
  return oi_define_output_as(im, 0, y, OI_FLAT_CL, t);
}

/* The rows of w [K, P] (ONNX's features in channels-first order) for an
 * input whose features are in channels-last order (cl [N, S.., C]). */
const float *oi_rows_from_flat_cl(imp *im, const ir_type *cl, const float *w, int64_t K, int64_t P) {
  int64_t C = cl->dims[cl->rank - 1], S = 1;
  for (int r = 1; r < cl->rank - 1; r++) S *= cl->dims[r];
  CASTOR_ASSERT(S * C == K);
  float *o = arena_alloc_aligned(im->g->arena, (size_t)(K * P > 0 ? K * P : 1) * sizeof *o, 64);
  for (int64_t s = 0; s < S; s++)
    for (int64_t c = 0; c < C; c++) memcpy(o + (s * C + c) * P, w + (c * S + s) * P, (size_t)P * sizeof *o);
  return o;
}

/* ---- windows: kernel, strides, dilations, pads ---- */

typedef struct win {
  int n;                                   /* spatial dimensions: 1 or 2 */
  int64_t in[2], k[2], s[2], d[2], lo[2], hi[2];
} win;

static bool ints_attr(imp *im, const char *name, int want, int64_t def, int64_t *out, bool *given) {
  const onnx_attr *a = oi_attr_find(im, name);
  if (given) *given = a != NULL;
  for (int i = 0; i < want; i++) out[i] = def;
  if (!a) return true;
  if (!oi_attr_typed(im, a, ONNX_ATTR_INTS)) return false;
  if (a->n != want)
    return FAIL(im, "%s's %s has %d entries; the input has %d spatial dimensions (%s needs %d)",
                im->node->op_type, name, a->n, want / (str_eq(name, "pads") ? 2 : 1), name, want);
  for (int i = 0; i < want; i++) out[i] = a->ints[i];
  return true;
}

/* Reads kernel_shape (must match w->k where a weight set it, w->k[0] > 0),
 * strides, dilations and pads or auto_pad into w. */
static bool window_attrs(imp *im, win *w) {
  int64_t ks[2];
  bool given;
  if (!ints_attr(im, "kernel_shape", w->n, 0, ks, &given)) return false;
  for (int i = 0; i < w->n; i++) {
    if (w->k[0] > 0 && given && ks[i] != w->k[i])
      return FAIL(im, "%s's kernel_shape [%lld..] differs from its weight's spatial dims", im->node->op_type,
                  (long long)ks[0]);
    if (w->k[0] == 0 && !given) return FAIL(im, "%s needs its kernel_shape attribute", im->node->op_type);
  }
  if (w->k[0] == 0)
    for (int i = 0; i < w->n; i++) w->k[i] = ks[i];
  int64_t pads[4];
  bool have_pads;
  if (!ints_attr(im, "strides", w->n, 1, w->s, NULL) || !ints_attr(im, "dilations", w->n, 1, w->d, NULL) ||
      !ints_attr(im, "pads", 2 * w->n, 0, pads, &have_pads))
    return false;
  for (int i = 0; i < w->n; i++) {
    if (w->k[i] < 1 || w->s[i] < 1 || w->d[i] < 1 || w->k[i] > (1 << 20) || w->s[i] > (1 << 20) || w->d[i] > (1 << 20))
      return FAIL(im, "%s's kernel_shape, strides and dilations must be in [1, 2^20], got %lld, %lld, %lld",
                  im->node->op_type, (long long)w->k[i], (long long)w->s[i], (long long)w->d[i]);
    if (pads[i] < 0 || pads[i + w->n] < 0)
      return UNSUPPORTED(im, "%s with negative pads (cropping) is not supported", im->node->op_type);
    if (pads[i] > (1 << 20) || pads[i + w->n] > (1 << 20))
      return FAIL(im, "%s's pads must be at most 2^20", im->node->op_type);
    w->lo[i] = pads[i], w->hi[i] = pads[i + w->n];
  }
  const onnx_attr *ap = oi_attr_find(im, "auto_pad");
  if (!ap) return true;
  if (!oi_attr_typed(im, ap, ONNX_ATTR_STRING)) return false;
  if (str_eq(ap->s, "NOTSET")) return true;
  if (have_pads) return FAIL(im, "%s has both pads and auto_pad=%s", im->node->op_type, ap->s);
  bool upper = str_eq(ap->s, "SAME_UPPER");
  if (!upper && !str_eq(ap->s, "SAME_LOWER") && !str_eq(ap->s, "VALID"))
    return FAIL(im, "%s's auto_pad is '%s'; ONNX's are NOTSET, SAME_UPPER, SAME_LOWER and VALID", im->node->op_type,
                ap->s);
  for (int i = 0; i < w->n && !str_eq(ap->s, "VALID"); i++) {
    /* SAME: ceil(in / stride) outputs, the odd pad at the end (UPPER) or the start */
    int64_t out = (w->in[i] + w->s[i] - 1) / w->s[i];
    int64_t total = (out - 1) * w->s[i] + (w->k[i] - 1) * w->d[i] + 1 - w->in[i];
    if (total < 0) total = 0;
    w->lo[i] = upper ? total / 2 : total - total / 2;
    w->hi[i] = total - w->lo[i];
  }
  return true;
}

/* The IR attributes of w, a 1-D window as a 2-D one of height 1. */
static void window_ir(const win *w, ir_attr *a) {
  int o = w->n == 1 ? 1 : 0;
  a->strides = (ir_attr_INTS){.n = 2, .v = {1, 1}};
  a->dilations = (ir_attr_INTS){.n = 2, .v = {1, 1}};
  a->pool = (ir_attr_INTS){.n = 2, .v = {1, 1}};
  a->pads = (ir_attr_INTS){.n = 4};
  for (int i = 0; i < w->n; i++) {
    a->strides.v[i + o] = w->s[i], a->dilations.v[i + o] = w->d[i], a->pool.v[i + o] = w->k[i];
    a->pads.v[2 * (i + o)] = w->lo[i], a->pads.v[2 * (i + o) + 1] = w->hi[i];
  }
}

/* x's ONNX dims, checked to be [N, C, S1] or [N, C, S1, S2], into w->in. */
static bool spatial_input(imp *im, imp_val *v, win *w, int64_t *dims) {
  int rank;
  oi_onnx_dims(v, &rank, dims);
  if (rank == 5)
    return UNSUPPORTED(im, "%s over 3 spatial dimensions: castor's convolutions and pooling are 1-D and 2-D",
                       im->node->op_type);
  if (rank != 3 && rank != 4)
    return FAIL(im, "%s needs an input [N, C, spatial..] of rank 3 or 4, got rank %d", im->node->op_type, rank);
  *w = (win){.n = rank - 2};
  for (int i = 0; i < w->n; i++) w->in[i] = dims[2 + i];
  return true;
}

/* The channels-last operand of a 1-D or 2-D op, 1-D as [N, 1, W, C]. */
static ir_node *cl_2d(imp *im, imp_val *v, const win *w) {
  ir_node *x = oi_channels_last(im, v);
  if (!x || w->n == 2) return x;
  ir_attr a = {.shape = {.rank = 4, .dims = {x->type.dims[0], 1, x->type.dims[1], x->type.dims[2]}}};
  return oi_build(im, IR_OP_RESHAPE, "h1", &x, 1, &a);
}

/* Defines output 0 as channels-last y, a 1-D result [N, 1, W, C] as [N, W, C]. */
static bool define_cl(imp *im, const win *w, ir_node *y) {
  if (y && w->n == 1) {
    ir_attr a = {.shape = {.rank = 3, .dims = {y->type.dims[0], y->type.dims[2], y->type.dims[3]}}};
    y = oi_build(im, IR_OP_RESHAPE, "1d", &y, 1, &a);
  }
  return oi_define_output_as(im, 0, y, OI_CL, NULL);
}

/* ---- Conv ---- */

/* A conv weight [A, B, S] (S the window's positions) to [S, B, A]: dst[(s*B
 * + b)*A + a] = src[(a*B + b)*S + s]. In blocks of 16 a, so each block writes
 * 64-byte runs while reading 16 rows front to back (a plain loop in either
 * order strides through one of the two: most of resnet50's import time). */
static void outer_to_inner(const float *src, float *dst, int64_t A, int64_t B, int64_t S) {
  for (int64_t a0 = 0; a0 < A; a0 += 16) {
    int64_t a1 = a0 + 16 < A ? a0 + 16 : A;
    for (int64_t b = 0; b < B; b++)
      for (int64_t k = 0; k < S; k++)
        for (int64_t a = a0; a < a1; a++) dst[(k * B + b) * A + a] = src[(a * B + b) * S + k];
  }
}

bool oi_lower_conv(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *vx = oi_input(im, 0), *vw = vx ? oi_input(im, 1) : NULL;
  if (!vw) return false;
  int64_t xd[ONNX_MAX_RANK], wd[ONNX_MAX_RANK], group;
  win w;
  if (!spatial_input(im, vx, &w, xd) || !oi_attr_int(im, "group", 1, &group)) return false;
  if (group < 1 || xd[1] % group)
    return FAIL(im, "Conv's group %lld does not divide the input's %lld channels", (long long)group,
                (long long)xd[1]);
  int wr;
  oi_onnx_dims(vw, &wr, wd);
  if (wr != w.n + 2 || wd[1] != xd[1] / group || wd[0] < 1 || wd[0] % group)
    return FAIL(im, "Conv's weight must be [M, C/group, k..] of rank %d with C = the input's %lld channels, "
                "group %lld and M a multiple of group", w.n + 2, (long long)xd[1], (long long)group);
  for (int i = 0; i < w.n; i++) w.k[i] = wd[2 + i];
  if (w.k[0] < 1) return FAIL(im, "Conv's weight has an empty kernel");
  if (!window_attrs(im, &w)) return false;
  ir_node *x = cl_2d(im, vx, &w), *wt;
  if (!x) return false;
  int64_t O = wd[0], C = wd[1], KH = w.n == 2 ? wd[2] : 1, KW = wd[w.n + 1];
  if (vw->k) { /* OIHW to HWIO at import */
    const float *src = oi_const_f32(im, vw->k);
    if (!src) return false;
    float *dst = arena_alloc_aligned(im->g->arena, (size_t)(vw->k->numel ? vw->k->numel : 1) * sizeof *dst, 64);
    outer_to_inner(src, dst, O, C, KH * KW);
    ir_type t = {.dtype = DT_F32, .rank = 4, .dims = {KH, KW, C, O}};
    wt = ir_build_const(im->g, oi_ir_name(im, im->layer, "hwio"), &t, arena_printf(im->g->arena, "%s'", vw->k->name),
                        dst, im->loc);
    wt->layer = im->layer;
    wt->frozen = !vw->param;
  } else { /* a run-time weight: transposed at run time */
    wt = oi_operand(im, vw);
    if (wt && w.n == 1) {
      ir_attr a = {.shape = {.rank = 4, .dims = {O, C, 1, KW}}};
      wt = oi_build(im, IR_OP_RESHAPE, "w_h1", &wt, 1, &a);
    }
    if (wt && ir_type_is_batched(&wt->type)) return UNSUPPORTED(im, "Conv's weight has the batch N");
    ir_attr a = {.perm = {.n = 4, .v = {2, 3, 1, 0}}};
    wt = wt ? oi_build(im, IR_OP_TRANSPOSE, "hwio", &wt, 1, &a) : NULL;
  }
  if (!wt) return false;
  ir_attr a = {.acc = DT_F32};
  window_ir(&w, &a);
  bool bias = oi_has_input(im, 2);
  /* group > 1: group_conv2d, whose w [KH, KW, C/G, O] is the same transform
   * of ONNX's [M, C/G, k..] (output channels grouped contiguously in both) */
  ir_node *y = oi_build(im, group > 1 ? IR_OP_GROUP_CONV2D : IR_OP_CONV2D, bias ? "conv" : NULL,
                        (ir_node *[]){x, wt}, 2, &a);
  if (y && bias) {
    ir_node *b = oi_operand(im, oi_input(im, 2));
    if (!b) return false;
    if (b->type.rank != 1 || b->type.dims[0] != O)
      return FAIL(im, "Conv's bias must be [%lld] (one per output channel)", (long long)O);
    y = oi_build(im, IR_OP_ADD, NULL, (ir_node *[]){y, b}, 2, NULL);
  }
  return define_cl(im, &w, y);
}

/* ---- ConvTranspose ---- */

/* ConvTranspose is the gradient of a convolution with respect to its input:
 * conv2d_input_grad (group_conv2d_input_grad for group > 1) of x [N, H, W,
 * Cin] (held channels last) by W [Cin, Cout/group, k..] made [KH, KW,
 * Cout/group, Cin] at import (a run-time W: a transpose), into the output
 * shape (in - 1) * stride - pads + dilation * (k - 1) + output_padding + 1.
 * The forward convolution that shape describes (the op's type rule) keeps
 * the end pads; output_padding only adds rows the kernel fills as usual. */
bool oi_lower_conv_transpose(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *vx = oi_input(im, 0), *vw = vx ? oi_input(im, 1) : NULL;
  if (!vw) return false;
  int64_t xd[ONNX_MAX_RANK], wd[ONNX_MAX_RANK], group, op[2];
  win w;
  if (!spatial_input(im, vx, &w, xd) || !oi_attr_int(im, "group", 1, &group)) return false;
  int wr;
  oi_onnx_dims(vw, &wr, wd);
  if (group < 1 || xd[1] % group || wr != w.n + 2 || wd[0] != xd[1])
    return FAIL(im, "ConvTranspose's weight must be [C, M/group, k..] of rank %d with C = the input's %lld channels "
                "and group dividing C", w.n + 2, (long long)xd[1]);
  for (int i = 0; i < w.n; i++) w.k[i] = wd[2 + i];
  if (w.k[0] < 1) return FAIL(im, "ConvTranspose's weight has an empty kernel");
  int64_t shape[2];
  bool have_shape;
  if (!window_attrs(im, &w) || !ints_attr(im, "output_padding", w.n, 0, op, NULL) ||
      !ints_attr(im, "output_shape", w.n, 0, shape, &have_shape))
    return false;
  const onnx_attr *ap = oi_attr_find(im, "auto_pad");
  bool same = ap && (str_eq(ap->s, "SAME_UPPER") || str_eq(ap->s, "SAME_LOWER"));
  int64_t oh[2];
  for (int i = 0; i < w.n; i++) {
    if (op[i] < 0 || (op[i] >= w.s[i] && op[i] >= w.d[i]))
      return FAIL(im, "ConvTranspose's output_padding %lld must be below its stride or dilation", (long long)op[i]);
    if (have_shape || same || (ap && str_eq(ap->s, "VALID"))) {
      /* the pads that give output_shape, or ConvTranspose's own SAME (out = in * stride), split as ONNX
       * Runtime does: the odd one at the end for SAME_UPPER, at the start otherwise */
      int64_t out = have_shape ? shape[i] : same ? w.in[i] * w.s[i] : (w.in[i] - 1) * w.s[i] + w.d[i] * (w.k[i] - 1) + 1 + op[i];
      int64_t total = w.s[i] * (w.in[i] - 1) + op[i] + (w.k[i] - 1) * w.d[i] + 1 - out;
      if (total < 0) return UNSUPPORTED(im, "ConvTranspose's output_shape %lld needs negative pads", (long long)out);
      bool upper = ap && str_eq(ap->s, "SAME_UPPER");
      w.lo[i] = upper ? total / 2 : total - total / 2;
      w.hi[i] = total - w.lo[i];
    }
    oh[i] = (w.in[i] - 1) * w.s[i] - w.lo[i] - w.hi[i] + w.d[i] * (w.k[i] - 1) + op[i] + 1;
    if (oh[i] < 1) return FAIL(im, "ConvTranspose's output would be empty (pads larger than the output)");
  }
  ir_node *x = cl_2d(im, vx, &w), *wt;
  if (!x) return false;
  int64_t C = wd[0], M = wd[1], KH = w.n == 2 ? wd[2] : 1, KW = wd[w.n + 1];
  if (vw->k) { /* [C, M, KH, KW] to [KH, KW, M, C] at import */
    const float *src = oi_const_f32(im, vw->k);
    if (!src) return false;
    float *dst = arena_alloc_aligned(im->g->arena, (size_t)(vw->k->numel ? vw->k->numel : 1) * sizeof *dst, 64);
    outer_to_inner(src, dst, C, M, KH * KW);
    ir_type t = {.dtype = DT_F32, .rank = 4, .dims = {KH, KW, M, C}};
    wt = ir_build_const(im->g, oi_ir_name(im, im->layer, "hwoi"), &t, arena_printf(im->g->arena, "%s'", vw->k->name),
                        dst, im->loc);
    wt->layer = im->layer;
    wt->frozen = !vw->param;
  } else {
    wt = oi_operand(im, vw);
    if (wt && w.n == 1) {
      ir_attr a = {.shape = {.rank = 4, .dims = {C, M, 1, KW}}};
      wt = oi_build(im, IR_OP_RESHAPE, "w_h1", &wt, 1, &a);
    }
    if (wt && ir_type_is_batched(&wt->type)) return UNSUPPORTED(im, "ConvTranspose's weight has the batch N");
    ir_attr a = {.perm = {.n = 4, .v = {2, 3, 1, 0}}};
    wt = wt ? oi_build(im, IR_OP_TRANSPOSE, "hwoi", &wt, 1, &a) : NULL;
  }
  if (!wt) return false;
  ir_attr a = {.acc = DT_F32};
  window_ir(&w, &a);
  a.shape = (ir_shape){.rank = 4, .dims = {x->type.dims[0], w.n == 2 ? oh[0] : 1, oh[w.n - 1], M * group}};
  bool bias = oi_has_input(im, 2);
  ir_node *y = oi_build(im, group > 1 ? IR_OP_GROUP_CONV2D_INPUT_GRAD : IR_OP_CONV2D_INPUT_GRAD, bias ? "deconv" : NULL,
                        (ir_node *[]){x, wt}, 2, &a);
  if (y && bias) {
    ir_node *b = oi_operand(im, oi_input(im, 2));
    if (!b) return false;
    if (b->type.rank != 1 || b->type.dims[0] != M * group)
      return FAIL(im, "ConvTranspose's bias must be [%lld] (one per output channel)", (long long)(M * group));
    y = oi_build(im, IR_OP_ADD, NULL, (ir_node *[]){y, b}, 2, NULL);
  }
  return define_cl(im, &w, y);
}

/* ---- pooling ---- */

/* MaxPool and AveragePool, 1-D and 2-D. ceil_mode=1 adds padding at the
 * end that no window counts (the last window must start inside the input
 * or its start padding, as in ONNX Runtime and PyTorch). count_include_pad
 * pads x with zeros first, so that the pool counts them. */
bool oi_lower_pool(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  bool max = row->ir == IR_OP_MAX_POOL2D;
  imp_val *vx = oi_input(im, 0);
  if (!vx) return false;
  int64_t xd[ONNX_MAX_RANK], ceil_mode, include_pad = 0, storage;
  win w;
  if (!spatial_input(im, vx, &w, xd) || !window_attrs(im, &w)) return false;
  if (!oi_attr_int(im, "ceil_mode", 0, &ceil_mode) || !oi_attr_int(im, "storage_order", 0, &storage) ||
      (!max && !oi_attr_int(im, "count_include_pad", 0, &include_pad)))
    return false;
  if (max && !oi_outputs_unused_from(im, 1, "Y (not the Indices)")) return false;
  int64_t extra[2] = {0, 0};
  for (int i = 0; i < w.n; i++) {
    if (w.d[i] != 1)
      return UNSUPPORTED(im, "%s with dilations (%lld): castor's pooling windows are dense", n->op_type,
                         (long long)w.d[i]);
    int64_t span = w.in[i] + w.lo[i] + w.hi[i] - w.k[i];
    if (span < 0) return FAIL(im, "%s's window %lld is larger than the padded input", n->op_type, (long long)w.k[i]);
    int64_t out = (ceil_mode ? span + w.s[i] - 1 : span) / w.s[i] + 1;
    if (ceil_mode && (out - 1) * w.s[i] >= w.in[i] + w.lo[i]) out--; /* a window only of end padding */
    extra[i] = (out - 1) * w.s[i] + w.k[i] - (w.in[i] + w.lo[i] + w.hi[i]);
    if (extra[i] < 0) extra[i] = 0;
    if (!include_pad && (w.lo[i] >= w.k[i] || w.hi[i] + extra[i] >= w.k[i]))
      return UNSUPPORTED(im, "%s with pads %lld and %lld not smaller than its window %lld: castor's windows "
                             "each meet the input", n->op_type, (long long)w.lo[i], (long long)w.hi[i],
                         (long long)w.k[i]);
  }
  ir_node *x = cl_2d(im, vx, &w);
  if (!x) return false;
  bool pads = false;
  for (int i = 0; i < w.n; i++) pads = pads || w.lo[i] || w.hi[i];
  if (include_pad && pads) { /* zeros the pool counts, then only ceil_mode's padding (without pads, as
                              * PyTorch's AvgPool2d exports by default: nothing to pad, no copy) */
    ir_attr p = {.shape = {.rank = 4}, .starts = {.n = 4}, .steps = {.n = 4, .v = {1, 1, 1, 1}}};
    for (int r = 0; r < 4; r++) p.shape.dims[r] = x->type.dims[r];
    for (int i = 0; i < w.n; i++) {
      int r = w.n == 1 ? 2 : 1 + i;
      p.starts.v[r] = w.lo[i], p.shape.dims[r] += w.lo[i] + w.hi[i];
      w.lo[i] = w.hi[i] = 0;
    }
    x = oi_build(im, IR_OP_PAD_CONSTANT, "padded", &x, 1, &p);
  }
  for (int i = 0; i < w.n; i++) w.hi[i] += extra[i];
  ir_attr a = {0};
  window_ir(&w, &a);
  a.dilations = (ir_attr_INTS){0};
  return define_cl(im, &w, oi_build(im, row->ir, NULL, &x, 1, &a));
}

/* A pool over x's whole spatial extent ([N, 1.., C]). */
static bool global_pool(imp *im, imp_val *vx, ir_op op) {
  int64_t xd[ONNX_MAX_RANK];
  win w;
  if (!vx || !spatial_input(im, vx, &w, xd)) return false;
  for (int i = 0; i < w.n; i++) w.k[i] = w.in[i], w.s[i] = 1, w.d[i] = 1;
  ir_node *x = cl_2d(im, vx, &w);
  ir_attr a = {0};
  window_ir(&w, &a);
  a.dilations = (ir_attr_INTS){0};
  return x && define_cl(im, &w, oi_build(im, op, NULL, &x, 1, &a));
}

bool oi_lower_global_pool(imp *im, const onnx_node *n, const op_row *row) {
  (void)n;
  return global_pool(im, oi_input(im, 0), row->ir);
}

/* ReduceMean over exactly the spatial axes of [N, C, spatial..]: a global
 * average pool (PyTorch's x.mean((2, 3))). Axes from the attribute (< 18)
 * or the input. */
bool oi_lower_reduce_mean(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  imp_val *vx = oi_input(im, 0);
  if (!vx) return false;
  int64_t axes[ONNX_MAX_RANK], dims[ONNX_MAX_RANK], keep, noop;
  int na, rank;
  if (!oi_axes_of(im, 1, axes, &na) || !oi_attr_int(im, "keepdims", 1, &keep) ||
      !oi_attr_int(im, "noop_with_empty_axes", 0, &noop))
    return false;
  oi_onnx_dims(vx, &rank, dims);
  bool spatial = (rank == 3 || rank == 4) && na == rank - 2 && vx->node;
  unsigned seen = 0;
  for (int i = 0; i < na && spatial; i++) {
    int a = 0;
    if (!oi_norm_axis(im, axes[i], rank, "ReduceMean axis", &a)) return false;
    spatial = a >= 2 && !(seen >> a & 1);
    seen |= 1u << a;
  }
  if (!spatial)
    return UNSUPPORTED(im, "ReduceMean over axes other than all the spatial axes of a run-time [N, C, "
                           "spatial..] tensor (a global average pool) is not supported yet");
  if (!global_pool(im, vx, IR_OP_AVG_POOL2D)) return false;
  if (keep) return true;
  imp_val *y = oi_val_find(im, im->node->outputs[0]); /* [N, C] without the spatial 1s */
  if (!y) return true;
  ir_attr a = {.shape = {.rank = 2, .dims = {y->node->type.dims[0], dims[1]}}};
  ir_node *flat = oi_build(im, IR_OP_RESHAPE, "squeezed", &y->node, 1, &a);
  if (!flat) return false;
  y->node = flat, y->layout = OI_PLAIN, y->alt = NULL;
  return true;
}

/* ---- BatchNormalization (inference) ---- */

/* Y = (X - mean) / sqrt(var + epsilon) * scale + B over the channel axis
 * (1), folded at import into Y = X * s + t with s = scale / sqrt(var +
 * epsilon) and t = B - mean * s per channel (computed in double, stored in
 * float32): a broadcasting mul and add over the channels of a
 * channels-last value (or of [N, C]). momentum only updates the running
 * statistics in training, which castor does not import. */
/* BatchNormalization whose scale, B, mean or var is a run-time value:
 * y = x * s + t with s = scale / sqrt(var + epsilon), t = B - mean * s,
 * as IR ops over the channels (castor's last axis once x is channels last). */
static bool batch_norm_runtime(imp *im, imp_val *vx, int rank, int64_t C, double eps) {
  ir_node *p[4];
  for (int i = 0; i < 4; i++) {
    if (!(p[i] = oi_operand(im, oi_input(im, 1 + i)))) return false;
    if (p[i]->type.rank != 1 || p[i]->type.dims[0] != C)
      return FAIL(im, "BatchNormalization's %s must be [%lld] (one per channel)",
                  (const char *[]){"scale", "B", "mean", "var"}[i], (long long)C);
  }
  ir_node *x;
  oi_layout layout = OI_PLAIN;
  if (rank == 2) x = oi_operand(im, vx);
  else x = oi_channels_last(im, vx), layout = OI_CL;
  ir_node *ve = oi_build(im, IR_OP_ADD, "var_eps", (ir_node *[]){p[3], oi_scalar_const(im, "epsilon", eps)}, 2, NULL);
  ir_node *sd = ve ? oi_build(im, IR_OP_SQRT, "std", &ve, 1, NULL) : NULL;
  ir_node *s = sd ? oi_build(im, IR_OP_DIV, "scale", (ir_node *[]){p[0], sd}, 2, NULL) : NULL;
  ir_node *ms = s ? oi_build(im, IR_OP_MUL, "mean_scaled", (ir_node *[]){p[2], s}, 2, NULL) : NULL;
  ir_node *t = ms ? oi_build(im, IR_OP_SUB, "shift", (ir_node *[]){p[1], ms}, 2, NULL) : NULL;
  ir_node *y = t && x ? oi_build(im, IR_OP_MUL, "scaled", (ir_node *[]){x, s}, 2, NULL) : NULL;
  y = y ? oi_build(im, IR_OP_ADD, NULL, (ir_node *[]){y, t}, 2, NULL) : NULL;
  return oi_define_output_as(im, 0, y, layout, NULL);
}

bool oi_lower_batch_norm(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  double eps, momentum;
  int64_t training = 0, spatial = 1, is_test = 1;
  if (!oi_attr_float(im, "epsilon", 1e-5, &eps) || !oi_attr_float(im, "momentum", 0.9, &momentum) ||
      !oi_attr_int(im, "training_mode", 0, &training) || !oi_attr_int(im, "spatial", 1, &spatial) ||
      !oi_attr_int(im, "is_test", im->opset < 7 ? 0 : 1, &is_test))
    return false;
  if (training || (im->opset < 7 && !is_test))
    return UNSUPPORTED(im, "BatchNormalization in training mode (batch statistics): castor imports ONNX models "
                           "for inference, with the running mean and variance");
  if (!spatial)
    return UNSUPPORTED(im, "BatchNormalization with spatial=0 (statistics per element) is not supported");
  if (!oi_outputs_unused_from(im, 1, "Y (not the running statistics)")) return false;
  imp_val *vx = oi_input(im, 0);
  if (!vx) return false;
  int rank;
  int64_t xd[ONNX_MAX_RANK];
  oi_onnx_dims(vx, &rank, xd);
  if (rank < 2) return FAIL(im, "BatchNormalization needs an input [N, C, ..], got rank %d", rank);
  int64_t C = xd[1];
  const float *p[4];
  static const char *const names[] = {"scale", "B", "mean", "var"};
  bool runtime = false;
  for (int i = 0; i < 4; i++) runtime |= oi_has_input(im, 1 + i) && !oi_host_const(im, 1 + i);
  if (runtime) return batch_norm_runtime(im, vx, rank, C, eps);
  for (int i = 0; i < 4; i++) {
    const onnx_tensor *t = oi_const_input(im, 1 + i, names[i]);
    if (!t) return false;
    if (t->rank != 1 || t->dims[0] != C)
      return FAIL(im, "BatchNormalization's %s must be [%lld] (one per channel), got %lld elements of rank %d",
                  names[i], (long long)C, (long long)t->numel, t->rank);
    if (!(p[i] = oi_const_f32(im, t))) return false;
  }
  float *s = arena_alloc_aligned(im->g->arena, (size_t)(C ? C : 1) * sizeof *s, 64);
  float *t = arena_alloc_aligned(im->g->arena, (size_t)(C ? C : 1) * sizeof *t, 64);
  for (int64_t c = 0; c < C; c++) {
    double sc = p[0][c] / sqrt((double)p[3][c] + eps);
    s[c] = (float)sc;
    t[c] = (float)(p[1][c] - p[2][c] * sc);
  }
  ir_type ct = {.dtype = DT_F32, .rank = 1, .dims = {C}};
  ir_node *sn = ir_build_const(im->g, oi_ir_name(im, im->layer, "scale"), &ct,
                               arena_printf(im->g->arena, "%s.scale", im->layer), s, im->loc);
  ir_node *tn = ir_build_const(im->g, oi_ir_name(im, im->layer, "shift"), &ct,
                               arena_printf(im->g->arena, "%s.shift", im->layer), t, im->loc);
  sn->layer = tn->layer = im->layer;
  ir_node *x;
  oi_layout layout = OI_PLAIN;
  if (rank == 2) {
    x = oi_operand(im, vx);
  } else if (vx->k && !vx->node) {
    return UNSUPPORTED(im, "BatchNormalization of a constant: castor normalizes run-time values");
  } else {
    x = oi_channels_last(im, vx), layout = OI_CL;
  }
  ir_node *y = oi_build(im, IR_OP_MUL, "scaled", (ir_node *[]){x, sn}, 2, NULL);
  y = y ? oi_build(im, IR_OP_ADD, NULL, (ir_node *[]){y, tn}, 2, NULL) : NULL;
  (void)n;
  return oi_define_output_as(im, 0, y, layout, NULL);
}
