/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_pool_grad.c: convolutional networks: the index maps of pooling's
 * gradients (max_pool2d_grad, avg_pool2d_grad), `lanes` channels of one
 * pixel of dx at a time, written once for every target.
 *
 * dx[n,h,v,c] is gathered: a sum over the windows (oh, ow) that hold
 * (h, v), oh then ow ascending, starting from +0, of dy[n,oh,ow,c] / the
 * window's taps inside x (avg), or of dy[n,oh,ow,c] where the window's scan,
 * the forward one's (taps p, q in row-major order, a strictly greater
 * value or a NaN replaces: the first maximal tap wins, with NaNs the last
 * NaN), ends on (h, v) (max). No scatter: the sum order is fixed, so the bits do not depend on
 * the thread count, and the vector and scalar (lanes 1) forms give the
 * same bits lane by lane.
 *
 * An element lies in at most ceil(pool / stride) windows per dimension
 * (one where stride >= pool: Keras's default pooling) and in no more than
 * dy has along it (one for global pooling), so the windows are
 * a fixed number of slots, each masked where it falls outside dy; a slot
 * outside adds +0, which leaves the sum's bits alone (it never is -0).
 * Up to 16 slots and windows of up to 16 taps are unrolled, more loop;
 * without padding and with every window inside x there is no per-tap
 * bounds test.
 */
#include <math.h>

#include "codegen/kernel/cg_kit.h"

#define B (e->b)

typedef struct poolg {
  cg_kctx *c;
  const ir_node *op, *dy, *x;
  LLVMTypeRef vt, it; /* f32 and i32 vectors of `lanes` (scalars for 1) */
  LLVMValueRef coord[4]; /* this element's (n, h, v, ch) */
  LLVMValueRef h0, w0;   /* the window's first tap (may lie in the padding) */
  LLVMValueRef best, win; /* allocas: the scan's maximum and its tap number */
  int lanes;
  bool inside; /* every window of every element inside x */
} poolg;

/* one tap (p, q) of the max scan of the window at (h0, w0) */
static void scan_tap(poolg *t, LLVMValueRef p, LLVMValueRef q) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const ir_type *xt = &t->x->type;
  LLVMValueRef ih = LLVMBuildAdd(B, t->h0, p, ""), iw = LLVMBuildAdd(B, t->w0, q, "");
  LLVMValueRef src = cg_nhwc_index(e, xt, t->coord[0], ih, iw, t->coord[3]);
  LLVMValueRef in = NULL;
  if (!t->inside) {
    in = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntULT, ih, cg_i64(e, xt->dims[1]), ""),
                      LLVMBuildICmp(B, LLVMIntULT, iw, cg_i64(e, xt->dims[2]), ""), "");
    src = LLVMBuildSelect(B, in, src, cg_i64(e, 0), ""); /* outside x: element 0's lanes, never past x */
  }
  LLVMValueRef v = cg_emit_load(e, xt->dtype, cg_elem_ptr(c, t->x, src), t->lanes, t->x->name);
  LLVMValueRef b = LLVMBuildLoad2(B, t->vt, t->best, "");
  LLVMValueRef wins = LLVMBuildOr(B, LLVMBuildFCmp(B, LLVMRealOGT, v, b, ""), LLVMBuildFCmp(B, LLVMRealUNO, v, v, ""), "");
  if (in) wins = LLVMBuildAnd(B, wins, cg_splat(e, in, t->lanes), "");
  LLVMBuildStore(B, LLVMBuildSelect(B, wins, v, b, ""), t->best);
  LLVMValueRef tap = LLVMBuildTrunc(B, LLVMBuildAdd(B, LLVMBuildMul(B, p, cg_i64(e, t->op->attr.pool.v[1]), ""), q, ""), e->i32, "");
  tap = cg_splat(e, tap, t->lanes);
  LLVMBuildStore(B, LLVMBuildSelect(B, wins, tap, LLVMBuildLoad2(B, t->it, t->win, ""), ""), t->win);
}

/* the gradient's term of the window whose first tap is (h0, w0), dy's value g there */
static LLVMValueRef window_term(poolg *t, LLVMValueRef g) {
  cg_kctx *c = t->c;
  cg_emitter *e = c->e;
  const ir_type *xt = &t->x->type;
  const int64_t *pl = t->op->attr.pool.v;
  LLVMValueRef zero = cg_i64(e, 0);
  if (t->op->op == IR_OP_AVG_POOL2D_GRAD) { /* dy / the window's taps inside x */
    LLVMValueRef n[2], base[2] = {t->h0, t->w0};
    for (int d = 0; d < 2; d++) {
      LLVMValueRef b0 = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, base[d], zero, ""), base[d], zero, "");
      LLVMValueRef e1 = LLVMBuildAdd(B, base[d], cg_i64(e, pl[d]), ""), lim = cg_i64(e, xt->dims[1 + d]);
      LLVMValueRef b1 = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, e1, lim, ""), e1, lim, "");
      n[d] = LLVMBuildSub(B, b1, b0, "");
    }
    LLVMValueRef cnt = LLVMBuildSIToFP(B, LLVMBuildMul(B, n[0], n[1], ""), e->f32, "");
    return LLVMBuildFDiv(B, g, cg_splat(e, cnt, t->lanes), "");
  }
  /* max: the forward scan of the window, then dy where it ends on this element */
  LLVMBuildStore(B, cg_const(e, t->vt, -INFINITY), t->best);
  LLVMBuildStore(B, LLVMConstAllOnes(t->it), t->win);
  if (pl[0] * pl[1] <= 16) {
    for (int64_t p = 0; p < pl[0]; p++)
      for (int64_t q = 0; q < pl[1]; q++) scan_tap(t, cg_i64(e, p), cg_i64(e, q));
  } else {
    cg_loop lp = cg_loop_begin(c, zero, cg_i64(e, pl[0]), 1, "poolg.p");
    cg_loop lq = cg_loop_begin(c, zero, cg_i64(e, pl[1]), 1, "poolg.q");
    scan_tap(t, lp.iv, lq.iv);
    cg_loop_end(c, &lq);
    cg_loop_end(c, &lp);
  }
  LLVMValueRef me = LLVMBuildAdd(B, LLVMBuildMul(B, LLVMBuildSub(B, t->coord[1], t->h0, ""), cg_i64(e, pl[1]), ""),
                                 LLVMBuildSub(B, t->coord[2], t->w0, ""), "");
  me = LLVMBuildTrunc(B, me, e->i32, "");
  me = cg_splat(e, me, t->lanes);
  LLVMValueRef mine = LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildLoad2(B, t->it, t->win, ""), me, "");
  return LLVMBuildSelect(B, mine, g, cg_const(e, t->vt, 0.0), "");
}

LLVMValueRef cg_pool_grad_lanes(cg_kctx *c, const ir_node *op, LLVMValueRef i, int lanes) {
  cg_emitter *e = c->e;
  CASTOR_ASSERT(ir_op_type_rule(op->op) == IR_TYPE_POOL2D_GRAD);
  const ir_node *dy = op->srcs[0], *x = op->srcs[1];
  const ir_type *xt = &x->type, *yt = &dy->type;
  const int64_t *pl = op->attr.pool.v, *st = op->attr.strides.v, *pd = op->attr.pads.v;
  poolg t = {.c = c, .op = op, .dy = dy, .x = x, .lanes = lanes,
             .vt = lanes > 1 ? LLVMVectorType(e->f32, (unsigned)lanes) : e->f32,
             .it = lanes > 1 ? LLVMVectorType(e->i32, (unsigned)lanes) : e->i32};
  cg_nhwc_coords(e, xt, i, t.coord);
  t.inside = !pd[0] && !pd[1] && !pd[2] && !pd[3] && (yt->dims[1] - 1) * st[0] + pl[0] <= xt->dims[1] &&
             (yt->dims[2] - 1) * st[1] + pl[1] <= xt->dims[2];
  if (op->op == IR_OP_MAX_POOL2D_GRAD) {
    t.best = cg_entry_alloca(c, t.vt, "poolg.best");
    t.win = cg_entry_alloca(c, t.it, "poolg.win");
  }
  /* per dimension: the windows o with o*s - pad <= h < o*s - pad + pool,
   * o in [lo, hi) within dy, at most slots[d] of them */
  LLVMValueRef zero = cg_i64(e, 0), one = cg_i64(e, 1), lo[2], hi[2];
  int64_t slots[2];
  for (int d = 0; d < 2; d++) {
    LLVMValueRef top = LLVMBuildAdd(B, t.coord[1 + d], cg_i64(e, pd[2 * d]), ""); /* >= 0 */
    LLVMValueRef num = LLVMBuildSub(B, top, cg_i64(e, pl[d] - 1), "");
    LLVMValueRef up = LLVMBuildSDiv(B, LLVMBuildAdd(B, num, cg_i64(e, st[d] - 1), ""), cg_i64(e, st[d]), "");
    lo[d] = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLE, num, zero, ""), zero, up, "");
    LLVMValueRef h = LLVMBuildAdd(B, LLVMBuildUDiv(B, top, cg_i64(e, st[d]), ""), one, "");
    LLVMValueRef lim = cg_i64(e, yt->dims[1 + d]);
    hi[d] = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, h, lim, ""), h, lim, "");
    slots[d] = (pl[d] + st[d] - 1) / st[d];
    if (slots[d] > yt->dims[1 + d]) slots[d] = yt->dims[1 + d]; /* global pooling: one window, stride 1 */
  }
  LLVMValueRef acc = cg_entry_alloca(c, t.vt, "poolg.acc");
  LLVMBuildStore(B, cg_const(e, t.vt, 0.0), acc);
  bool unroll = slots[0] * slots[1] <= 16;
  cg_loop la = {0}, lb = {0};
  if (!unroll) la = cg_loop_begin(c, zero, cg_i64(e, slots[0]), 1, "poolg.a");
  for (int64_t a = 0; a < (unroll ? slots[0] : 1); a++) {
    LLVMValueRef oh = LLVMBuildAdd(B, lo[0], unroll ? cg_i64(e, a) : la.iv, "");
    LLVMValueRef okh = LLVMBuildICmp(B, LLVMIntSLT, oh, hi[0], "");
    if (!unroll) lb = cg_loop_begin(c, zero, cg_i64(e, slots[1]), 1, "poolg.b");
    for (int64_t b = 0; b < (unroll ? slots[1] : 1); b++) {
      LLVMValueRef ow = LLVMBuildAdd(B, lo[1], unroll ? cg_i64(e, b) : lb.iv, "");
      LLVMValueRef ok = LLVMBuildAnd(B, okh, LLVMBuildICmp(B, LLVMIntSLT, ow, hi[1], ""), "");
      /* a slot outside dy reads window (0, 0) and adds +0 */
      LLVMValueRef soh = LLVMBuildSelect(B, ok, oh, zero, ""), sow = LLVMBuildSelect(B, ok, ow, zero, "");
      LLVMValueRef g = cg_emit_load(e, yt->dtype, cg_elem_ptr(c, dy, cg_nhwc_index(e, yt, t.coord[0], soh, sow, t.coord[3])),
                                    lanes, dy->name);
      t.h0 = LLVMBuildSub(B, LLVMBuildMul(B, soh, cg_i64(e, st[0]), ""), cg_i64(e, pd[0]), "");
      t.w0 = LLVMBuildSub(B, LLVMBuildMul(B, sow, cg_i64(e, st[1]), ""), cg_i64(e, pd[2]), "");
      LLVMValueRef term = window_term(&t, g);
      LLVMValueRef okv = cg_splat(e, ok, lanes);
      term = LLVMBuildSelect(B, okv, term, cg_const(e, t.vt, 0.0), "");
      LLVMBuildStore(B, LLVMBuildFAdd(B, LLVMBuildLoad2(B, t.vt, acc, ""), term, ""), acc);
    }
    if (!unroll) cg_loop_end(c, &lb);
  }
  if (!unroll) cg_loop_end(c, &la);
  return LLVMBuildLoad2(B, t.vt, acc, op->name);
}
