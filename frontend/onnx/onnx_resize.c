/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_resize.c: ONNX Resize (internal.h), the upsampling of segmentation
 * and detection heads (PyTorch's F.interpolate, nn.Upsample), and Einsum
 * (below): two ops lowered to products with the IR's matmuls.
 *
 * Nearest and linear resizing are linear maps along each axis: output
 * index o reads input indices i with weights that depend only on o, the
 * sizes and the coordinate mode. So an axis is resized by a product with a
 * constant [in, out] matrix M (M[i][o] = the weight of input i in output
 * o) made at import: matmul on the last axis, the axis moved last by a
 * transpose (and back) otherwise. Linear along several axes is the
 * product of the per-axis maps, which is what ONNX's (bi)linear is. Each
 * output sums at most two non-zero terms, in the order of the input, so
 * float32 results are ONNX Runtime's to rounding.
 */
#include "frontend/onnx/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum coord_mode { CM_HALF_PIXEL, CM_PYTORCH_HALF_PIXEL, CM_ALIGN_CORNERS, CM_ASYMMETRIC } coord_mode;
typedef enum nearest_mode { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL } nearest_mode;

/* A string attribute's value among `names` (its index), or the default. */
static bool attr_choice(imp *im, const char *attr, const char *const *names, int n, int def, int *out) {
  const onnx_attr *a = oi_attr_find(im, attr);
  *out = def;
  if (!a) return true;
  if (!oi_attr_typed(im, a, ONNX_ATTR_STRING)) return false;
  for (int i = 0; i < n; i++)
    if (str_eq(a->s, names[i])) return *out = i, true;
  return UNSUPPORTED(im, "Resize's %s '%s' is not supported by castor", attr, a->s);
}

/* The input coordinate of output index o (ONNX's coordinate_transformation_mode);
 * out_len is the resized length before flooring (in * scale, or the size given). */
static double source_coord(coord_mode cm, int64_t o, int64_t in, double out_len, double scale) {
  switch (cm) {
  case CM_HALF_PIXEL: return ((double)o + 0.5) / scale - 0.5;
  case CM_PYTORCH_HALF_PIXEL: return out_len > 1 ? ((double)o + 0.5) / scale - 0.5 : 0;
  case CM_ALIGN_CORNERS: return out_len == 1 ? 0 : (double)o * (double)(in - 1) / (out_len - 1);
  case CM_ASYMMETRIC: return (double)o / scale;
  }
  return 0;
}

static int64_t nearest_index(nearest_mode nm, double x) {
  double f = floor(x), d = x - f;
  switch (nm) {
  case NM_ROUND_PREFER_FLOOR: return (int64_t)(d <= 0.5 ? f : f + 1);
  case NM_ROUND_PREFER_CEIL: return (int64_t)(d < 0.5 ? f : f + 1);
  case NM_FLOOR: return (int64_t)f;
  case NM_CEIL: return (int64_t)ceil(x);
  }
  return 0;
}

/* The [in, out] matrix of one axis. */
static float *axis_matrix(imp *im, bool linear, coord_mode cm, nearest_mode nm, int64_t in, int64_t out, double scale,
                          bool have_sizes) {
  float *m = arena_alloc_aligned(im->g->arena, (size_t)(in * out > 0 ? in * out : 1) * sizeof *m, 64);
  memset(m, 0, (size_t)(in * out) * sizeof *m);
  for (int64_t o = 0; o < out; o++) {
    double x = source_coord(cm, o, in, have_sizes ? (double)out : (double)in * scale, scale);
    if (!linear) {
      int64_t i = nearest_index(nm, x);
      i = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
      m[i * out + o] = 1;
      continue;
    }
    x = x < 0 ? 0 : x > (double)(in - 1) ? (double)(in - 1) : x;
    int64_t i0 = (int64_t)floor(x), i1 = i0 + 1 < in ? i0 + 1 : in - 1;
    double w1 = x - (double)i0;
    m[i0 * out + o] += (float)(1 - w1);
    m[i1 * out + o] += (float)w1;
  }
  return m;
}

/* y with axis a resized by the [in, out] matrix m: a product on the last
 * axis, the axis swapped there and back otherwise. */
static ir_node *resize_axis(imp *im, ir_node *y, int a, const float *m, int64_t in, int64_t out) {
  int rank = y->type.rank;
  ir_attr sw = {.perm = {.n = rank}};
  for (int r = 0; r < rank; r++) sw.perm.v[r] = r;
  sw.perm.v[a] = rank - 1, sw.perm.v[rank - 1] = a;
  const char *ax = arena_printf(im->g->arena, "axis%d", a);
  if (a != rank - 1) y = oi_build(im, IR_OP_TRANSPOSE, arena_printf(im->g->arena, "%s_last", ax), &y, 1, &sw);
  ir_type mt = {.dtype = DT_F32, .rank = 2, .dims = {in, out}};
  const char *name = arena_printf(im->g->arena, "%s.%s_map", im->layer, ax);
  ir_node *mc = ir_build_const(im->g, oi_ir_name(im, name, "map"), &mt, name, m, im->loc);
  mc->layer = im->layer;
  mc->frozen = true; /* the interpolation weights: no model weight */
  ir_attr acc = {.acc = DT_F32};
  y = y ? oi_build(im, IR_OP_MATMUL, ax, (ir_node *[]){y, mc}, 2, &acc) : NULL;
  if (y && a != rank - 1) y = oi_build(im, IR_OP_TRANSPOSE, arena_printf(im->g->arena, "%s_back", ax), &y, 1, &sw);
  return y;
}

bool oi_lower_resize(imp *im, const onnx_node *n, const op_row *row) {
  (void)n, (void)row;
  static const char *const modes[] = {"nearest", "linear"};
  static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"};
  static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  int mode, cm, nm;
  int64_t antialias, exclude;
  if (!attr_choice(im, "mode", modes, 2, 0, &mode) ||
      !attr_choice(im, "coordinate_transformation_mode", coords, 4, im->opset < 11 ? CM_ASYMMETRIC : CM_HALF_PIXEL, &cm) ||
      !attr_choice(im, "nearest_mode", nearests, 4, 0, &nm) || !oi_attr_int(im, "antialias", 0, &antialias) ||
      !oi_attr_int(im, "exclude_outside", 0, &exclude))
    return false;
  if (antialias) return UNSUPPORTED(im, "Resize with antialias=1 is not supported by castor");
  int policy;
  static const char *const policies[] = {"stretch"};
  if (!attr_choice(im, "keep_aspect_ratio_policy", policies, 1, 0, &policy)) return false;
  if (oi_attr_find(im, "axes")) return UNSUPPORTED(im, "Resize with axes is not supported by castor");
  imp_val *vx = oi_input(im, 0);
  ir_node *x = vx ? oi_operand(im, vx) : NULL;
  if (!x) return false;
  int rank = x->type.rank;
  /* scales (input 1 before opset 11, then 2) or sizes (input 3) */
  int si = im->opset < 11 ? 1 : 2;
  int64_t sizes[IR_MAX_RANK];
  bool have_sizes = im->opset >= 11 && oi_has_input(im, 3);
  const onnx_tensor *st = NULL;
  if (!have_sizes) {
    if (!oi_has_input(im, si)) return FAIL(im, "Resize needs scales or sizes");
    if (!(st = oi_const_input(im, si, "scales"))) return false;
    if (st->numel != rank || !oi_float_like(st->dtype))
      return FAIL(im, "Resize's scales must be %d floats (one per dimension)", rank);
  } else {
    if (oi_has_input(im, si)) {
      const onnx_tensor *s2 = oi_const_input(im, si, "scales");
      if (!s2) return false;
      if (s2->numel) return FAIL(im, "Resize takes scales or sizes, not both");
    }
    const onnx_tensor *zt = oi_const_input(im, 3, "sizes");
    int nz;
    if (!zt || !oi_const_ints(im, zt, "sizes", sizes, IR_MAX_RANK, &nz)) return false;
    if (nz != rank) return FAIL(im, "Resize's sizes must have %d elements (one per dimension)", rank);
  }
  ir_node *y = x;
  for (int a = 0; a < rank && y; a++) {
    int64_t in = x->type.dims[a], out;
    double scale;
    if (have_sizes) {
      out = sizes[a] == DIM_N && in == IR_DIM_BATCH ? in : sizes[a];
      scale = in > 0 ? (double)out / (double)in : 1;
    } else {
      scale = oi_elem_f64(st, a);
      if (!(scale > 0)) return FAIL(im, "Resize's scale %g for dimension %d is not positive", scale, a);
      double o = in == IR_DIM_BATCH ? (double)in : floor((double)in * scale);
      if (!(o < 0x1p62)) /* an inf scale, or a product no int64 holds (fuzz_onnx, 2026-11-29) */
        return UNSUPPORTED(im, "Resize of dimension %d by a scale of %g: castor resizes with an [in, out] map of at "
                               "most 2^26 elements", a, scale);
      out = (int64_t)o;
    }
    if (in == IR_DIM_BATCH) {
      if (out != in || scale != 1)
        return UNSUPPORTED(im, "Resize of the batch dimension N: compile with --batch B");
      continue;
    }
    if (out == in && scale == 1) continue;
    if (out < 0) return FAIL(im, "Resize to a negative size %lld", (long long)out);
    if (in == 0) return UNSUPPORTED(im, "Resize of an empty dimension");
    if (out > ((int64_t)1 << 26) / in)
      return UNSUPPORTED(im, "Resize of dimension %d from %lld to %lld: castor resizes with an [in, out] map of at "
                             "most 2^26 elements", a, (long long)in, (long long)out);
    y = resize_axis(im, y, a, axis_matrix(im, mode == 1, (coord_mode)cm, (nearest_mode)nm, in, out, scale, have_sizes), in,
                    out);
  }
  if (y == x) { /* nothing resized: a copy */
    ir_attr a = {.shape = {.rank = rank}};
    for (int r = 0; r < rank; r++) a.shape.dims[r] = x->type.dims[r];
    y = oi_build(im, IR_OP_RESHAPE, NULL, &x, 1, &a);
  }
  return oi_define_output(im, 0, y);
}

/* ---- Einsum ----
 *
 * Einsum of two operands whose equation is a (batched) contraction, as
 * attention writes it ("bhid,bhjd->bhij", "bij,bjk->bik", "ij,jk->ik"):
 * each letter is a batch index (in both operands and the output), a row
 * index (A and the output), a column index (B and the output) or a summed
 * index (both operands, not the output). A is transposed to [batch.., rows..,
 * summed..] and reshaped to [batch.., M, K], B to [batch.., K, P]; one
 * batch_matmul (matmul without batch indices), then the result reshaped to
 * [batch.., rows.., cols..] and transposed to the output's order. The batch
 * indices stay separate dimensions, so the batch N stays first. */

typedef struct ein_term {
  char idx[IR_MAX_RANK + 1];
  int n;
} ein_term;

static bool ein_parse(imp *im, const char *eq, ein_term *a, ein_term *b, ein_term *out) {
  ein_term *t[3] = {a, b, out};
  int k = 0;
  for (int i = 0; i < 3; i++) t[i]->n = 0;
  bool arrow = false;
  for (const char *p = eq; *p; p++) {
    char c = *p;
    if (c == ' ') continue;
    if (c == ',' && k == 0 && !arrow) {
      k = 1;
    } else if (c == '-' && p[1] == '>' && !arrow) {
      arrow = true, k = 2, p++;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      if (t[k]->n == IR_MAX_RANK) return UNSUPPORTED(im, "Einsum term of more than %d indices", IR_MAX_RANK);
      for (int j = 0; j < t[k]->n; j++)
        if (t[k]->idx[j] == c) return UNSUPPORTED(im, "Einsum with a repeated index '%c' in one term (a diagonal)", c);
      t[k]->idx[t[k]->n++] = c;
    } else if (c == '.') {
      return UNSUPPORTED(im, "Einsum with an ellipsis ('...'): castor takes explicit indices");
    } else {
      return FAIL(im, "Einsum's equation '%s' has an unexpected '%c'", eq, c);
    }
  }
  if (k != 2) return UNSUPPORTED(im, "Einsum '%s': castor takes two operands and an explicit output ('ab,bc->ac')", eq);
  for (int i = 0; i < 3; i++) t[i]->idx[t[i]->n] = 0;
  return true;
}

static int ein_pos(const ein_term *t, char c) {
  for (int i = 0; i < t->n; i++)
    if (t->idx[i] == c) return i;
  return -1;
}

/* x permuted to the letters of `order` (a permutation of t's), then reshaped to dims. */
static ir_node *ein_arrange(imp *im, ir_node *x, const ein_term *t, const char *order, int rank, const int64_t *dims,
                            const char *what) {
  ir_attr p = {.perm = {.n = t->n}};
  bool moved = false;
  for (int i = 0; i < t->n; i++) {
    p.perm.v[i] = ein_pos(t, order[i]);
    moved |= p.perm.v[i] != i;
  }
  if (moved) x = oi_build(im, IR_OP_TRANSPOSE, arena_printf(im->g->arena, "%s_t", what), &x, 1, &p);
  if (!x) return NULL;
  bool same = x->type.rank == rank;
  for (int r = 0; same && r < rank; r++) same = x->type.dims[r] == dims[r];
  if (same) return x;
  ir_attr s = {.shape = {.rank = rank}};
  for (int r = 0; r < rank; r++) s.shape.dims[r] = dims[r];
  return oi_build(im, IR_OP_RESHAPE, arena_printf(im->g->arena, "%s_r", what), &x, 1, &s);
}

bool oi_lower_einsum(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  const onnx_attr *ea = oi_attr_find(im, "equation");
  if (!ea) return FAIL(im, "Einsum needs its equation attribute");
  if (!oi_attr_typed(im, ea, ONNX_ATTR_STRING)) return false;
  ein_term a, b, o;
  if (!ein_parse(im, ea->s, &a, &b, &o)) return false;
  if (n->n_inputs != 2) return UNSUPPORTED(im, "Einsum of %d operands: castor takes two", n->n_inputs);
  ir_node *x = oi_operand(im, oi_input(im, 0)), *y = x ? oi_operand(im, oi_input(im, 1)) : NULL;
  if (!y) return false;
  if (x->type.rank != a.n || y->type.rank != b.n)
    return FAIL(im, "Einsum '%s': the operands have ranks %d and %d", ea->s, x->type.rank, y->type.rank);
  /* classify the letters: batch (a, b, out), rows (a, out), cols (b, out), summed (a, b) */
  char bat[IR_MAX_RANK + 1] = {0}, rows[IR_MAX_RANK + 1] = {0}, cols[IR_MAX_RANK + 1] = {0}, sum[IR_MAX_RANK + 1] = {0};
  int nb = 0, nr = 0, nc = 0, ns = 0;
  int64_t bd[IR_MAX_RANK], M = 1, P = 1, K = 1;
  for (int i = 0; i < o.n; i++)
    if (ein_pos(&a, o.idx[i]) < 0 && ein_pos(&b, o.idx[i]) < 0)
      return FAIL(im, "Einsum '%s': output index '%c' is in no operand", ea->s, o.idx[i]);
  for (int i = 0; i < a.n; i++) {
    char c = a.idx[i];
    int pb = ein_pos(&b, c), po = ein_pos(&o, c);
    int64_t d = x->type.dims[i];
    if (pb >= 0 && y->type.dims[pb] != d)
      return FAIL(im, "Einsum '%s': index '%c' has sizes %lld and %lld", ea->s, c, (long long)d, (long long)y->type.dims[pb]);
    if (pb >= 0 && po >= 0) bd[nb] = d, bat[nb++] = c;
    else if (po >= 0) rows[nr++] = c, M *= d;
    else if (pb >= 0) sum[ns++] = c, K *= d;
    else return UNSUPPORTED(im, "Einsum '%s': index '%c' is summed within one operand", ea->s, c);
    if (d == IR_DIM_BATCH && !(pb >= 0 && po >= 0 && nb == 1 && i == 0 && po == 0 && pb == 0))
      return UNSUPPORTED(im, "Einsum '%s' moves the batch dimension N: compile with --batch B", ea->s);
  }
  for (int i = 0; i < b.n; i++) {
    char c = b.idx[i];
    if (ein_pos(&a, c) >= 0) continue;
    if (ein_pos(&o, c) < 0) return UNSUPPORTED(im, "Einsum '%s': index '%c' is summed within one operand", ea->s, c);
    cols[nc++] = c, P *= y->type.dims[i];
  }
  if (nb + 2 > IR_MAX_RANK) return UNSUPPORTED(im, "Einsum with %d batch indices", nb);
  char ao[IR_MAX_RANK + 1], bo[IR_MAX_RANK + 1];
  snprintf(ao, sizeof ao, "%s%s%s", bat, rows, sum);
  snprintf(bo, sizeof bo, "%s%s%s", bat, sum, cols);
  int64_t ad[IR_MAX_RANK], bdm[IR_MAX_RANK];
  for (int i = 0; i < nb; i++) ad[i] = bdm[i] = bd[i];
  ad[nb] = M, ad[nb + 1] = K, bdm[nb] = K, bdm[nb + 1] = P;
  ir_node *xa = ein_arrange(im, x, &a, ao, nb + 2, ad, "a"), *yb = xa ? ein_arrange(im, y, &b, bo, nb + 2, bdm, "b") : NULL;
  if (!yb) return false;
  ir_attr acc = {.acc = DT_F32};
  ir_node *z = oi_build(im, nb ? IR_OP_BATCH_MATMUL : IR_OP_MATMUL, "contract", (ir_node *[]){xa, yb}, 2, &acc);
  if (!z) return false;
  /* [batch.., M, P] to [batch.., rows.., cols..], then the output's order */
  ein_term zt = {.n = nb + nr + nc};
  snprintf(zt.idx, sizeof zt.idx, "%s%s%s", bat, rows, cols);
  int64_t zd[IR_MAX_RANK];
  for (int i = 0; i < zt.n; i++) {
    int pa = ein_pos(&a, zt.idx[i]);
    zd[i] = pa >= 0 ? x->type.dims[pa] : y->type.dims[ein_pos(&b, zt.idx[i])];
  }
  if (zt.n != o.n) return FAIL(im, "Einsum '%s': the output's indices do not match the operands'", ea->s);
  ir_attr s = {.shape = {.rank = zt.n}};
  for (int r = 0; r < zt.n; r++) s.shape.dims[r] = zd[r];
  bool same = z->type.rank == zt.n;
  for (int r = 0; same && r < zt.n; r++) same = z->type.dims[r] == zd[r];
  if (!same && !(z = oi_build(im, IR_OP_RESHAPE, "split", &z, 1, &s))) return false;
  ir_attr p = {.perm = {.n = o.n}};
  bool moved = false;
  for (int i = 0; i < o.n; i++) {
    p.perm.v[i] = ein_pos(&zt, o.idx[i]);
    moved |= p.perm.v[i] != i;
  }
  if (moved) z = oi_build(im, IR_OP_TRANSPOSE, NULL, &z, 1, &p);
  else if (z->op != IR_OP_RESHAPE) { /* a copy named after the node */
    ir_attr c = {.shape = {.rank = z->type.rank}};
    for (int r = 0; r < z->type.rank; r++) c.shape.dims[r] = z->type.dims[r];
    z = oi_build(im, IR_OP_RESHAPE, NULL, &z, 1, &c);
  }
  return oi_define_output(im, 0, z);
}
