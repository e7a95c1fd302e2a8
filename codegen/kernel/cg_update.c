/*
 * cg_update.c: the kernel kit's update formulas and what decides an update,
 * for every target (cg_train.h says how a launch's rows map):
 *
 *   all_finite     one scalar: a sum of x * 0 over every element, which is
 *                  NaN exactly when some element is not finite
 *   grad_norm_sq, clip_scale, clip_value   gradient clipping (Keras's
 *                  clipnorm, global_clipnorm, clipvalue)
 *   sgd ... adamw  rows = the variable's elements, in place, when ok
 *                  (Keras's formulas: keras/src/optimizers/)
 *   moving_update  batch normalization's moving statistics
 *   count_step,
 *   loss_scale_update  one scalar, in place: the dynamic loss scale's
 *                  doubling, halving and the skipped step's count
 */
#include <math.h>

#include "codegen/kernel/cg_train.h"

/* ---- all_finite ---- */

void cg_train_all_finite(cg_kctx *c) {
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

/* grad_norm_sq(a, s, g...): a + the sum of (x/s)^2, in f32 lanes then in
 * lane order, the operands in order (one call: deterministic) */
void cg_train_grad_norm_sq(cg_kctx *c) {
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
void cg_train_clip_scale(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  LLVMValueRef s = load_f(c, op->srcs[0], i64c(0), 1), q = load_f(c, op->srcs[1], i64c(0), 1);
  LLVMValueRef norm = max_nan(e, intrinsic1(e, "llvm.sqrt", q), F(op->attr.clipnorm));
  store_f(c, op, i64c(0), LLVMBuildFDiv(B, LLVMBuildFMul(B, s, norm, ""), F(op->attr.clipnorm), "clip_scale"), 1);
}

/* clip_value(g, s): g clamped to [-c s, c s] */
void cg_train_clip_value(cg_kctx *c) {
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

void cg_train_update(cg_kctx *c) {
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

void cg_train_scalar_update(cg_kctx *c) {
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
