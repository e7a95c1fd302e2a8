/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_sum_to.c: the kernel kit's sums over rows in a fixed order, for every
 * target (cg_train.h says how a launch's rows map):
 *
 *   sum_rows       rows = the result's elements, one vector of them at a
 *                  time, summed over the batch in row order
 *                  (sum_rows of an unbatched operand, a weight's own
 *                  computation, sums the operand's rows)
 *   sum_to, bn_mean   the gradient of a broadcast operand: each result
 *                  element sums its group in the row-major order of x
 *   gather_grad    rows = the table's gathered dimension: each row zeroed,
 *                  then every index position in order that names it adds
 *                  dy's slice (an ordered scatter-add)
 *
 * Determinism: a sum runs in row order inside one row of the launch, and
 * a launch is split only over its result's elements, never over the
 * batch; so results do not depend on the number of threads.
 */
#include "codegen/kernel/cg_train.h"

/* ---- sum_rows: y[j] = sum_i x[i,j] ---- */

static void sum_cols(cg_kctx *c, LLVMValueRef j, int lanes) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c), *x = op->srcs[0];
  int64_t C = x->type.dims[1];
  LLVMValueRef acc = var(c, vec(e, lanes), LLVMConstNull(vec(e, lanes)), "acc");
  cg_loop li = cg_loop_begin(c, i64c(0), rows_of(c, x), 1, "i");
  LLVMValueRef xi = LLVMBuildAdd(B, LLVMBuildMul(B, li.iv, i64c(C), ""), j, "");
  LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, acc, vec(e, lanes)), load_f(c, x, xi, lanes), ""), acc);
  cg_loop_end(c, &li);
  store_f(c, op, j, get(c, acc, vec(e, lanes)), lanes);
}

void cg_train_sum_rows(cg_kctx *c) {
  cg_emitter *e = c->e;
  cg_loop lv = cg_loop_begin(c, c->row0, c->row1, e->vw, "jv");
  sum_cols(c, lv.iv, e->vw);
  cg_loop_end(c, &lv);
  cg_loop ls = cg_loop_begin(c, lv.iv, c->row1, 1, "js");
  sum_cols(c, ls.iv, 1);
  cg_loop_end(c, &ls);
}

/* ---- general tensors: sum_to, the gradient of a broadcast operand ---- */

/* The summed dimensions of x as groups of adjacent ones merged (their
 * coordinates form one index over their elements in the same order), and
 * y's element q's offset in x. */
typedef struct sum_to_plan {
  int n;                      /* groups, outermost first */
  int64_t size[IR_MAX_RANK];  /* a group's elements (group 0's, the outermost, is not needed) */
  int64_t stride[IR_MAX_RANK];
  int64_t batch_mul;          /* > 0: group 0 holds the batch, batch * batch_mul elements */
} sum_to_plan;

static void sum_to_groups(const ir_type *xt, const ir_type *yt, const int64_t *xstride, sum_to_plan *g) {
  int rx = xt->rank, lead = rx - yt->rank;
  g->n = 0;
  g->batch_mul = 0;
  int prev = -2;
  for (int d = 0; d < rx; d++) {
    if (!(d < lead || (yt->dims[d - lead] == 1 && xt->dims[d] != 1))) continue;
    bool batch = xt->dims[d] == IR_DIM_BATCH;
    if (prev == d - 1) { /* adjacent to the last group: one index over both */
      int k = g->n - 1;
      if (k == 0 && g->batch_mul) g->batch_mul *= xt->dims[d];
      else g->size[k] *= xt->dims[d];
      g->stride[k] = xstride[d];
    } else {
      g->size[g->n] = batch ? 1 : xt->dims[d];
      g->stride[g->n] = xstride[d];
      if (batch) g->batch_mul = 1; /* only d == 0 is the batch */
      g->n++;
    }
    prev = d;
  }
}

/* sum over the summed groups of x at base + their offsets, `lanes`
 * consecutive elements of x at once (each lane its own sum, in the same
 * order as lanes == 1), in at (f32, or double for bn_mean) */
static LLVMValueRef sum_to_acc(cg_kctx *c, const sum_to_plan *g, LLVMValueRef base, LLVMValueRef total,
                               LLVMTypeRef at, int lanes) {
  cg_emitter *e = c->e;
  const ir_node *x = op_of(c)->srcs[0];
  LLVMTypeRef vt = lanes == 1 ? at : LLVMVectorType(at, (unsigned)lanes);
  LLVMValueRef acc = var(c, vt, LLVMConstNull(vt), "acc");
  cg_loop lt = cg_loop_begin(c, i64c(0), total, 1, "t");
  LLVMValueRef r = lt.iv, xi = base;
  for (int k = g->n - 1; k >= 0; k--) {
    LLVMValueRef coord = k == 0 ? r : LLVMBuildURem(B, r, i64c(g->size[k]), "");
    if (k > 0) r = LLVMBuildUDiv(B, r, i64c(g->size[k]), "");
    xi = LLVMBuildAdd(B, xi, LLVMBuildMul(B, coord, i64c(g->stride[k]), ""), "");
  }
  LLVMValueRef xv = load_f(c, x, xi, lanes);
  if (at != e->f32) xv = LLVMBuildFPExt(B, xv, vt, "");
  LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, acc, vt), xv, ""), acc);
  cg_loop_end(c, &lt);
  return get(c, acc, vt);
}

/* Stores y's elements q .. q+lanes-1: their sums (the mean: over total). */
static void sum_to_store(cg_kctx *c, const sum_to_plan *g, LLVMValueRef q, LLVMValueRef base, LLVMValueRef total,
                         int lanes) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  /* CNN: bn_mean sums the same way in double and divides by the count */
  bool mean = op->op == IR_OP_BN_MEAN;
  LLVMTypeRef at = mean ? LLVMDoubleTypeInContext(e->ctx) : e->f32;
  LLVMValueRef sum = sum_to_acc(c, g, base, total, at, lanes);
  if (mean) {
    LLVMValueRef n = LLVMBuildUIToFP(B, total, at, "");
    sum = LLVMBuildFDiv(B, sum, cg_splat(e, n, lanes), "mean");
  }
  if (at != e->f32) sum = LLVMBuildFPTrunc(B, sum, vec(e, lanes), "");
  store_f(c, op, q, sum, lanes);
}

/* x's offset of y's element q: y's coordinates along the dimensions kept */
static LLVMValueRef sum_to_base(cg_kctx *c, LLVMValueRef q, const int64_t *xstride) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  const ir_type *yt = &op->type;
  int lead = op->srcs[0]->type.rank - yt->rank;
  LLVMValueRef base = i64c(0);
  for (int d = yt->rank - 1; d >= 0; d--) {
    LLVMValueRef coord = d == 0 ? q : LLVMBuildURem(B, q, i64c(yt->dims[d]), "");
    if (d > 0) q = LLVMBuildUDiv(B, q, i64c(yt->dims[d]), "");
    if (yt->dims[d] != 1) base = LLVMBuildAdd(B, base, LLVMBuildMul(B, coord, i64c(xstride[d + lead]), ""), "");
  }
  return base;
}

/* convolutional networks: sum_to of y's elements contiguous in x, the
 * summed dimensions all leading (a bias's gradient, [N,H,W,C] -> [C]):
 * y[o] = sum over t ascending of x[t * numel(y) + o], lanes consecutive
 * y elements a vector at a time, `wide` vectors interleaved (independent
 * chains), each lane the scalar loop's sum in the same order, so the same
 * bits (emit_sum_to_contiguous: false for any other sum_to). */
static void sum_to_lanes(cg_kctx *c, LLVMValueRef o, LLVMValueRef total, int64_t inner, LLVMTypeRef at, int lanes,
                         int wide) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c), *x = op->srcs[0];
  LLVMTypeRef vt = lanes == 1 ? at : LLVMVectorType(at, (unsigned)lanes);
  LLVMValueRef acc[4];
  for (int w = 0; w < wide; w++) acc[w] = var(c, vt, LLVMConstNull(vt), "acc");
  cg_loop lt = cg_loop_begin(c, i64c(0), total, 1, "t");
  LLVMValueRef row = LLVMBuildAdd(B, LLVMBuildMul(B, lt.iv, i64c(inner), ""), o, "");
  for (int w = 0; w < wide; w++) {
    LLVMValueRef xv = load_f(c, x, LLVMBuildAdd(B, row, i64c((int64_t)w * lanes), ""), lanes);
    if (at != e->f32) xv = LLVMBuildFPExt(B, xv, vt, "");
    LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, acc[w], vt), xv, ""), acc[w]);
  }
  cg_loop_end(c, &lt);
  for (int w = 0; w < wide; w++) {
    LLVMValueRef sum = get(c, acc[w], vt);
    if (op->op == IR_OP_BN_MEAN) sum = LLVMBuildFDiv(B, sum, cg_splat(e, LLVMBuildUIToFP(B, total, at, ""), lanes), "mean");
    if (at != e->f32) sum = LLVMBuildFPTrunc(B, sum, vec(e, lanes), "");
    store_f(c, op, LLVMBuildAdd(B, o, i64c((int64_t)w * lanes), ""), sum, lanes);
  }
}

static bool emit_sum_to_contiguous(cg_kctx *c, LLVMValueRef total, LLVMTypeRef at) {
  cg_emitter *e = c->e;
  int64_t inner = 1;
  if (!cg_sum_to_leading(op_of(c), &inner)) return false;
  int vw = e->vw;
  LLVMValueRef o = c->row0;
  for (int pass = 0; pass < 4; pass++) { /* 4, 2, 1 vectors, then one element at a time */
    int lanes = pass < 3 ? vw : 1, wide = pass == 0 ? 4 : pass == 1 ? 2 : 1;
    cg_loop lo = cg_loop_begin(c, o, c->row1, (int64_t)lanes * wide, "o");
    sum_to_lanes(c, lo.iv, total, inner, at, lanes, wide);
    cg_loop_end(c, &lo);
    o = lo.iv;
  }
  return true;
}

/* y[q] sums x over the dimensions y lacks or has as 1, in the row-major
 * order of x's index: one result element at a time (rows are y's elements,
 * or y's batch rows when y keeps N), so the order of every sum is fixed
 * whatever the threads. x's dimension d is summed when y lacks it (the
 * leading ones) or has 1 where x does not. Step-level overheads: when x's
 * last dimension is kept (a bias's gradient, [.., C] -> [C]), vw
 * consecutive elements of y are vw consecutive elements of x at every
 * summed position, so they are summed as one vector, each lane in the
 * same order as alone: the same bits, a vector load per position instead
 * of a scalar one. */
void cg_train_sum_to(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c), *x = op->srcs[0];
  const ir_type *yt = &op->type, *xt = &x->type;
  int rx = xt->rank, ry = yt->rank;
  int64_t xstride[IR_MAX_RANK], yin = 1;
  int64_t st = 1;
  for (int d = rx - 1; d >= 0; d--) {
    xstride[d] = st;
    if (d > 0) st *= xt->dims[d];
  }
  CASTOR_ASSERT(ir_type_inner_numel(yt, &yin));
  int64_t per_row = ir_type_is_batched(yt) ? yin : 1;
  sum_to_plan g;
  sum_to_groups(xt, yt, xstride, &g);
  LLVMValueRef total = i64c(1);
  for (int k = 0; k < g.n; k++)
    total = LLVMBuildMul(B, total, i64c(g.size[k]), "");
  if (g.batch_mul) total = LLVMBuildMul(B, total, LLVMBuildMul(B, c->batch, i64c(g.batch_mul), ""), "");
  if (g.batch_mul) g.size[0] = 0; /* group 0 is outermost: its size is never used */
  /* convolutional networks: only leading dimensions summed, vectors interleaved */
  if (emit_sum_to_contiguous(c, total, op->op == IR_OP_BN_MEAN ? LLVMDoubleTypeInContext(e->ctx) : e->f32)) return;
  LLVMValueRef q0 = LLVMBuildMul(B, c->row0, i64c(per_row), ""), q1 = LLVMBuildMul(B, c->row1, i64c(per_row), "");
  int64_t D = ry > 0 ? yt->dims[ry - 1] : 1; /* y's last dimension */
  int L = e->vw;
  if (L <= 1 || ry == 0 || D < L || D == IR_DIM_BATCH || xt->dims[rx - 1] != D) {
    cg_loop lo = cg_loop_begin(c, q0, q1, 1, "o");
    sum_to_store(c, &g, lo.iv, sum_to_base(c, lo.iv, xstride), total, 1);
    cg_loop_end(c, &lo);
    return;
  }
  /* q from q0 to q1: a vector of L where y's last coordinate and the tile
   * leave room for it, else one element */
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(B);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "q.header");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "q.body");
  LLVMBasicBlockRef vbody = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "q.vec");
  LLVMBasicBlockRef sbody = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "q.one");
  LLVMBasicBlockRef latch = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "q.latch");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "q.exit");
  LLVMBuildBr(B, head);
  LLVMPositionBuilderAtEnd(B, head);
  LLVMValueRef q = LLVMBuildPhi(B, e->i64, "q");
  LLVMAddIncoming(q, &q0, &pre, 1);
  LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLT, q, q1, ""), body, exit);
  LLVMPositionBuilderAtEnd(B, body);
  LLVMValueRef room = LLVMBuildAnd(
      B, LLVMBuildICmp(B, LLVMIntSLE, LLVMBuildAdd(B, LLVMBuildURem(B, q, i64c(D), ""), i64c(L), ""), i64c(D), ""),
      LLVMBuildICmp(B, LLVMIntSLE, LLVMBuildAdd(B, q, i64c(L), ""), q1, ""), "room");
  LLVMBuildCondBr(B, room, vbody, sbody);
  LLVMPositionBuilderAtEnd(B, vbody);
  sum_to_store(c, &g, q, sum_to_base(c, q, xstride), total, L);
  LLVMValueRef qv = LLVMBuildAdd(B, q, i64c(L), "");
  LLVMBasicBlockRef vend = LLVMGetInsertBlock(B);
  LLVMBuildBr(B, latch);
  LLVMPositionBuilderAtEnd(B, sbody);
  sum_to_store(c, &g, q, sum_to_base(c, q, xstride), total, 1);
  LLVMValueRef qs = LLVMBuildAdd(B, q, i64c(1), "");
  LLVMBasicBlockRef send = LLVMGetInsertBlock(B);
  LLVMBuildBr(B, latch);
  LLVMPositionBuilderAtEnd(B, latch);
  LLVMValueRef qn = LLVMBuildPhi(B, e->i64, "qn");
  LLVMValueRef inc[2] = {qv, qs};
  LLVMBasicBlockRef from[2] = {vend, send};
  LLVMAddIncoming(qn, inc, from, 2);
  LLVMBuildBr(B, head);
  LLVMAddIncoming(q, &qn, &latch, 1);
  LLVMPositionBuilderAtEnd(B, exit);
}

/* ---- general tensors: gather_grad, the ordered scatter-add ---- */

/* The table as [P, V, S] (V its gathered dimension, the kernel's rows), dy
 * as [P, Q, S] with Q the indices' count: each row v is zeroed, then every
 * position q in order whose index is v adds dy's slice; rows are split
 * over threads, positions never, so any thread count gives the same bits. */
void cg_train_gather_grad(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c), *dy = op->srcs[0], *b = op->srcs[1];
  int ax = ir_concat_axis(&op->type, op->attr.axis);
  int64_t P = 1, S = 1, V = op->type.dims[ax], qin = 1;
  for (int r = 0; r < ax; r++) P *= op->type.dims[r];
  for (int r = ax + 1; r < op->type.rank; r++) S *= op->type.dims[r];
  CASTOR_ASSERT(ir_type_inner_numel(&b->type, &qin));
  LLVMValueRef Q = ir_type_is_batched(&b->type) ? LLVMBuildMul(B, c->batch, i64c(qin), "Q") : i64c(qin);
  cg_loop lv = cg_loop_begin(c, c->row0, c->row1, 1, "v");
  cg_loop lp = cg_loop_begin(c, i64c(0), i64c(P * S), 1, "ps");
  LLVMValueRef p = LLVMBuildSDiv(B, lp.iv, i64c(S), ""), sidx = LLVMBuildSRem(B, lp.iv, i64c(S), "");
  LLVMValueRef yi = LLVMBuildAdd(B, LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, p, i64c(V), ""), lv.iv, ""), i64c(S), ""),
                                 sidx, "");
  store_f(c, op, yi, F(0), 1);
  cg_loop_end(c, &lp);
  cg_loop lq = cg_loop_begin(c, i64c(0), Q, 1, "q");
  /* the row the gather read: a negative index from the end, then clamped into [0, V) */
  LLVMValueRef k = load_int(c, b, lq.iv);
  k = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, k, i64c(0), ""), LLVMBuildAdd(B, k, i64c(V), ""), k, "");
  k = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, k, i64c(0), ""), i64c(0), k, "");
  k = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGE, k, i64c(V), ""), i64c(V - 1), k, "");
  LLVMBasicBlockRef join = begin_if(c, LLVMBuildICmp(B, LLVMIntEQ, k, lv.iv, ""), "hit");
  cg_loop la = cg_loop_begin(c, i64c(0), i64c(P * S), 1, "add");
  p = LLVMBuildSDiv(B, la.iv, i64c(S), ""), sidx = LLVMBuildSRem(B, la.iv, i64c(S), "");
  yi = LLVMBuildAdd(B, LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, p, i64c(V), ""), lv.iv, ""), i64c(S), ""), sidx, "");
  LLVMValueRef di = LLVMBuildAdd(B, LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, p, Q, ""), lq.iv, ""), i64c(S), ""),
                                 sidx, "");
  store_f(c, op, yi, LLVMBuildFAdd(B, load_f(c, op, yi, 1), load_f(c, dy, di, 1), ""), 1);
  cg_loop_end(c, &la);
  end_if(c, join);
  cg_loop_end(c, &lq);
  cg_loop_end(c, &lv);
}
