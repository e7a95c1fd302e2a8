/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_index_map.c: the index maps of the reindex ops (the op table's
 * IR_KERNEL_REINDEX class), written once for every target: where element
 * i of the result comes from in the source, and whether it comes from
 * there at all.
 *
 * Contract: cg_reindex_value(c, op, i) is op's value at flat result index
 * i (i64, row major over the result, the batch rows first), read from
 * op->srcs[0] through c->base, as one f32, not yet rounded to op's dtype
 * (the chain that follows does that). A map is a pure function of the
 * coordinates: no op here reads past its source, so a target may start an
 * elementwise chain with it anywhere. pad and slice, and the layout ops
 * reshape, transpose, concat (several sources), strided_slice and
 * pad_constant; the next ones (broadcast, gather, im2col) each add one
 * map beside them, and both targets get it.
 *
 * Coordinates come from signed division by the result's static dims (the
 * same instructions for every target, so a target's code does not
 * change with the form of the map it calls).
 */
#include <math.h>

#include "codegen/kernel/cg_kit.h"

#define B (e->b)

/* coord[r] of flat index i over the dims of t (rank >= 1) */
static void unflatten(cg_emitter *e, const ir_type *t, LLVMValueRef i, LLVMValueRef *coord) {
  LLVMValueRef rem = i;
  for (int r = t->rank - 1; r >= 1; r--) {
    coord[r] = LLVMBuildSRem(B, rem, cg_i64(e, t->dims[r]), "");
    rem = LLVMBuildSDiv(B, rem, cg_i64(e, t->dims[r]), "");
  }
  coord[0] = rem;
}

/* pad (zeros after the source along each fixed dimension) and slice (the
 * leading part of each dimension): the source element at the same
 * coordinates; for a pad, 0 where a coordinate is past the source. */
static LLVMValueRef pad_slice_value(cg_kctx *c, const ir_node *op, bool is_pad, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  const ir_type *yt = &op->type, *xt = &x->type;
  LLVMValueRef coord[IR_MAX_RANK];
  if (yt->rank > 0) unflatten(e, yt, i, coord);
  LLVMValueRef src = cg_i64(e, 0), inb = LLVMConstInt(e->i1, 1, 0);
  for (int r = 0; r < yt->rank; r++) {
    if (r > 0) src = LLVMBuildMul(B, src, cg_i64(e, xt->dims[r]), "");
    src = LLVMBuildAdd(B, src, coord[r], "");
    if (is_pad && !(r == 0 && ir_type_is_batched(xt)))
      inb = LLVMBuildAnd(B, inb, LLVMBuildICmp(B, LLVMIntSLT, coord[r], cg_i64(e, xt->dims[r]), ""), "");
  }
  if (yt->rank == 0) src = i;
  if (!is_pad) return cg_emit_load(e, x->type.dtype, cg_elem_ptr(c, x, src), 1, op->name);
  LLVMValueRef safe = LLVMBuildSelect(B, inb, src, cg_i64(e, 0), "");
  LLVMValueRef v = cg_emit_load(e, x->type.dtype, cg_elem_ptr(c, x, safe), 1, x->name);
  return LLVMBuildSelect(B, inb, v, cg_const(e, e->f32, 0.0), op->name);
}

/* ---- general tensors: layout ops ---- */

/* Flat index of coordinates coord over the dims of t (rank >= 1; dims[0]
 * never multiplies, so N needs no value). */
static LLVMValueRef flatten_coords(cg_emitter *e, const ir_type *t, LLVMValueRef *coord) {
  LLVMValueRef src = coord[0];
  for (int r = 1; r < t->rank; r++)
    src = LLVMBuildAdd(B, LLVMBuildMul(B, src, cg_i64(e, t->dims[r]), ""), coord[r], "");
  return src;
}

static LLVMValueRef load_src(cg_kctx *c, const ir_node *x, LLVMValueRef index, const char *name) {
  return cg_emit_load(c->e, x->type.dtype, cg_elem_ptr(c, x, index), 1, name);
}

/* reshape: row-major order is kept, so the same flat index (N, when both
 * have it, is dimension 0 of both and the rows line up). */
static LLVMValueRef reshape_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  return load_src(c, op->srcs[0], i, op->name);
}

/* transpose: result coordinate r is source coordinate perm[r]. */
static LLVMValueRef transpose_index(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  LLVMValueRef coord[IR_MAX_RANK], xc[IR_MAX_RANK];
  if (op->type.rank == 0) return i;
  unflatten(e, &op->type, i, coord);
  for (int r = 0; r < op->type.rank; r++) xc[op->attr.perm.v[r]] = coord[r];
  return flatten_coords(e, &x->type, xc);
}

static LLVMValueRef transpose_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  return load_src(c, op->srcs[0], transpose_index(c, op, i), op->name);
}

/* concat: the operand whose range along the axis holds the coordinate;
 * every operand is read at a clamped (in-bounds) index and the right one
 * selected, so no load leaves its buffer. */
static LLVMValueRef concat_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  int a = ir_concat_axis(&op->type, op->attr.axis);
  LLVMValueRef coord[IR_MAX_RANK], xc[IR_MAX_RANK];
  unflatten(e, &op->type, i, coord);
  LLVMValueRef val = NULL;
  int64_t off = 0;
  for (int s = 0; s < op->n_srcs; s++) {
    const ir_node *x = op->srcs[s];
    int64_t len = x->type.dims[a];
    for (int r = 0; r < op->type.rank; r++) xc[r] = coord[r];
    LLVMValueRef local = LLVMBuildSub(B, coord[a], cg_i64(e, off), "");
    LLVMValueRef in = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSGE, local, cg_i64(e, 0), ""),
                                   LLVMBuildICmp(B, LLVMIntSLT, local, cg_i64(e, len), ""), "");
    xc[a] = LLVMBuildSelect(B, in, local, cg_i64(e, 0), "");
    LLVMValueRef v = load_src(c, x, flatten_coords(e, &x->type, xc), x->name);
    val = val ? LLVMBuildSelect(B, in, v, val, op->name) : v;
    off += len;
  }
  return val;
}

/* strided_slice: source coordinate start + c * step per dimension. */
static LLVMValueRef strided_slice_index(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  int64_t starts[IR_MAX_RANK], counts[IR_MAX_RANK];
  char err[256];
  CASTOR_ASSERT(ir_strided_slice_bounds(&x->type, &op->attr, starts, counts, err, sizeof err));
  LLVMValueRef coord[IR_MAX_RANK];
  if (op->type.rank == 0) return i;
  unflatten(e, &op->type, i, coord);
  for (int r = 0; r < op->type.rank; r++)
    coord[r] = LLVMBuildAdd(B, LLVMBuildMul(B, coord[r], cg_i64(e, op->attr.steps.v[r]), ""), cg_i64(e, starts[r]), "");
  return flatten_coords(e, &x->type, coord);
}

static LLVMValueRef strided_slice_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  return load_src(c, op->srcs[0], strided_slice_index(c, op, i), op->name);
}

/* pad_constant: result coordinates [0, n) of coord to the source's, in
 * place (0 where outside it); returns whether all n are inside (a
 * dimension the batch is has starts 0, steps 1) */
static LLVMValueRef pad_source_coords(cg_emitter *e, const ir_node *op, LLVMValueRef *coord, int n) {
  const ir_node *x = op->srcs[0];
  LLVMValueRef inb = LLVMConstInt(e->i1, 1, 0);
  for (int r = 0; r < n; r++) {
    if (x->type.dims[r] == IR_DIM_BATCH) continue;
    int64_t st = op->attr.starts.v[r], step = op->attr.steps.v[r];
    LLVMValueRef rel = LLVMBuildSub(B, coord[r], cg_i64(e, st), "");
    LLVMValueRef q = LLVMBuildSDiv(B, rel, cg_i64(e, step), "");
    LLVMValueRef ok = LLVMBuildICmp(B, LLVMIntSGE, rel, cg_i64(e, 0), "");
    ok = LLVMBuildAnd(B, ok, LLVMBuildICmp(B, LLVMIntSLT, q, cg_i64(e, x->type.dims[r]), ""), "");
    if (step > 1)
      ok = LLVMBuildAnd(B, ok, LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildSRem(B, rel, cg_i64(e, step), ""), cg_i64(e, 0), ""), "");
    inb = LLVMBuildAnd(B, inb, ok, "");
    coord[r] = LLVMBuildSelect(B, ok, q, cg_i64(e, 0), "");
  }
  return inb;
}

/* pad_constant: where (c - start) is a multiple of step below the source's
 * extent, the source element; elsewhere {value}. */
static LLVMValueRef pad_constant_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  LLVMValueRef coord[IR_MAX_RANK];
  if (op->type.rank == 0) return load_src(c, x, i, op->name);
  unflatten(e, &op->type, i, coord);
  LLVMValueRef inb = pad_source_coords(e, op, coord, op->type.rank);
  LLVMValueRef v = load_src(c, x, flatten_coords(e, &x->type, coord), x->name);
  return LLVMBuildSelect(B, inb, v, cg_lane_const(e, x->type.dtype, 1, op->attr.value), op->name);
}

/* gather: the index at y's coordinates of b (int32 or int64), then a's
 * element there; a negative index counts from the end (ONNX Gather), and
 * one still outside a's dimension D is clamped into [0, D): a is never read
 * outside itself (program inputs that feed b are checked before a run). */
static LLVMValueRef gather_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *a = op->srcs[0], *b = op->srcs[1];
  int ax = ir_concat_axis(&a->type, op->attr.axis), br = b->type.rank;
  int64_t D = a->type.dims[ax];
  LLVMValueRef coord[IR_MAX_RANK], ac[IR_MAX_RANK], bi = cg_i64(e, 0);
  if (op->type.rank > 0) unflatten(e, &op->type, i, coord);
  if (br > 0) bi = flatten_coords(e, &b->type, coord + ax);
  LLVMValueRef v = cg_emit_load(e, b->type.dtype, cg_elem_ptr(c, b, bi), 1, b->name);
  LLVMValueRef neg = LLVMBuildICmp(B, LLVMIntSLT, v, cg_i64(e, 0), "");
  v = LLVMBuildSelect(B, neg, LLVMBuildAdd(B, v, cg_i64(e, D), ""), v, "");
  v = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, v, cg_i64(e, 0), ""), cg_i64(e, 0), v, "");
  v = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGE, v, cg_i64(e, D), ""), cg_i64(e, D - 1), v, "");
  for (int r = 0; r < ax; r++) ac[r] = coord[r];
  ac[ax] = v;
  for (int r = ax + 1; r < a->type.rank; r++) ac[r] = coord[r - 1 + br];
  return load_src(c, a, flatten_coords(e, &a->type, ac), op->name);
}

/* convolutional networks: pooling. Output element (n, oh, ow, ch) reduces
 * its window of x, taps p, q in row-major order: the max (strictly
 * greater replaces, so the first maximal tap wins; a NaN sticks) or the
 * mean over the taps inside x. Windows of up to 16 taps are unrolled,
 * wider ones loop. */
typedef struct pool_ctx {
  cg_kctx *c;
  const ir_node *op, *x;
  LLVMTypeRef vt;
  LLVMValueRef n, ch, h0, w0, acc, cnt;
  int lanes;
  bool mx, inside;
  ir_dtype sum_dt; /* the average's running sum rounded to it after each tap (f32: never) */
} pool_ctx;

static void pool_tap(pool_ctx *t, LLVMValueRef p, LLVMValueRef q) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const ir_type *xt = &t->x->type;
  LLVMValueRef ih = LLVMBuildAdd(B, t->h0, p, ""), iw = LLVMBuildAdd(B, t->w0, q, "");
  LLVMValueRef in = t->inside ? LLVMConstInt(LLVMInt1TypeInContext(e->ctx), 1, 0)
                              : LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntULT, ih, cg_i64(e, xt->dims[1]), ""),
                                             LLVMBuildICmp(B, LLVMIntULT, iw, cg_i64(e, xt->dims[2]), ""), "");
  LLVMValueRef src = LLVMBuildAdd(
      B, LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, t->n, cg_i64(e, xt->dims[1]), ""), ih, ""),
                                                      cg_i64(e, xt->dims[2]), ""), iw, ""),
                      cg_i64(e, xt->dims[3]), ""),
      t->ch, "");
  /* outside x: element 0's lanes, never past x (at least a pixel of channels) */
  LLVMValueRef v = cg_emit_load(e, xt->dtype, cg_elem_ptr(c, t->x, t->inside ? src : LLVMBuildSelect(B, in, src, cg_i64(e, 0), "")),
                                t->lanes, t->x->name);
  LLVMValueRef a = LLVMBuildLoad2(B, t->vt, t->acc, "");
  LLVMValueRef next;
  if (t->mx) {
    LLVMValueRef wins = LLVMBuildOr(B, LLVMBuildFCmp(B, LLVMRealOGT, v, a, ""), LLVMBuildFCmp(B, LLVMRealUNO, v, v, ""), "");
    next = LLVMBuildSelect(B, in, LLVMBuildSelect(B, wins, v, a, ""), a, "");
  } else {
    next = LLVMBuildSelect(B, in, cg_emit_round_to(e, LLVMBuildFAdd(B, a, v, ""), t->sum_dt, ""), a, "");
    LLVMValueRef n = LLVMBuildLoad2(B, e->f32, t->cnt, "");
    LLVMBuildStore(B, LLVMBuildSelect(B, in, LLVMBuildFAdd(B, n, cg_const(e, e->f32, 1.0), ""), n, ""), t->cnt);
  }
  LLVMBuildStore(B, next, t->acc);
}

static LLVMValueRef pool_value_lanes(cg_kctx *c, const ir_node *op, LLVMValueRef i, int lanes) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  const ir_type *xt = &x->type, *yt = &op->type;
  const int64_t *pl = op->attr.pool.v, *st = op->attr.strides.v, *pd = op->attr.pads.v;
  LLVMValueRef coord[4]; /* (n, oh, ow, ch) of i */
  cg_nhwc_coords(e, yt, i, coord);
  /* convolutional networks: lanes > 1 is that many channels of one pixel
   * (consecutive in x), each lane the scalar form's chain */
  pool_ctx t = {.c = c, .op = op, .x = x, .vt = lanes > 1 ? LLVMVectorType(e->f32, (unsigned)lanes) : e->f32,
                .n = coord[0], .ch = coord[3], .lanes = lanes, .mx = op->op == IR_OP_MAX_POOL2D};
  /* no padding and every window inside x (the usual 'valid' pooling): no test per tap */
  t.inside = !pd[0] && !pd[1] && !pd[2] && !pd[3] && (yt->dims[1] - 1) * st[0] + pl[0] <= xt->dims[1] &&
             (yt->dims[2] - 1) * st[1] + pl[1] <= xt->dims[2];
  /* A bf16 average sums in bf16, the sum rounded after each tap, as Keras's
   * AveragePooling2D on JAX (lax.reduce_window in the input dtype: XLA
   * widens each add and rounds it back; rounding once at the end, castor
   * differed in 1858 of 4096 values of a 3x3 'same' pool, NASNet's; golden
   * avgpool16-mixed_bfloat16), except a window over the whole image, a
   * GlobalAveragePooling2D as the frontends lower it: ops.mean sums in f32.
   * f16 keeps the f32 sum: XLA's f16 window sum is neither (generate.py
   * avgpool16). */
  bool global = !pd[0] && !pd[1] && !pd[2] && !pd[3] && pl[0] == xt->dims[1] && pl[1] == xt->dims[2];
  t.sum_dt = !t.mx && !global && yt->dtype == DT_BF16 ? DT_BF16 : DT_F32;
  t.h0 = LLVMBuildSub(B, LLVMBuildMul(B, coord[1], cg_i64(e, st[0]), ""), cg_i64(e, pd[0]), "");
  t.w0 = LLVMBuildSub(B, LLVMBuildMul(B, coord[2], cg_i64(e, st[1]), ""), cg_i64(e, pd[2]), "");
  t.acc = cg_entry_alloca(c, t.vt, "pool.acc"), t.cnt = cg_entry_alloca(c, e->f32, "pool.count");
  LLVMBuildStore(B, cg_const(e, t.vt, t.mx ? -INFINITY : 0.0), t.acc);
  LLVMBuildStore(B, cg_const(e, e->f32, 0.0), t.cnt);
  if (pl[0] * pl[1] <= 16) {
    for (int64_t p = 0; p < pl[0]; p++)
      for (int64_t q = 0; q < pl[1]; q++) pool_tap(&t, cg_i64(e, p), cg_i64(e, q));
  } else {
    cg_loop lp = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, pl[0]), 1, "pool.p");
    cg_loop lq = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, pl[1]), 1, "pool.q");
    pool_tap(&t, lp.iv, lq.iv);
    cg_loop_end(c, &lq);
    cg_loop_end(c, &lp);
  }
  LLVMValueRef r = LLVMBuildLoad2(B, t.vt, t.acc, op->name);
  return t.mx ? r : LLVMBuildFDiv(B, r, cg_splat(e, LLVMBuildLoad2(B, e->f32, t.cnt, ""), lanes), op->name);
}

static LLVMValueRef pool_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) { return pool_value_lanes(c, op, i, 1); }

/* ---- convolutional networks: grouped and depthwise convolution ---- */

static LLVMValueRef in_range(cg_emitter *e, LLVMValueRef v, int64_t n) {
  return LLVMBuildICmp(B, LLVMIntULT, v, cg_i64(e, n), "");
}

/* group_conv2d and its gradients, each result element one f32 chain of
 * multiply-adds in a fixed order (so the same bits for any thread count
 * and launch order; no scatter):
 *   forward  y[n,i,j,o]: taps p, q, then the group's channels c;
 *   dx       dx[n,h,v,ci]: taps p, q whose window (i, j) holds (h, v)
 *            (exact divisions, inside dy), then the group's outputs o;
 *   dw       dw[p,q,c,o]: the batch's n, i, j in order (x read as 0 outside).
 * Outside x (forward) or dy (dx) a tap's inner loop runs zero times, so a
 * padding tap adds nothing, not 0 * w. */
static LLVMValueRef group_conv_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  ir_type_rule rule = ir_op_type_rule(op->op);
  /* conv2d's gradients are the one-group case (cg_contract_value) */
  bool dx = rule == IR_TYPE_GROUP_CONV2D_INPUT_GRAD || rule == IR_TYPE_CONV2D_INPUT_GRAD;
  bool dw = rule == IR_TYPE_GROUP_CONV2D_FILTER_GRAD || rule == IR_TYPE_CONV2D_FILTER_GRAD;
  const ir_node *xn = dx ? NULL : op->srcs[0], *wn = dw ? NULL : op->srcs[1];
  const ir_node *dyn = dx ? op->srcs[0] : dw ? op->srcs[1] : NULL;
  const ir_type *xt = dx ? &op->type : &xn->type, *wt = dw ? &op->type : &wn->type;
  const ir_type *yt = dx || dw ? &dyn->type : &op->type;
  int64_t KW = wt->dims[1], Cg = wt->dims[2], O = wt->dims[3], G = xt->dims[3] / Cg, Og = O / G;
  int64_t H = xt->dims[1], W = xt->dims[2], OH = yt->dims[1], OW = yt->dims[2];
  const int64_t *st = op->attr.strides.v, *dl = op->attr.dilations.v, *pd = op->attr.pads.v;
  LLVMValueRef coord[IR_MAX_RANK], zero = cg_i64(e, 0);
  unflatten(e, &op->type, i, coord);
  LLVMValueRef acc = cg_entry_alloca(c, e->f32, "gconv.acc");
  LLVMBuildStore(B, cg_const(e, e->f32, 0.0), acc);
  if (!dx && !dw) { /* coord: n, i, j, o */
    LLVMValueRef g = LLVMBuildSDiv(B, coord[3], cg_i64(e, Og), "group");
    LLVMValueRef h0 = LLVMBuildSub(B, LLVMBuildMul(B, coord[1], cg_i64(e, st[0]), ""), cg_i64(e, pd[0]), "");
    LLVMValueRef w0 = LLVMBuildSub(B, LLVMBuildMul(B, coord[2], cg_i64(e, st[1]), ""), cg_i64(e, pd[2]), "");
    cg_loop lp = cg_loop_begin(c, zero, cg_i64(e, wt->dims[0]), 1, "gconv.p");
    cg_loop lq = cg_loop_begin(c, zero, cg_i64(e, KW), 1, "gconv.q");
    LLVMValueRef ih = LLVMBuildAdd(B, h0, LLVMBuildMul(B, lp.iv, cg_i64(e, dl[0]), ""), "");
    LLVMValueRef iw = LLVMBuildAdd(B, w0, LLVMBuildMul(B, lq.iv, cg_i64(e, dl[1]), ""), "");
    LLVMValueRef in = LLVMBuildAnd(B, in_range(e, ih, H), in_range(e, iw, W), "inside");
    LLVMValueRef xbase = cg_nhwc_index(e, xt, coord[0], ih, iw, LLVMBuildMul(B, g, cg_i64(e, Cg), ""));
    LLVMValueRef wbase = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, lp.iv, cg_i64(e, KW), ""), lq.iv, ""),
                                      cg_i64(e, Cg * O), "");
    cg_loop lc = cg_loop_begin(c, zero, LLVMBuildSelect(B, in, cg_i64(e, Cg), zero, ""), 1, "gconv.c");
    LLVMValueRef xv = cg_emit_load(e, xt->dtype, cg_elem_ptr(c, xn, LLVMBuildAdd(B, xbase, lc.iv, "")), 1, xn->name);
    LLVMValueRef wi = LLVMBuildAdd(B, LLVMBuildAdd(B, wbase, LLVMBuildMul(B, lc.iv, cg_i64(e, O), ""), ""), coord[3], "");
    LLVMValueRef wv = cg_emit_load(e, wt->dtype, cg_elem_ptr(c, wn, wi), 1, wn->name);
    LLVMBuildStore(B, cg_fmuladd(e, xv, wv, LLVMBuildLoad2(B, e->f32, acc, "")), acc);
    cg_loop_end(c, &lc);
    cg_loop_end(c, &lq);
    cg_loop_end(c, &lp);
  } else if (dx) { /* coord: n, h, v, ci */
    LLVMValueRef g = LLVMBuildSDiv(B, coord[3], cg_i64(e, Cg), "group"), ch = LLVMBuildSRem(B, coord[3], cg_i64(e, Cg), "");
    LLVMValueRef o0 = LLVMBuildMul(B, g, cg_i64(e, Og), "");
    LLVMValueRef b0 = LLVMBuildAdd(B, coord[1], cg_i64(e, pd[0]), ""), b1 = LLVMBuildAdd(B, coord[2], cg_i64(e, pd[2]), "");
    cg_loop lp = cg_loop_begin(c, zero, cg_i64(e, wt->dims[0]), 1, "gconvdx.p");
    cg_loop lq = cg_loop_begin(c, zero, cg_i64(e, KW), 1, "gconvdx.q");
    LLVMValueRef nh = LLVMBuildSub(B, b0, LLVMBuildMul(B, lp.iv, cg_i64(e, dl[0]), ""), "");
    LLVMValueRef nw = LLVMBuildSub(B, b1, LLVMBuildMul(B, lq.iv, cg_i64(e, dl[1]), ""), "");
    LLVMValueRef ok = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSGE, nh, zero, ""), LLVMBuildICmp(B, LLVMIntSGE, nw, zero, ""), "");
    ok = LLVMBuildAnd(B, ok, LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildSRem(B, nh, cg_i64(e, st[0]), ""), zero, ""), "");
    ok = LLVMBuildAnd(B, ok, LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildSRem(B, nw, cg_i64(e, st[1]), ""), zero, ""), "");
    LLVMValueRef oi = LLVMBuildSDiv(B, nh, cg_i64(e, st[0]), ""), oj = LLVMBuildSDiv(B, nw, cg_i64(e, st[1]), "");
    ok = LLVMBuildAnd(B, ok, LLVMBuildAnd(B, in_range(e, oi, OH), in_range(e, oj, OW), ""), "inside");
    LLVMValueRef dybase = cg_nhwc_index(e, yt, coord[0], oi, oj, o0);
    LLVMValueRef wbase = LLVMBuildAdd(
        B, LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, lp.iv, cg_i64(e, KW), ""), lq.iv, ""),
                                                        cg_i64(e, Cg), ""), ch, ""), cg_i64(e, O), ""), o0, "");
    cg_loop lo = cg_loop_begin(c, zero, LLVMBuildSelect(B, ok, cg_i64(e, Og), zero, ""), 1, "gconvdx.o");
    LLVMValueRef gv = cg_emit_load(e, yt->dtype, cg_elem_ptr(c, dyn, LLVMBuildAdd(B, dybase, lo.iv, "")), 1, dyn->name);
    LLVMValueRef wv = cg_emit_load(e, wt->dtype, cg_elem_ptr(c, wn, LLVMBuildAdd(B, wbase, lo.iv, "")), 1, wn->name);
    LLVMBuildStore(B, cg_fmuladd(e, gv, wv, LLVMBuildLoad2(B, e->f32, acc, "")), acc);
    cg_loop_end(c, &lo);
    cg_loop_end(c, &lq);
    cg_loop_end(c, &lp);
  } else { /* coord: p, q, c, o; the sum over the batch's pixels */
    LLVMValueRef g = LLVMBuildSDiv(B, coord[3], cg_i64(e, Og), "group");
    LLVMValueRef xc = LLVMBuildAdd(B, LLVMBuildMul(B, g, cg_i64(e, Cg), ""), coord[2], "");
    LLVMValueRef hoff = LLVMBuildSub(B, LLVMBuildMul(B, coord[0], cg_i64(e, dl[0]), ""), cg_i64(e, pd[0]), "");
    LLVMValueRef woff = LLVMBuildSub(B, LLVMBuildMul(B, coord[1], cg_i64(e, dl[1]), ""), cg_i64(e, pd[2]), "");
    LLVMValueRef nb = ir_type_is_batched(xt) ? c->batch : cg_i64(e, xt->dims[0]);
    cg_loop ln = cg_loop_begin(c, zero, nb, 1, "gconvdw.n");
    cg_loop li = cg_loop_begin(c, zero, cg_i64(e, OH), 1, "gconvdw.i");
    LLVMValueRef ih = LLVMBuildAdd(B, LLVMBuildMul(B, li.iv, cg_i64(e, st[0]), ""), hoff, "");
    cg_loop lj = cg_loop_begin(c, zero, LLVMBuildSelect(B, in_range(e, ih, H), cg_i64(e, OW), zero, ""), 1, "gconvdw.j");
    LLVMValueRef iw = LLVMBuildAdd(B, LLVMBuildMul(B, lj.iv, cg_i64(e, st[1]), ""), woff, "");
    LLVMValueRef in = in_range(e, iw, W);
    LLVMValueRef xi = LLVMBuildSelect(B, in, cg_nhwc_index(e, xt, ln.iv, ih, iw, xc), zero, "");
    LLVMValueRef xv = cg_emit_load(e, xt->dtype, cg_elem_ptr(c, xn, xi), 1, xn->name);
    LLVMValueRef gv = cg_emit_load(e, yt->dtype, cg_elem_ptr(c, dyn, cg_nhwc_index(e, yt, ln.iv, li.iv, lj.iv, coord[3])), 1, dyn->name);
    LLVMValueRef a = LLVMBuildLoad2(B, e->f32, acc, "");
    LLVMBuildStore(B, LLVMBuildSelect(B, in, cg_fmuladd(e, xv, gv, a), a, ""), acc);
    cg_loop_end(c, &lj);
    cg_loop_end(c, &li);
    cg_loop_end(c, &ln);
  }
  return LLVMBuildLoad2(B, e->f32, acc, op->name);
}

/* convolutional networks: a depthwise group_conv2d forward (one input
 * and one output channel per group: Keras's DepthwiseConv2D with
 * depth_multiplier 1), whose consecutive output channels read consecutive
 * channels of x and of w, vectorizes along the channels: `lanes` results
 * from flat index i (lanes within one pixel), each lane the same chain as
 * group_conv_value's (taps p, q in order, a tap outside x skipped), so the
 * vector and scalar forms give the same bits. */
bool cg_group_conv_vectorizes(const ir_node *op) {
  if (ir_op_type_rule(op->op) == IR_TYPE_POOL2D) return true; /* pooling: every lane a channel too */
  if (ir_op_type_rule(op->op) == IR_TYPE_POOL2D_GRAD) return true; /* and its gradients (cg_pool_grad.c) */
  if (ir_op_type_rule(op->op) != IR_TYPE_GROUP_CONV2D) return false;
  const ir_type *wt = &op->srcs[1]->type;
  return wt->dims[2] == 1 && op->srcs[0]->type.dims[3] == wt->dims[3];
}

LLVMValueRef cg_group_conv_vector(cg_kctx *c, const ir_node *op, LLVMValueRef i, int lanes) {
  cg_emitter *e = c->e;
  CASTOR_ASSERT(cg_group_conv_vectorizes(op));
  if (ir_op_type_rule(op->op) == IR_TYPE_POOL2D) return pool_value_lanes(c, op, i, lanes);
  if (ir_op_type_rule(op->op) == IR_TYPE_POOL2D_GRAD) return cg_pool_grad_lanes(c, op, i, lanes);
  const ir_node *xn = op->srcs[0], *wn = op->srcs[1];
  const ir_type *xt = &xn->type, *wt = &wn->type;
  int64_t KW = wt->dims[1], O = wt->dims[3], H = xt->dims[1], W = xt->dims[2];
  const int64_t *st = op->attr.strides.v, *dl = op->attr.dilations.v, *pd = op->attr.pads.v;
  LLVMValueRef coord[IR_MAX_RANK], zero = cg_i64(e, 0);
  unflatten(e, &op->type, i, coord);
  LLVMTypeRef vt = LLVMVectorType(e->f32, (unsigned)lanes);
  LLVMValueRef acc = cg_entry_alloca(c, vt, "dwconv.acc");
  LLVMBuildStore(B, LLVMConstNull(vt), acc);
  LLVMValueRef h0 = LLVMBuildSub(B, LLVMBuildMul(B, coord[1], cg_i64(e, st[0]), ""), cg_i64(e, pd[0]), "");
  LLVMValueRef w0 = LLVMBuildSub(B, LLVMBuildMul(B, coord[2], cg_i64(e, st[1]), ""), cg_i64(e, pd[2]), "");
  cg_loop lp = cg_loop_begin(c, zero, cg_i64(e, wt->dims[0]), 1, "dwconv.p");
  cg_loop lq = cg_loop_begin(c, zero, cg_i64(e, KW), 1, "dwconv.q");
  LLVMValueRef ih = LLVMBuildAdd(B, h0, LLVMBuildMul(B, lp.iv, cg_i64(e, dl[0]), ""), "");
  LLVMValueRef iw = LLVMBuildAdd(B, w0, LLVMBuildMul(B, lq.iv, cg_i64(e, dl[1]), ""), "");
  LLVMBasicBlockRef tap = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "dwconv.tap");
  LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "dwconv.next");
  LLVMBuildCondBr(B, LLVMBuildAnd(B, in_range(e, ih, H), in_range(e, iw, W), "inside"), tap, next);
  LLVMPositionBuilderAtEnd(B, tap);
  LLVMValueRef xv = cg_emit_load(e, xt->dtype, cg_elem_ptr(c, xn, cg_nhwc_index(e, xt, coord[0], ih, iw, coord[3])), lanes, xn->name);
  LLVMValueRef wi = LLVMBuildAdd(B, LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, lp.iv, cg_i64(e, KW), ""), lq.iv, ""),
                                                 cg_i64(e, O), ""), coord[3], "");
  LLVMValueRef wv = cg_emit_load(e, wt->dtype, cg_elem_ptr(c, wn, wi), lanes, wn->name);
  LLVMBuildStore(B, cg_fmuladd(e, xv, wv, LLVMBuildLoad2(B, vt, acc, "")), acc);
  LLVMBuildBr(B, next);
  LLVMPositionBuilderAtEnd(B, next);
  cg_loop_end(c, &lq);
  cg_loop_end(c, &lp);
  return LLVMBuildLoad2(B, vt, acc, op->name);
}

LLVMValueRef cg_reindex_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  CASTOR_ASSERT(ir_op_kernel(op->op) == IR_KERNEL_REINDEX);
  /* the map is the op's shape rule (the op table's type column) */
  ir_type_rule rule = ir_op_type_rule(op->op);
  if (rule == IR_TYPE_RESHAPE) return reshape_value(c, op, i);
  if (rule == IR_TYPE_TRANSPOSE) return transpose_value(c, op, i);
  if (rule == IR_TYPE_CONCAT) return concat_value(c, op, i);
  if (rule == IR_TYPE_STRIDED_SLICE) return strided_slice_value(c, op, i);
  if (rule == IR_TYPE_PAD_CONSTANT) return pad_constant_value(c, op, i);
  if (rule == IR_TYPE_GATHER) return gather_value(c, op, i);
  if (rule == IR_TYPE_POOL2D) return pool_value(c, op, i); /* convolutional networks */
  if (rule == IR_TYPE_POOL2D_GRAD) return cg_pool_grad_lanes(c, op, i, 1);
  if (rule == IR_TYPE_REDUCE || rule == IR_TYPE_REDUCE_GRAD || rule == IR_TYPE_BROADCAST_TO)
    return cg_tensor_value(c, op, i); /* general tensors: cg_reduce.c */
  if (rule == IR_TYPE_GROUP_CONV2D || rule == IR_TYPE_GROUP_CONV2D_INPUT_GRAD || rule == IR_TYPE_GROUP_CONV2D_FILTER_GRAD)
    return group_conv_value(c, op, i); /* convolutional networks: grouped convolution */
  CASTOR_ASSERT(rule == IR_TYPE_PAD || rule == IR_TYPE_SLICE);
  return pad_slice_value(c, op, rule == IR_TYPE_PAD, i);
}

/* ---- the GEMM contractions as one element each (cg_kit.h) ---- */

bool cg_has_contract_value(ir_op op) {
  ir_type_rule rule = ir_op_type_rule(op);
  return rule == IR_TYPE_MATMUL_NT || rule == IR_TYPE_MATMUL_TN || rule == IR_TYPE_CONV2D_INPUT_GRAD ||
         rule == IR_TYPE_CONV2D_FILTER_GRAD || rule == IR_TYPE_BATCH_MATMUL;
}

/* matmul_nt y[r,k] = sum_j a[r,j] b[k,j] (r any row of a's); matmul_tn
 * y[k,j] = sum_r a[r,k] b[r,j] over every row r of a and b in order */
static LLVMValueRef matmul_t_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *a = op->srcs[0], *b = op->srcs[1];
  bool tn = ir_op_type_rule(op->op) == IR_TYPE_MATMUL_TN;
  int64_t cols = op->type.dims[op->type.rank - 1];
  LLVMValueRef row = LLVMBuildUDiv(B, i, cg_i64(e, cols), ""), col = LLVMBuildURem(B, i, cg_i64(e, cols), "");
  int64_t ka = a->type.dims[a->type.rank - 1], kb = b->type.dims[b->type.rank - 1];
  LLVMValueRef n; /* terms */
  if (tn) { /* every row of a: the batch (or dims[0]) times the dimensions between */
    int64_t per = 1;
    for (int r = 1; r < a->type.rank - 1; r++) per *= a->type.dims[r];
    n = LLVMBuildMul(B, ir_type_is_batched(&a->type) ? c->batch : cg_i64(e, a->type.dims[0]), cg_i64(e, per), "rows");
  } else {
    n = cg_i64(e, ka);
  }
  LLVMValueRef acc = cg_entry_alloca(c, e->f32, "mm.acc");
  LLVMBuildStore(B, cg_const(e, e->f32, 0.0), acc);
  cg_loop l = cg_loop_begin(c, cg_i64(e, 0), n, 1, "mm.t");
  LLVMValueRef ai, bi;
  if (tn) { /* a[t, row] b[t, col] */
    ai = LLVMBuildAdd(B, LLVMBuildMul(B, l.iv, cg_i64(e, ka), ""), row, "");
    bi = LLVMBuildAdd(B, LLVMBuildMul(B, l.iv, cg_i64(e, kb), ""), col, "");
  } else { /* a[row, t] b[col, t] */
    ai = LLVMBuildAdd(B, LLVMBuildMul(B, row, cg_i64(e, ka), ""), l.iv, "");
    bi = LLVMBuildAdd(B, LLVMBuildMul(B, col, cg_i64(e, kb), ""), l.iv, "");
  }
  LLVMValueRef av = cg_emit_load(e, a->type.dtype, cg_elem_ptr(c, a, ai), 1, a->name);
  LLVMValueRef bv = cg_emit_load(e, b->type.dtype, cg_elem_ptr(c, b, bi), 1, b->name);
  LLVMBuildStore(B, cg_fmuladd(e, av, bv, LLVMBuildLoad2(B, e->f32, acc, "")), acc);
  cg_loop_end(c, &l);
  return LLVMBuildLoad2(B, e->f32, acc, op->name);
}

/* general tensors: batch_matmul y[.., i, j] = sum_k A[.., i, k] B[.., k, j],
 * k in order; an operand's leading dimension it lacks or has as 1 reads
 * index 0 (numpy's broadcast) */
static LLVMValueRef operand_base(cg_emitter *e, const ir_type *yt, const ir_type *t, const LLVMValueRef *yc) {
  int64_t st = 1, stride[IR_MAX_RANK];
  for (int d = t->rank - 1; d >= 0; d--) {
    stride[d] = st;
    if (d > 0) st *= t->dims[d];
  }
  LLVMValueRef base = cg_i64(e, 0);
  for (int d = 0; d < t->rank - 2; d++) {
    int yd = d + yt->rank - t->rank;
    if (t->dims[d] != 1) base = LLVMBuildAdd(B, base, LLVMBuildMul(B, yc[yd], cg_i64(e, stride[d]), ""), "");
  }
  return base;
}

static LLVMValueRef batch_matmul_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *a = op->srcs[0], *b = op->srcs[1];
  const ir_type *yt = &op->type, *at = &a->type, *bt = &b->type;
  LLVMValueRef yc[IR_MAX_RANK];
  unflatten(e, yt, i, yc);
  LLVMValueRef row = yc[yt->rank - 2], col = yc[yt->rank - 1];
  int64_t ar = at->dims[at->rank - 2], ac = at->dims[at->rank - 1], bc = bt->dims[bt->rank - 1];
  int64_t K = op->attr.transpose_a ? ar : ac;
  LLVMValueRef abase = operand_base(e, yt, at, yc), bbase = operand_base(e, yt, bt, yc);
  LLVMValueRef acc = cg_entry_alloca(c, e->f32, "bmm.acc");
  LLVMBuildStore(B, cg_const(e, e->f32, 0.0), acc);
  cg_loop l = cg_loop_begin(c, cg_i64(e, 0), cg_i64(e, K), 1, "bmm.k");
  /* A[row, k]: a[row, k], or a[k, row] transposed; B[k, col] likewise */
  LLVMValueRef ai = op->attr.transpose_a ? LLVMBuildAdd(B, LLVMBuildMul(B, l.iv, cg_i64(e, ac), ""), row, "")
                                         : LLVMBuildAdd(B, LLVMBuildMul(B, row, cg_i64(e, ac), ""), l.iv, "");
  LLVMValueRef bi = op->attr.transpose_b ? LLVMBuildAdd(B, LLVMBuildMul(B, col, cg_i64(e, bc), ""), l.iv, "")
                                         : LLVMBuildAdd(B, LLVMBuildMul(B, l.iv, cg_i64(e, bc), ""), col, "");
  LLVMValueRef av = cg_emit_load(e, at->dtype, cg_elem_ptr(c, a, LLVMBuildAdd(B, abase, ai, "")), 1, a->name);
  LLVMValueRef bv = cg_emit_load(e, bt->dtype, cg_elem_ptr(c, b, LLVMBuildAdd(B, bbase, bi, "")), 1, b->name);
  LLVMBuildStore(B, cg_fmuladd(e, av, bv, LLVMBuildLoad2(B, e->f32, acc, "")), acc);
  cg_loop_end(c, &l);
  return LLVMBuildLoad2(B, e->f32, acc, op->name);
}

LLVMValueRef cg_contract_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  CASTOR_ASSERT(cg_has_contract_value(op->op));
  ir_type_rule rule = ir_op_type_rule(op->op);
  if (rule == IR_TYPE_MATMUL_NT || rule == IR_TYPE_MATMUL_TN) return matmul_t_value(c, op, i);
  if (rule == IR_TYPE_BATCH_MATMUL) return batch_matmul_value(c, op, i);
  return group_conv_value(c, op, i); /* conv2d's gradients: one group */
}

/* ---- general tensors: the pure layout maps a vector at a time ---- */

/* Source elements `stride` apart along the result's last dimension:
 * reshape (1), transpose (the stride of the source dimension the last one
 * comes from) and strided_slice (the last dimension's step); the map of
 * every other op is not a plain strided read. */
bool cg_reindex_line_stride(const ir_node *op, int64_t *stride) {
  const ir_type *yt = &op->type, *xt = op->n_srcs == 1 ? &op->srcs[0]->type : NULL;
  if (!xt || yt->rank < 1 || yt->dims[yt->rank - 1] == IR_DIM_BATCH) return false;
  ir_type_rule rule = ir_op_type_rule(op->op);
  if (rule == IR_TYPE_RESHAPE) {
    *stride = 1;
    return true;
  }
  if (rule == IR_TYPE_STRIDED_SLICE) {
    *stride = op->attr.steps.v[yt->rank - 1];
    return true;
  }
  if (rule != IR_TYPE_TRANSPOSE) return false;
  int64_t s = 1;
  for (int r = xt->rank - 1; r > op->attr.perm.v[yt->rank - 1]; r--) {
    if (xt->dims[r] == IR_DIM_BATCH) return false;
    s *= xt->dims[r];
  }
  *stride = s;
  return true;
}

LLVMValueRef cg_reindex_lanes(cg_kctx *c, const ir_node *op, LLVMValueRef i, int lanes) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  int64_t stride = 0;
  CASTOR_ASSERT(cg_reindex_line_stride(op, &stride));
  ir_type_rule rule = ir_op_type_rule(op->op);
  LLVMValueRef src = rule == IR_TYPE_RESHAPE ? i
                     : rule == IR_TYPE_TRANSPOSE ? transpose_index(c, op, i)
                                                 : strided_slice_index(c, op, i);
  if (stride == 1) return cg_emit_load(e, x->type.dtype, cg_elem_ptr(c, x, src), lanes, op->name);
  LLVMValueRef v = LLVMGetUndef(LLVMVectorType(cg_lane_type(e, x->type.dtype), (unsigned)lanes));
  for (int l = 0; l < lanes; l++) {
    LLVMValueRef at = LLVMBuildAdd(B, src, cg_i64(e, l * stride), "");
    v = LLVMBuildInsertElement(B, v, load_src(c, x, at, x->name), cg_i64(e, l), op->name);
  }
  return v;
}

/* ---- general tensors: concat a run at a time ---- */

/* A concat whose lines (the result's last dimension) split into runs of
 * one operand each, every run contiguous in its operand: along the last
 * axis, each line is every operand's run in turn (off_s .. off_s + len_s);
 * along an earlier axis, a whole line is one operand's. Not along a
 * symbolic dimension (the batch). */
bool cg_concat_runs(const ir_node *op) {
  if (ir_op_type_rule(op->op) != IR_TYPE_CONCAT || op->type.rank < 1) return false;
  int a = ir_concat_axis(&op->type, op->attr.axis);
  for (int r = a; r < op->type.rank; r++)
    if (op->type.dims[r] == IR_DIM_BATCH) return false;
  return true;
}

LLVMValueRef cg_concat_run_start(cg_kctx *c, const ir_node *op, int s, LLVMValueRef base, LLVMValueRef *out_in) {
  cg_emitter *e = c->e;
  const ir_type *yt = &op->type;
  int a = ir_concat_axis(yt, op->attr.axis), last = yt->rank - 1;
  int64_t off = 0;
  for (int t = 0; t < s; t++) off += op->srcs[t]->type.dims[a];
  int64_t len = op->srcs[s]->type.dims[a];
  if (a == last) { /* line l's run of operand s: its line l, from off_s on */
    *out_in = LLVMConstInt(e->i1, 1, 0);
    LLVMValueRef line = LLVMBuildUDiv(B, base, cg_i64(e, yt->dims[last]), "");
    return LLVMBuildSub(B, LLVMBuildMul(B, line, cg_i64(e, len), ""), cg_i64(e, off), "");
  }
  /* base = (outer * D + ca) * inner + rest; operand s holds ca in [off, off + len) */
  int64_t inner = 1;
  for (int r = a + 1; r < yt->rank; r++) inner *= yt->dims[r];
  int64_t span = yt->dims[a] * inner;
  LLVMValueRef outer = LLVMBuildUDiv(B, base, cg_i64(e, span), ""), rem = LLVMBuildURem(B, base, cg_i64(e, span), "");
  LLVMValueRef ca = LLVMBuildUDiv(B, rem, cg_i64(e, inner), ""), rest = LLVMBuildURem(B, rem, cg_i64(e, inner), "");
  LLVMValueRef local = LLVMBuildSub(B, ca, cg_i64(e, off), "");
  *out_in = LLVMBuildICmp(B, LLVMIntULT, local, cg_i64(e, len), "");
  LLVMValueRef src = LLVMBuildMul(B, outer, cg_i64(e, len * inner), "");
  src = LLVMBuildAdd(B, src, LLVMBuildMul(B, local, cg_i64(e, inner), ""), "");
  return LLVMBuildAdd(B, src, rest, "");
}

/* ---- general tensors: pad_constant a run at a time ---- */

/* A pad_constant with step 1 along its (static) last dimension: each line
 * of the result is {value}, then the source line's run of len elements
 * from start on (where the line's other coordinates are in the source),
 * then {value}. */
bool cg_pad_constant_runs(const ir_node *op) {
  if (ir_op_type_rule(op->op) != IR_TYPE_PAD_CONSTANT || op->type.rank < 1) return false;
  int last = op->type.rank - 1;
  const ir_type *xt = &op->srcs[0]->type;
  return op->type.dims[last] != IR_DIM_BATCH && xt->dims[last] != IR_DIM_BATCH && op->attr.steps.v[last] == 1;
}

LLVMValueRef cg_pad_constant_run_start(cg_kctx *c, const ir_node *op, LLVMValueRef base, LLVMValueRef *out_in) {
  cg_emitter *e = c->e;
  const ir_node *x = op->srcs[0];
  int last = op->type.rank - 1;
  LLVMValueRef coord[IR_MAX_RANK];
  unflatten(e, &op->type, base, coord);
  *out_in = pad_source_coords(e, op, coord, last); /* the line's coordinates but the last */
  coord[last] = cg_i64(e, 0);
  return flatten_coords(e, &x->type, coord);
}

LLVMValueRef cg_transpose_source_index(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  CASTOR_ASSERT(ir_op_type_rule(op->op) == IR_TYPE_TRANSPOSE);
  return transpose_index(c, op, i);
}
