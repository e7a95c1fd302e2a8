/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_loss.c: the kernel kit's losses, their gradients and softmax's
 * gradient, for every target (cg_train.h says how a launch's rows map):
 *
 *   xent..., mse   one scalar: per-row losses in f32, summed in row order
 *                  in double, divided by the batch
 *   their _grad    batched rows: each row from its own row (and the seed)
 *   softmax_grad   batched rows along the last dimension
 *
 * Each loss is a branch of row_loss and loss_grad_row by op, and one that
 * has none is an assertion, never another loss's formula.
 */
#include <math.h>

#include "codegen/kernel/cg_train.h"

/* ---- the losses and their gradients, row by row ---- */

/* Target t[i,j] as f32: a class index compared with j, or the dense value. */
static LLVMValueRef target(cg_kctx *c, LLVMValueRef i, LLVMValueRef j, int64_t C) {
  cg_emitter *e = c->e;
  const ir_node *t = op_of(c)->srcs[1];
  if (t->type.dtype == DT_I32) {
    LLVMValueRef y = load_int(c, t, i);
    return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntEQ, y, j, ""), F(1), F(0), "");
  }
  return load_f(c, t, LLVMBuildAdd(B, LLVMBuildMul(B, i, i64c(C), ""), j, ""), 1);
}

/* clip(q, eps, 1 - eps), NaN kept (as jnp.clip) */
static LLVMValueRef clip(cg_emitter *e, LLVMValueRef q, double eps) {
  LLVMValueRef lo = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, q, F(eps), ""), F(eps), q, "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, lo, F(1 - eps), ""), F(1 - eps), lo, "clip");
}

static LLVMValueRef inside_clip(cg_emitter *e, LLVMValueRef q, double eps) {
  /* q in [eps, 1 - eps], or NaN (whose gradient stays NaN) */
  LLVMValueRef in = LLVMBuildAnd(B, LLVMBuildFCmp(B, LLVMRealOGE, q, F(eps), ""),
                                 LLVMBuildFCmp(B, LLVMRealOLE, q, F(1 - eps), ""), "");
  return LLVMBuildOr(B, in, LLVMBuildFCmp(B, LLVMRealUNO, q, q, ""), "inside");
}

/* Row sums of the prediction row: sum p, or max z and sum exp(z - max). */
static LLVMValueRef row_sum(cg_kctx *c, const ir_node *p, LLVMValueRef base, int64_t C) {
  cg_emitter *e = c->e;
  LLVMValueRef s = var(c, e->f32, F(0), "sum");
  cg_loop l = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
  LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, s, e->f32), load_f(c, p, LLVMBuildAdd(B, base, l.iv, ""), 1), ""), s);
  cg_loop_end(c, &l);
  return get(c, s, e->f32);
}

static void logsumexp(cg_kctx *c, const ir_node *z, LLVMValueRef base, int64_t C, LLVMValueRef *mx, LLVMValueRef *se) {
  cg_emitter *e = c->e;
  LLVMValueRef m = var(c, e->f32, F(-INFINITY), "max"), s = var(c, e->f32, F(0), "sumexp");
  cg_loop l = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
  LLVMValueRef v = load_f(c, z, LLVMBuildAdd(B, base, l.iv, ""), 1), cur = get(c, m, e->f32);
  /* NaN propagates: max(cur, v) is v when v is NaN or larger */
  LLVMBuildStore(B, LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUGT, v, cur, ""), v, cur, ""), m);
  cg_loop_end(c, &l);
  *mx = get(c, m, e->f32);
  cg_loop l2 = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
  LLVMValueRef v2 = load_f(c, z, LLVMBuildAdd(B, base, l2.iv, ""), 1);
  LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, s, e->f32), cg_emit_exp(e, LLVMBuildFSub(B, v2, *mx, ""), ""), ""), s);
  cg_loop_end(c, &l2);
  *se = get(c, s, e->f32);
}

/* The loss of row i (f32). */
static LLVMValueRef row_loss(cg_kctx *c, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c), *p = op->srcs[0];
  int64_t C = p->type.dims[1];
  LLVMValueRef base = LLVMBuildMul(B, i, i64c(C), "");
  LLVMValueRef acc = var(c, e->f32, F(0), "row");
  if (op->op == IR_OP_XENT) {
    LLVMValueRef sum = row_sum(c, p, base, C);
    cg_loop l = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
    LLVMValueRef q = LLVMBuildFDiv(B, load_f(c, p, LLVMBuildAdd(B, base, l.iv, ""), 1), sum, "q");
    LLVMValueRef t = target(c, i, l.iv, C);
    LLVMValueRef term = LLVMBuildFMul(B, t, intrinsic1(e, "llvm.log", clip(e, q, op->attr.epsilon)), "");
    LLVMBuildStore(B, LLVMBuildFSub(B, get(c, acc, e->f32), term, ""), acc);
    cg_loop_end(c, &l);
  } else if (op->op == IR_OP_XENT_LOGITS) {
    LLVMValueRef mx, se;
    logsumexp(c, p, base, C, &mx, &se);
    LLVMValueRef lse = LLVMBuildFAdd(B, mx, intrinsic1(e, "llvm.log", se), "lse");
    cg_loop l = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
    LLVMValueRef t = target(c, i, l.iv, C), z = load_f(c, p, LLVMBuildAdd(B, base, l.iv, ""), 1);
    /* sum_j t_j (lse - z_j) */
    LLVMValueRef term = LLVMBuildFMul(B, t, LLVMBuildFSub(B, lse, z, ""), "");
    LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, acc, e->f32), term, ""), acc);
    cg_loop_end(c, &l);
  } else { /* mse: the row's sum of squares; the mean divides by N*C */
    CASTOR_ASSERT(op->op == IR_OP_MSE); /* a loss with no formula here is a bug, not an mse */
    cg_loop l = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
    LLVMValueRef d = LLVMBuildFSub(B, load_f(c, p, LLVMBuildAdd(B, base, l.iv, ""), 1), target(c, i, l.iv, C), "");
    LLVMBuildStore(B, cg_fmuladd(e, d, d, get(c, acc, e->f32)), acc);
    cg_loop_end(c, &l);
  }
  return get(c, acc, e->f32);
}

/* The rows the mean is over: the run's batch N, or the predictions' static first dimension (a
 * model exported with a fixed batch: an ONNX file of static shapes). */
static LLVMValueRef loss_rows(cg_kctx *c, const ir_node *p) {
  cg_emitter *e = c->e;
  return ir_type_is_batched(&p->type) ? c->batch : i64c(p->type.dims[0]);
}

void cg_train_loss(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  LLVMTypeRef f64 = LLVMDoubleTypeInContext(e->ctx);
  LLVMValueRef total = var(c, f64, LLVMConstReal(f64, 0), "total");
  LLVMValueRef rows = loss_rows(c, op->srcs[0]);
  cg_loop li = cg_loop_begin(c, i64c(0), rows, 1, "i");
  LLVMValueRef r = LLVMBuildFPExt(B, row_loss(c, li.iv), f64, "");
  LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, total, f64), r, ""), total);
  cg_loop_end(c, &li);
  LLVMValueRef n = LLVMBuildSIToFP(B, rows, f64, "");
  if (op->op == IR_OP_MSE) n = LLVMBuildFMul(B, n, LLVMConstReal(f64, (double)op->srcs[0]->type.dims[1]), "");
  LLVMValueRef mean = LLVMBuildFPTrunc(B, LLVMBuildFDiv(B, get(c, total, f64), n, ""), e->f32, "loss");
  store_f(c, op, i64c(0), mean, 1);
}

/* The gradient rows: y[i,:] from row i. */
static void loss_grad_row(cg_kctx *c, LLVMValueRef i) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c), *p = op->srcs[0], *seed = op->srcs[2];
  int64_t C = p->type.dims[1];
  LLVMValueRef base = LLVMBuildMul(B, i, i64c(C), "");
  LLVMValueRef n = LLVMBuildSIToFP(B, loss_rows(c, p), e->f32, "");
  if (op->op == IR_OP_MSE_GRAD) n = LLVMBuildFMul(B, n, F((double)C), "");
  LLVMValueRef scale = LLVMBuildFDiv(B, load_f(c, seed, i64c(0), 1), n, "c_over_n");
  if (op->op == IR_OP_MSE_GRAD) {
    scale = LLVMBuildFMul(B, scale, F(2), "");
    cg_loop l = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
    LLVMValueRef idx = LLVMBuildAdd(B, base, l.iv, "");
    LLVMValueRef d = LLVMBuildFSub(B, load_f(c, p, idx, 1), target(c, i, l.iv, C), "");
    store_f(c, op, idx, LLVMBuildFMul(B, scale, d, ""), 1);
    cg_loop_end(c, &l);
    return;
  }
  if (op->op == IR_OP_XENT_LOGITS_GRAD) { /* c/N (softmax(z) sum t - t) */
    LLVMValueRef mx, se;
    logsumexp(c, p, base, C, &mx, &se);
    LLVMValueRef st = var(c, e->f32, F(0), "sum_t");
    cg_loop l = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
    LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, st, e->f32), target(c, i, l.iv, C), ""), st);
    cg_loop_end(c, &l);
    LLVMValueRef sumt = get(c, st, e->f32);
    cg_loop l2 = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
    LLVMValueRef idx = LLVMBuildAdd(B, base, l2.iv, "");
    LLVMValueRef sm = LLVMBuildFDiv(B, cg_emit_exp(e, LLVMBuildFSub(B, load_f(c, p, idx, 1), mx, ""), ""), se, "");
    LLVMValueRef d = LLVMBuildFSub(B, LLVMBuildFMul(B, sm, sumt, ""), target(c, i, l2.iv, C), "");
    store_f(c, op, idx, LLVMBuildFMul(B, scale, d, ""), 1);
    cg_loop_end(c, &l2);
    return;
  }
  /* xent_grad: c/N q_j (g_j - G), g_k = -t_k/q_k inside the clip, else 0 */
  CASTOR_ASSERT(op->op == IR_OP_XENT_GRAD); /* no fallback for a loss gradient without a formula */
  double eps = op->attr.epsilon;
  LLVMValueRef sum = row_sum(c, p, base, C);
  LLVMValueRef dot = var(c, e->f32, F(0), "G");
  cg_loop l = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
  LLVMValueRef q = LLVMBuildFDiv(B, load_f(c, p, LLVMBuildAdd(B, base, l.iv, ""), 1), sum, "q");
  LLVMValueRef g = LLVMBuildSelect(B, inside_clip(e, q, eps), LLVMBuildFDiv(B, LLVMBuildFNeg(B, target(c, i, l.iv, C), ""), q, ""),
                                   F(0), "g");
  LLVMBuildStore(B, cg_fmuladd(e, g, q, get(c, dot, e->f32)), dot);
  cg_loop_end(c, &l);
  LLVMValueRef G = get(c, dot, e->f32);
  cg_loop l2 = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
  LLVMValueRef idx = LLVMBuildAdd(B, base, l2.iv, "");
  LLVMValueRef q2 = LLVMBuildFDiv(B, load_f(c, p, idx, 1), sum, "q");
  LLVMValueRef g2 = LLVMBuildSelect(B, inside_clip(e, q2, eps), LLVMBuildFDiv(B, LLVMBuildFNeg(B, target(c, i, l2.iv, C), ""), q2, ""),
                                    F(0), "g");
  LLVMValueRef y = LLVMBuildFMul(B, scale, LLVMBuildFMul(B, q2, LLVMBuildFSub(B, g2, G, ""), ""), "");
  store_f(c, op, idx, y, 1);
  cg_loop_end(c, &l2);
}

void cg_train_loss_grad(cg_kctx *c) {
  cg_emitter *e = c->e;
  int64_t per = cg_launch_rows(c, op_of(c)); /* a static batch: its rows in one launch row */
  cg_loop li = cg_loop_begin(c, LLVMBuildMul(B, c->row0, i64c(per), ""), LLVMBuildMul(B, c->row1, i64c(per), ""), 1, "i");
  loss_grad_row(c, li.iv);
  cg_loop_end(c, &li);
}

/* softmax_grad: y = b (a - sum(a b)) along the last dimension */
void cg_train_softmax_grad(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c), *dy = op->srcs[0], *p = op->srcs[1];
  int64_t inner = 1, C = op->type.dims[op->type.rank - 1];
  CASTOR_ASSERT(ir_type_inner_numel(&op->type, &inner));
  int64_t lines = inner / C;
  cg_loop li = cg_loop_begin(c, LLVMBuildMul(B, c->row0, i64c(lines), ""), LLVMBuildMul(B, c->row1, i64c(lines), ""), 1, "line");
  LLVMValueRef base = LLVMBuildMul(B, li.iv, i64c(C), "");
  LLVMValueRef dot = var(c, e->f32, F(0), "dot");
  cg_loop l = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
  LLVMValueRef idx = LLVMBuildAdd(B, base, l.iv, "");
  LLVMBuildStore(B, cg_fmuladd(e, load_f(c, dy, idx, 1), load_f(c, p, idx, 1), get(c, dot, e->f32)), dot);
  cg_loop_end(c, &l);
  LLVMValueRef d = get(c, dot, e->f32);
  cg_loop l2 = cg_loop_begin(c, i64c(0), i64c(C), 1, "j");
  LLVMValueRef idx2 = LLVMBuildAdd(B, base, l2.iv, "");
  LLVMValueRef y = LLVMBuildFMul(B, load_f(c, p, idx2, 1), LLVMBuildFSub(B, load_f(c, dy, idx2, 1), d, ""), "");
  store_f(c, op, idx2, y, 1);
  cg_loop_end(c, &l2);
  cg_loop_end(c, &li);
}
