/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_train.c: the CPU kernels of a training step's ops of the reduce and
 * update classes, and the row-wise ops with no line formula in
 * cg_rowwise.c (passes/grad.c builds the step; ir_ops.def gives each op's
 * semantics). cg_cpu.c routes kernels here by kernel class; within a
 * class the op's shape rule picks the kernel. Each is a kernel of its own
 * (matmul_nt is a contraction: cg_gemm.c, with b packed transposed into
 * the call's scratch):
 *
 *   matmul_tn      the GEMM of cg_gemm.c with the batch as its summed
 *                  dimension: rows = the result's K rows; y[k,j] sums over
 *                  the batch in row order, in blocks of fixed size
 *   sum_rows       rows = the result's elements, one vector of them at a
 *                  time, summed over the batch in row order
 *                  (matmul_tn and sum_rows of unbatched operands, a
 *                  weight's own computation, sum the operands' rows)
 *   xent..., mse   one scalar: per-row losses in f32, summed in row order
 *                  in double, divided by the batch
 *   their _grad    batched rows: each row from its own row (and the seed)
 *   softmax_grad   batched rows along the last dimension
 *   gather_grad    rows = the table's gathered dimension: each row zeroed,
 *                  then every index position in order that names it adds
 *                  dy's slice (an ordered scatter-add)
 *   all_finite     one scalar: a sum of x * 0 over every element, which is
 *                  NaN exactly when some element is not finite
 *   sgd ... adam   rows = the variable's elements, in place, when ok
 *   count_step,
 *   loss_scale_update  one scalar, in place
 *
 * Determinism: a reduction over the batch (matmul_tn, sum_rows, the
 * losses) runs in row order inside one call, and the runtime splits such a
 * launch only over its result's elements, never over the batch; so results
 * do not depend on the number of threads.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cpu/cg_cpu.h"

#define B (e->b)
#define i64c(v) cg_i64(e, (v))
#define F(v) cg_const(e, e->f32, (v))

static const ir_node *op_of(const cg_kctx *c) { return c->k->ops[0]; }

static LLVMValueRef load_f(cg_kctx *c, const ir_node *n, LLVMValueRef i, int lanes) {
  return cg_emit_load(c->e, n->type.dtype, cg_elem_ptr(c, n, i), lanes, n->name);
}

static void store_f(cg_kctx *c, const ir_node *n, LLVMValueRef i, LLVMValueRef v, int lanes) {
  cg_emit_store(c->e, n->type.dtype, v, cg_elem_ptr(c, n, i), lanes);
}

/* An integer scalar (i1 byte, i32, i64) as i64. */
static LLVMValueRef load_int(cg_kctx *c, const ir_node *n, LLVMValueRef i) {
  cg_emitter *e = c->e;
  LLVMTypeRef t = n->type.dtype == DT_I64 ? e->i64 : n->type.dtype == DT_I32 ? e->i32 : LLVMInt8TypeInContext(e->ctx);
  LLVMValueRef v = LLVMBuildLoad2(B, t, LLVMBuildGEP2(B, t, c->base[n->id], &i, 1, ""), n->name);
  return t == e->i64 ? v : LLVMBuildSExt(B, v, e->i64, "");
}

static void store_int(cg_kctx *c, const ir_node *n, LLVMValueRef v) {
  cg_emitter *e = c->e;
  LLVMTypeRef t = n->type.dtype == DT_I64 ? e->i64 : n->type.dtype == DT_I32 ? e->i32 : LLVMInt8TypeInContext(e->ctx);
  LLVMBuildStore(B, t == e->i64 ? v : LLVMBuildTrunc(B, v, t, ""), c->base[n->id]);
}

/* A variable of type ty in the entry block, set to init here. */
static LLVMValueRef var(cg_kctx *c, LLVMTypeRef ty, LLVMValueRef init, const char *name) {
  LLVMValueRef a = cg_entry_alloca(c, ty, name);
  LLVMBuildStore(c->e->b, init, a);
  return a;
}

static LLVMValueRef get(cg_kctx *c, LLVMValueRef a, LLVMTypeRef ty) { return LLVMBuildLoad2(c->e->b, ty, a, ""); }

static LLVMTypeRef vec(cg_emitter *e, int lanes) { return lanes == 1 ? e->f32 : LLVMVectorType(e->f32, (unsigned)lanes); }

/* The lanes of v summed in lane order. */
static LLVMValueRef hsum(cg_emitter *e, LLVMValueRef v, int lanes) {
  if (lanes == 1) return v;
  LLVMValueRef s = LLVMBuildExtractElement(B, v, i64c(0), "");
  for (int l = 1; l < lanes; l++) s = LLVMBuildFAdd(B, s, LLVMBuildExtractElement(B, v, i64c(l), ""), "");
  return s;
}

static LLVMValueRef intrinsic1(cg_emitter *e, const char *name, LLVMValueRef x) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, id, &ty, 1);
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, &x, 1, "");
}

/* The rows a reduction over the rows of x sums (matmul_tn, sum_rows): the
 * run's batch, or the first dimension of an unbatched x (a weight's own
 * computation, such as a layer_norm of a weight). */
static LLVMValueRef rows_of(cg_kctx *c, const ir_node *x) {
  return ir_type_is_batched(&x->type) ? c->batch : cg_i64(c->e, x->type.dims[0]);
}

/* if (cond) { ...then... } : returns the join block, builder in "then". */
static LLVMBasicBlockRef begin_if(cg_kctx *c, LLVMValueRef cond, const char *name) {
  cg_emitter *e = c->e;
  char nm[64];
  snprintf(nm, sizeof nm, "%s.then", name);
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  snprintf(nm, sizeof nm, "%s.end", name);
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(e->ctx, c->fn, nm);
  LLVMBuildCondBr(B, cond, then, join);
  LLVMPositionBuilderAtEnd(B, then);
  return join;
}

static void end_if(cg_kctx *c, LLVMBasicBlockRef join) {
  LLVMBuildBr(c->e->b, join);
  LLVMPositionBuilderAtEnd(c->e->b, join);
}

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

static void emit_sum_rows(cg_kctx *c) {
  cg_emitter *e = c->e;
  cg_loop lv = cg_loop_begin(c, c->row0, c->row1, e->vw, "jv");
  sum_cols(c, lv.iv, e->vw);
  cg_loop_end(c, &lv);
  cg_loop ls = cg_loop_begin(c, lv.iv, c->row1, 1, "js");
  sum_cols(c, ls.iv, 1);
  cg_loop_end(c, &ls);
}

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

static void emit_loss(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  LLVMTypeRef f64 = LLVMDoubleTypeInContext(e->ctx);
  LLVMValueRef total = var(c, f64, LLVMConstReal(f64, 0), "total");
  cg_loop li = cg_loop_begin(c, i64c(0), c->batch, 1, "i");
  LLVMValueRef r = LLVMBuildFPExt(B, row_loss(c, li.iv), f64, "");
  LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, total, f64), r, ""), total);
  cg_loop_end(c, &li);
  LLVMValueRef n = LLVMBuildSIToFP(B, c->batch, f64, "");
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
  LLVMValueRef n = LLVMBuildSIToFP(B, c->batch, e->f32, "");
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

static void emit_loss_grad(cg_kctx *c) {
  cg_loop li = cg_loop_begin(c, c->row0, c->row1, 1, "i");
  loss_grad_row(c, li.iv);
  cg_loop_end(c, &li);
}

/* softmax_grad: y = b (a - sum(a b)) along the last dimension */
static void emit_softmax_grad(cg_kctx *c) {
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

/* ---- all_finite ---- */

static void emit_all_finite(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  int vw = e->vw;
  LLVMValueRef acc = var(c, vec(e, vw), LLVMConstNull(vec(e, vw)), "acc"); /* + x*0: NaN iff some x is not finite */
  LLVMValueRef flags = var(c, e->i64, i64c(1), "flags");
  for (int s = 0; s < op->n_srcs; s++) {
    const ir_node *x = op->srcs[s];
    if (x->type.dtype == DT_I1) {
      LLVMBuildStore(B, LLVMBuildAnd(B, get(c, flags, e->i64), load_int(c, x, i64c(0)), ""), flags);
      continue;
    }
    int64_t inner = 1;
    CASTOR_ASSERT(ir_type_inner_numel(&x->type, &inner));
    LLVMValueRef n = ir_type_is_batched(&x->type) ? LLVMBuildMul(B, c->batch, i64c(inner), "") : i64c(inner);
    cg_loop lv = cg_loop_begin(c, i64c(0), n, vw, x->name);
    LLVMValueRef v = load_f(c, x, lv.iv, vw);
    LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, acc, vec(e, vw)), LLVMBuildFMul(B, v, LLVMConstNull(vec(e, vw)), ""), ""), acc);
    cg_loop_end(c, &lv);
    cg_loop ls = cg_loop_begin(c, lv.iv, n, 1, "tail");
    LLVMValueRef t = load_f(c, x, ls.iv, 1);
    LLVMValueRef cur = get(c, acc, vec(e, vw));
    LLVMValueRef lane0 = LLVMBuildExtractElement(B, cur, i64c(0), "");
    LLVMBuildStore(B, LLVMBuildInsertElement(B, cur, LLVMBuildFAdd(B, lane0, LLVMBuildFMul(B, t, F(0), ""), ""), i64c(0), ""), acc);
    cg_loop_end(c, &ls);
  }
  LLVMValueRef s = hsum(e, get(c, acc, vec(e, vw)), vw);
  LLVMValueRef finite = LLVMBuildFCmp(B, LLVMRealOEQ, s, F(0), "finite");
  LLVMValueRef ok = LLVMBuildAnd(B, LLVMBuildZExt(B, finite, e->i64, ""), get(c, flags, e->i64), "ok");
  store_int(c, op, ok);
}

/* ---- training options: gradient clipping ---- */

/* The elements of x (batched: the run's batch of rows). */
static LLVMValueRef numel_of(cg_kctx *c, const ir_node *x) {
  cg_emitter *e = c->e;
  int64_t inner = 1;
  CASTOR_ASSERT(ir_type_inner_numel(&x->type, &inner));
  return ir_type_is_batched(&x->type) ? LLVMBuildMul(B, c->batch, i64c(inner), "") : i64c(inner);
}

/* grad_norm_sq(a, s, g...): a + the sum of (x/s)^2, in f32 lanes then in
 * lane order, the operands in order (one call: deterministic) */
static void emit_grad_norm_sq(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  int vw = e->vw;
  LLVMValueRef inv = LLVMBuildFDiv(B, F(1), load_f(c, op->srcs[1], i64c(0), 1), "inv_scale");
  LLVMValueRef acc = var(c, vec(e, vw), LLVMConstNull(vec(e, vw)), "acc");
  LLVMValueRef tail = var(c, e->f32, F(0), "tail");
  for (int s = 2; s < op->n_srcs; s++) {
    const ir_node *x = op->srcs[s];
    LLVMValueRef n = numel_of(c, x);
    cg_loop lv = cg_loop_begin(c, i64c(0), n, vw, x->name);
    LLVMValueRef v = LLVMBuildFMul(B, load_f(c, x, lv.iv, vw), cg_splat(e, inv, vw), "");
    LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, acc, vec(e, vw)), LLVMBuildFMul(B, v, v, ""), ""), acc);
    cg_loop_end(c, &lv);
    cg_loop ls = cg_loop_begin(c, lv.iv, n, 1, "tail");
    LLVMValueRef t = LLVMBuildFMul(B, load_f(c, x, ls.iv, 1), inv, "");
    LLVMBuildStore(B, LLVMBuildFAdd(B, get(c, tail, e->f32), LLVMBuildFMul(B, t, t, ""), ""), tail);
    cg_loop_end(c, &ls);
  }
  LLVMValueRef sum = LLVMBuildFAdd(B, hsum(e, get(c, acc, vec(e, vw)), vw), get(c, tail, e->f32), "");
  store_f(c, op, i64c(0), LLVMBuildFAdd(B, load_f(c, op->srcs[0], i64c(0), 1), sum, ""), 1);
}

/* max(a, b) and min(a, b) that keep a NaN a */
static LLVMValueRef max_nan(cg_emitter *e, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, a, b, ""), b, a, "");
}
static LLVMValueRef min_nan(cg_emitter *e, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, a, b, ""), b, a, "");
}

/* clip_scale(s, q): s * max(sqrt(q), c) / c */
static void emit_clip_scale(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  LLVMValueRef s = load_f(c, op->srcs[0], i64c(0), 1), q = load_f(c, op->srcs[1], i64c(0), 1);
  LLVMValueRef norm = max_nan(e, intrinsic1(e, "llvm.sqrt", q), F(op->attr.clipnorm));
  store_f(c, op, i64c(0), LLVMBuildFDiv(B, LLVMBuildFMul(B, s, norm, ""), F(op->attr.clipnorm), "clip_scale"), 1);
}

/* clip_value(g, s): g clamped to [-c s, c s] */
static void emit_clip_value(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c), *g = op->srcs[0];
  LLVMValueRef hi = LLVMBuildFMul(B, F(op->attr.clipvalue), load_f(c, op->srcs[1], i64c(0), 1), "hi");
  LLVMValueRef n = numel_of(c, g);
  int vw = e->vw;
  cg_loop lv = cg_loop_begin(c, i64c(0), n, vw, "e");
  LLVMValueRef h = cg_splat(e, hi, vw);
  store_f(c, op, lv.iv, min_nan(e, max_nan(e, load_f(c, g, lv.iv, vw), LLVMBuildFNeg(B, h, "")), h), vw);
  cg_loop_end(c, &lv);
  cg_loop ls = cg_loop_begin(c, lv.iv, n, 1, "et");
  store_f(c, op, ls.iv, min_nan(e, max_nan(e, load_f(c, g, ls.iv, 1), LLVMBuildFNeg(B, hi, "")), hi), 1);
  cg_loop_end(c, &ls);
}

/* ---- updates, in place ---- */

/* The optimizers' formulas (ir_ops.def; keras/src/optimizers/{sgd,rmsprop,
 * adam}.py), one row per update op: a new optimizer is a new row (and its
 * formula), never another optimizer's formula by default. The update
 * ops with no row (count_step, loss_scale_update) are scalar updates
 * (emit_scalar_update). */
typedef enum update_formula {
  UPDATE_NONE, UPDATE_SGD, UPDATE_SGD_MOMENTUM, UPDATE_RMSPROP, UPDATE_ADAM,
  UPDATE_MOVING, /* CNN: batch normalization's moving statistics (emit_moving_update) */
} update_formula;
static const struct update_row {
  update_formula formula;
  bool centered, momentum; /* rmsprop's variants */
  bool decay;              /* adamw: w -= w * weight_decay * lr first */
} update_rows[IR_OP_COUNT] = {
    [IR_OP_SGD] = {UPDATE_SGD, false, false, false},
    [IR_OP_SGD_MOMENTUM] = {UPDATE_SGD_MOMENTUM, false, false, false},
    [IR_OP_RMSPROP] = {UPDATE_RMSPROP, false, false, false},
    [IR_OP_RMSPROP_MOMENTUM] = {UPDATE_RMSPROP, false, true, false},
    [IR_OP_RMSPROP_CENTERED] = {UPDATE_RMSPROP, true, false, false},
    [IR_OP_RMSPROP_CENTERED_MOMENTUM] = {UPDATE_RMSPROP, true, true, false},
    [IR_OP_ADAM] = {UPDATE_ADAM, false, false, false},
    [IR_OP_ADAMW] = {UPDATE_ADAM, false, false, true}, /* training options */
    [IR_OP_MOVING_UPDATE] = {UPDATE_MOVING, false, false, false}, /* CNN: batch normalization */
};

/* The optimizer's formula on `lanes` elements at index i. */
static void update_elems(cg_kctx *c, LLVMValueRef i, int lanes, LLVMValueRef lr, LLVMValueRef inv_scale,
                         LLVMValueRef alpha) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  const ir_attr *at = &op->attr;
  int w = ir_op_writes(op->op);
  LLVMTypeRef ty = vec(e, lanes);
#define V(x) cg_const(e, ty, (x))
  LLVMValueRef g = LLVMBuildFMul(B, load_f(c, op->srcs[w], i, lanes), cg_splat(e, inv_scale, lanes), "g");
  LLVMValueRef lrv = cg_splat(e, lr, lanes), x = load_f(c, op->srcs[0], i, lanes), nx = NULL;
  const struct update_row *row = &update_rows[op->op];
  if (row->decay) /* Keras's _apply_weight_decay: variable - variable * wd * lr, before the update */
    x = LLVMBuildFSub(B, x, LLVMBuildFMul(B, LLVMBuildFMul(B, x, V(at->weight_decay), ""), lrv, ""), "decayed"),
    x = cg_emit_round_to(e, x, op->srcs[0]->type.dtype, ""); /* assigned: the variable's dtype */
  switch (row->formula) {
  case UPDATE_SGD: {
    nx = LLVMBuildFSub(B, x, LLVMBuildFMul(B, g, lrv, ""), "");
    break;
  }
  case UPDATE_SGD_MOMENTUM: {
    LLVMValueRef m = load_f(c, op->srcs[1], i, lanes);
    LLVMValueRef lg = LLVMBuildFMul(B, LLVMBuildFNeg(B, g, ""), lrv, "");        /* -g * lr */
    LLVMValueRef nm = LLVMBuildFAdd(B, lg, LLVMBuildFMul(B, m, V(at->momentum), ""), "m"); /* + m * mu */
    store_f(c, op->srcs[1], i, nm, lanes);
    nm = cg_emit_round_to(e, nm, op->srcs[1]->type.dtype, "");
    nx = LLVMBuildFAdd(B, x, at->nesterov ? LLVMBuildFAdd(B, lg, LLVMBuildFMul(B, nm, V(at->momentum), ""), "") : nm, "");
    break;
  }
  case UPDATE_RMSPROP: { /* operands w, v, [a if centered], [m with momentum], g, ... */
    bool centered = row->centered, momentum = row->momentum;
    LLVMValueRef v = load_f(c, op->srcs[1], i, lanes);
    LLVMValueRef nv = LLVMBuildFAdd(B, LLVMBuildFMul(B, v, V(at->rho), ""),
                                    LLVMBuildFMul(B, LLVMBuildFMul(B, g, g, ""), V(1 - at->rho), ""), "v");
    store_f(c, op->srcs[1], i, nv, lanes);
    LLVMValueRef den = cg_emit_round_to(e, nv, op->srcs[1]->type.dtype, "");
    if (centered) { /* den = v - a^2 */
      LLVMValueRef a = load_f(c, op->srcs[2], i, lanes);
      LLVMValueRef na = LLVMBuildFAdd(B, LLVMBuildFMul(B, a, V(at->rho), ""), LLVMBuildFMul(B, g, V(1 - at->rho), ""), "a");
      store_f(c, op->srcs[2], i, na, lanes);
      na = cg_emit_round_to(e, na, op->srcs[2]->type.dtype, "");
      den = LLVMBuildFSub(B, den, LLVMBuildFMul(B, na, na, ""), "");
    }
    den = intrinsic1(e, "llvm.sqrt", LLVMBuildFAdd(B, den, V(at->epsilon), ""));
    LLVMValueRef inc = LLVMBuildFDiv(B, LLVMBuildFMul(B, lrv, g, ""), den, "inc"); /* (lr g) / den, as Keras */
    if (momentum) { /* m = mu m + inc; w -= m */
      const ir_node *ms = op->srcs[w - 1];
      LLVMValueRef nm = LLVMBuildFAdd(B, LLVMBuildFMul(B, load_f(c, ms, i, lanes), V(at->momentum), ""), inc, "m");
      store_f(c, ms, i, nm, lanes);
      inc = cg_emit_round_to(e, nm, ms->type.dtype, "");
    }
    nx = LLVMBuildFSub(B, x, inc, "");
    break;
  }
  case UPDATE_ADAM: {
    LLVMValueRef m = load_f(c, op->srcs[1], i, lanes), v = load_f(c, op->srcs[2], i, lanes);
    LLVMValueRef nm = LLVMBuildFAdd(B, m, LLVMBuildFMul(B, LLVMBuildFSub(B, g, m, ""), V(1 - at->beta_1), ""), "m");
    LLVMValueRef nv = LLVMBuildFAdd(B, v, LLVMBuildFMul(B, LLVMBuildFSub(B, LLVMBuildFMul(B, g, g, ""), v, ""),
                                                        V(1 - at->beta_2), ""), "v");
    store_f(c, op->srcs[1], i, nm, lanes);
    store_f(c, op->srcs[2], i, nv, lanes);
    nm = cg_emit_round_to(e, nm, op->srcs[1]->type.dtype, "");
    nv = cg_emit_round_to(e, nv, op->srcs[2]->type.dtype, "");
    LLVMValueRef den = LLVMBuildFAdd(B, intrinsic1(e, "llvm.sqrt", nv), V(at->epsilon), "");
    nx = LLVMBuildFSub(B, x, LLVMBuildFDiv(B, LLVMBuildFMul(B, nm, cg_splat(e, alpha, lanes), ""), den, ""), "");
    break;
  }
  case UPDATE_MOVING: /* emit_moving_update */
  case UPDATE_NONE: CASTOR_UNREACHABLE(); /* an update op without a formula row */
  }
#undef V
  store_f(c, op->srcs[0], i, nx, lanes);
}

/* CNN: batch normalization's moving statistics, every step (Keras assigns
 * them in the layer's call, outside the optimizer and its loss-scale
 * check): v = v * momentum + x * (1 - momentum), in f32 */
static void moving_elems(cg_kctx *c, LLVMValueRef i, int lanes) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  LLVMTypeRef ty = vec(e, lanes);
  LLVMValueRef v = load_f(c, op->srcs[0], i, lanes), x = load_f(c, op->srcs[1], i, lanes);
  LLVMValueRef nv = LLVMBuildFAdd(B, LLVMBuildFMul(B, v, cg_const(e, ty, op->attr.momentum), ""),
                                  LLVMBuildFMul(B, x, cg_const(e, ty, 1.0 - op->attr.momentum), ""), "moving");
  store_f(c, op->srcs[0], i, nv, lanes);
}

static void emit_moving_update(cg_kctx *c) {
  cg_emitter *e = c->e;
  cg_loop lv = cg_loop_begin(c, c->row0, c->row1, e->vw, "e");
  moving_elems(c, lv.iv, e->vw);
  cg_loop_end(c, &lv);
  cg_loop ls = cg_loop_begin(c, lv.iv, c->row1, 1, "et");
  moving_elems(c, ls.iv, 1);
  cg_loop_end(c, &ls);
}

static void emit_update(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  if (update_rows[op->op].formula == UPDATE_MOVING) {
    emit_moving_update(c);
    return;
  }
  int w = ir_op_writes(op->op);
  LLVMValueRef ok = load_int(c, op->srcs[w + 3], i64c(0));
  LLVMBasicBlockRef join = begin_if(c, LLVMBuildICmp(B, LLVMIntNE, ok, i64c(0), ""), "apply");
  LLVMValueRef lr = load_f(c, op->srcs[w + 1], i64c(0), 1);
  LLVMValueRef inv_scale = LLVMBuildFDiv(B, F(1), load_f(c, op->srcs[w + 2], i64c(0), 1), "inv_scale");
  LLVMValueRef alpha = NULL;
  if (update_rows[op->op].formula == UPDATE_ADAM) { /* k = t + 1; alpha = lr sqrt(1 - b2^k) / (1 - b1^k), powers as exp(k log b) */
    LLVMValueRef k = LLVMBuildSIToFP(B, LLVMBuildAdd(B, load_int(c, op->srcs[7], i64c(0)), i64c(1), ""), e->f32, "k");
    LLVMValueRef p1 = cg_emit_exp(e, LLVMBuildFMul(B, k, F(log(op->attr.beta_1)), ""), "b1k");
    LLVMValueRef p2 = cg_emit_exp(e, LLVMBuildFMul(B, k, F(log(op->attr.beta_2)), ""), "b2k");
    alpha = LLVMBuildFDiv(B, LLVMBuildFMul(B, lr, intrinsic1(e, "llvm.sqrt", LLVMBuildFSub(B, F(1), p2, "")), ""),
                          LLVMBuildFSub(B, F(1), p1, ""), "alpha");
  }
  /* g / s is computed as g * (1/s): exact for the powers of two a dynamic
   * scale takes, and what Keras's divide compiles to is not specified */
  cg_loop lv = cg_loop_begin(c, c->row0, c->row1, e->vw, "e");
  update_elems(c, lv.iv, e->vw, lr, inv_scale, alpha);
  cg_loop_end(c, &lv);
  cg_loop ls = cg_loop_begin(c, lv.iv, c->row1, 1, "et");
  update_elems(c, ls.iv, 1, lr, inv_scale, alpha);
  cg_loop_end(c, &ls);
  end_if(c, join);
}

static void emit_scalar_update(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  if (op->op == IR_OP_COUNT_STEP) {
    LLVMValueRef ok = load_int(c, op->srcs[1], i64c(0)), n = load_int(c, op->srcs[0], i64c(0));
    LLVMValueRef inc = LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntNE, ok, i64c(0), ""), e->i64, "");
    store_int(c, op->srcs[0], LLVMBuildAdd(B, n, inc, ""));
    return;
  }
  /* loss_scale_update(s, n, ok) */
  CASTOR_ASSERT(op->op == IR_OP_LOSS_SCALE_UPDATE);
  const ir_node *s = op->srcs[0], *n = op->srcs[1];
  LLVMValueRef ok = LLVMBuildICmp(B, LLVMIntNE, load_int(c, op->srcs[2], i64c(0)), i64c(0), "ok");
  LLVMValueRef sv = load_f(c, s, i64c(0), 1), nv = load_int(c, n, i64c(0));
  LLVMValueRef grow = LLVMBuildICmp(B, LLVMIntEQ, nv, i64c(op->attr.period - 1), "grow");
  LLVMValueRef half = LLVMBuildFMul(B, sv, F(0.5), "");
  LLVMValueRef floor_ = F(op->attr.min_scale);
  half = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, half, floor_, ""), floor_, half, "");
  LLVMValueRef s_ok = LLVMBuildSelect(B, grow, LLVMBuildFMul(B, sv, F(2), ""), sv, "");
  LLVMValueRef n_ok = LLVMBuildSelect(B, grow, i64c(0), LLVMBuildAdd(B, nv, i64c(1), ""), "");
  store_f(c, s, i64c(0), LLVMBuildSelect(B, ok, s_ok, half, ""), 1);
  store_int(c, n, LLVMBuildSelect(B, ok, n_ok, i64c(0), ""));
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
static void emit_sum_to(cg_kctx *c) {
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

/* ---- the dispatch ---- */

/* ---- general tensors: gather_grad, the ordered scatter-add ---- */

/* The table as [P, V, S] (V its gathered dimension, the kernel's rows), dy
 * as [P, Q, S] with Q the indices' count: each row v is zeroed, then every
 * position q in order whose index is v adds dy's slice; rows are split
 * over threads, positions never, so any thread count gives the same bits. */
static void emit_gather_grad(cg_kctx *c) {
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
  LLVMBasicBlockRef join = begin_if(c, LLVMBuildICmp(B, LLVMIntEQ, load_int(c, b, lq.iv), lv.iv, ""), "hit");
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

/* By kernel class (cg_cpu.c routes here), then by the op's shape rule,
 * which tells the kernels of a class apart (ir_ops.def's columns). */
void cg_train_emit(cg_kctx *c) {
  ir_op o = op_of(c)->op;
  ir_type_rule rule = ir_op_type_rule(o);
  switch (ir_op_kernel(o)) {
  case IR_KERNEL_REDUCE:
    if (rule == IR_TYPE_SUM_ROWS) emit_sum_rows(c);
    else if (rule == IR_TYPE_LOSS) emit_loss(c);
    else if (rule == IR_TYPE_ALL_FINITE) emit_all_finite(c);
    else if (rule == IR_TYPE_GRAD_NORM) emit_grad_norm_sq(c); /* training options */
    else if (rule == IR_TYPE_CLIP_SCALE) emit_clip_scale(c);
    else if (rule == IR_TYPE_CLIP_VALUE) emit_clip_value(c);
    else if (rule == IR_TYPE_GATHER_GRAD) emit_gather_grad(c);
    else if (rule == IR_TYPE_SUM_TO) emit_sum_to(c);
    else CASTOR_UNREACHABLE(); /* matmul_tn: the GEMM (cg_is_gemm) */
    return;
  case IR_KERNEL_UPDATE:
    if (rule == IR_TYPE_UPDATE) emit_update(c);
    else if (rule == IR_TYPE_SCALAR_UPDATE) emit_scalar_update(c);
    else CASTOR_UNREACHABLE();
    return;
  case IR_KERNEL_ROWWISE: /* the row-wise ops with no line formula (cg_rowwise.c) */
    if (rule == IR_TYPE_LOSS_GRAD) emit_loss_grad(c);
    else if (rule == IR_TYPE_SAME) emit_softmax_grad(c); /* softmax_grad(dy, y) */
    else CASTOR_UNREACHABLE();
    return;
  case IR_KERNEL_NONE:
  case IR_KERNEL_CONTRACT:
  case IR_KERNEL_ELTWISE:
  case IR_KERNEL_REINDEX: break;
  }
  CASTOR_UNREACHABLE();
}
