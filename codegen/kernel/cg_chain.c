/*
 * cg_chain.c: the per-element formulas of the elementwise ops, applied as
 * one fused chain in registers (the kernel kit's cg_apply_chain).
 *
 * Contract: both targets call this for every elementwise op they emit (the
 * CPU on vectors of f32 lanes, a GPU target on one f32 per thread), so an op's
 * formula and its rounding model (each op's result rounded to its dtype)
 * are written once and agree bit for bit between the targets. A new
 * elementwise op (the op table's IR_KERNEL_ELTWISE) is one row of
 * chain_formulas here.
 */
#include "codegen/kernel/cg_kit.h"

#define B (e->b)

/* ---- the formulas: in[] holds the op's operands as f32 lanes ---- */

static LLVMValueRef f_add(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return LLVMBuildFAdd(B, in[0], in[1], op->name);
}

static LLVMValueRef f_mul(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return LLVMBuildFMul(B, in[0], in[1], op->name);
}

static LLVMValueRef f_unary(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return cg_emit_unary(e, op->op, in[0], op->name);
}

static LLVMValueRef f_cast(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  (void)e, (void)op;
  return in[0]; /* the rounding to op's dtype after every op is the cast */
}

static LLVMValueRef f_relu_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* b > 0 ? a : 0 */
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, in[1], cg_const(e, LLVMTypeOf(in[1]), 0.0), ""), in[0],
                         cg_const(e, LLVMTypeOf(in[0]), 0.0), op->name);
}

static LLVMValueRef f_sigmoid_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* a * b * (1 - b) */
  LLVMValueRef one_minus = LLVMBuildFSub(B, cg_const(e, LLVMTypeOf(in[1]), 1.0), in[1], "");
  return LLVMBuildFMul(B, LLVMBuildFMul(B, in[0], in[1], ""), one_minus, op->name);
}

static LLVMValueRef f_tanh_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* a * (1 - b * b) */
  return LLVMBuildFMul(B, in[0], LLVMBuildFSub(B, cg_const(e, LLVMTypeOf(in[1]), 1.0), LLVMBuildFMul(B, in[1], in[1], ""), ""),
                       op->name);
}

static LLVMValueRef f_gelu_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return cg_emit_gelu_grad(e, in[0], in[1], op->name);
}

static LLVMValueRef f_silu_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  /* a * s * (1 + b (1 - s)), s = sigmoid(b) */
  LLVMTypeRef ty = LLVMTypeOf(in[1]);
  LLVMValueRef sg = cg_emit_unary(e, IR_OP_SIGMOID, in[1], "");
  LLVMValueRef f = LLVMBuildFAdd(B, cg_const(e, ty, 1.0),
                                 LLVMBuildFMul(B, in[1], LLVMBuildFSub(B, cg_const(e, ty, 1.0), sg, ""), ""), "");
  return LLVMBuildFMul(B, LLVMBuildFMul(B, in[0], sg, ""), f, op->name);
}

/* Every elementwise op's formula, by op: a new elementwise op (the op
 * table's IR_KERNEL_ELTWISE) is one row here (check_optable runs every op
 * on every backend, so a missing row fails there by name). */
static LLVMValueRef (*const chain_formulas[IR_OP_COUNT])(cg_emitter *e, const ir_node *op, LLVMValueRef *in) = {
    [IR_OP_ADD] = f_add,
    [IR_OP_MUL] = f_mul,
    [IR_OP_RELU] = f_unary,
    [IR_OP_SIGMOID] = f_unary,
    [IR_OP_TANH] = f_unary,
    [IR_OP_GELU] = f_unary,
    [IR_OP_SILU] = f_unary,
    [IR_OP_CAST] = f_cast,
    [IR_OP_RELU_GRAD] = f_relu_grad,
    [IR_OP_SIGMOID_GRAD] = f_sigmoid_grad,
    [IR_OP_TANH_GRAD] = f_tanh_grad,
    [IR_OP_GELU_GRAD] = f_gelu_grad,
    [IR_OP_SILU_GRAD] = f_silu_grad,
};

LLVMValueRef cg_apply_chain(cg_kctx *c, int first, int last, LLVMValueRef val, LLVMValueRef idx,
                            LLVMValueRef col, int lanes, int valid) {
  cg_emitter *e = c->e;
  const cg_kernel *k = c->k;
  for (int t = first; t < last; t++) {
    const ir_node *op = k->ops[t], *prev = t > 0 ? k->ops[t - 1] : NULL;
    LLVMValueRef in[IR_MAX_SRCS];
    for (int s = 0; s < op->n_srcs; s++) {
      const ir_node *src = op->srcs[s];
      if (src == prev) {
        in[s] = val;
      } else {
        LLVMValueRef p = cg_elem_ptr(c, src, cg_is_bias(src) && !cg_is_bias(op) ? col : idx);
        in[s] = cg_load_part(e, src->type.dtype, p, lanes, valid, src->name);
      }
    }
    CASTOR_ASSERT(chain_formulas[op->op]); /* cg_plan.c chains only elementwise ops */
    val = chain_formulas[op->op](e, op, in);
    /* each op's value has its own dtype; model 16-bit results exactly */
    val = cg_emit_round_to(e, val, op->type.dtype, op->name);
  }
  return val;
}
