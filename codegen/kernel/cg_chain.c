/*
 * cg_chain.c: the per-element formulas of the elementwise ops, applied as
 * one fused chain in registers (the kernel kit's cg_apply_chain).
 *
 * Contract: both targets call this for every elementwise op they emit (the
 * CPU on vectors of f32 lanes, NVPTX on one f32 per thread), so an op's
 * formula and its rounding model (each op's result rounded to its dtype)
 * are written once and agree bit for bit between the targets. A new
 * elementwise op (the op table's IR_KERNEL_ELTWISE) is one case here.
 */
#include "codegen/kernel/cg_kit.h"

#define B (e->b)

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
    switch (op->op) {
    case IR_OP_ADD: val = LLVMBuildFAdd(B, in[0], in[1], op->name); break;
    case IR_OP_MUL: val = LLVMBuildFMul(B, in[0], in[1], op->name); break;
    case IR_OP_RELU:
    case IR_OP_SIGMOID:
    case IR_OP_TANH:
    case IR_OP_GELU:
    case IR_OP_SILU: val = cg_emit_unary(e, op->op, in[0], op->name); break;
    case IR_OP_CAST: val = in[0]; break;
    case IR_OP_RELU_GRAD: /* b > 0 ? a : 0 */
      val = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, in[1], cg_const(e, LLVMTypeOf(in[1]), 0.0), ""), in[0],
                            cg_const(e, LLVMTypeOf(in[0]), 0.0), op->name);
      break;
    case IR_OP_SIGMOID_GRAD: { /* a * b * (1 - b) */
      LLVMValueRef one_minus = LLVMBuildFSub(B, cg_const(e, LLVMTypeOf(in[1]), 1.0), in[1], "");
      val = LLVMBuildFMul(B, LLVMBuildFMul(B, in[0], in[1], ""), one_minus, op->name);
      break;
    }
    case IR_OP_TANH_GRAD: /* a * (1 - b * b) */
      val = LLVMBuildFMul(B, in[0], LLVMBuildFSub(B, cg_const(e, LLVMTypeOf(in[1]), 1.0), LLVMBuildFMul(B, in[1], in[1], ""), ""),
                          op->name);
      break;
    case IR_OP_GELU_GRAD: val = cg_emit_gelu_grad(e, in[0], in[1], op->name); break;
    case IR_OP_SILU_GRAD: { /* a * s * (1 + b (1 - s)), s = sigmoid(b) */
      LLVMTypeRef ty = LLVMTypeOf(in[1]);
      LLVMValueRef sg = cg_emit_unary(e, IR_OP_SIGMOID, in[1], "");
      LLVMValueRef f = LLVMBuildFAdd(B, cg_const(e, ty, 1.0),
                                     LLVMBuildFMul(B, in[1], LLVMBuildFSub(B, cg_const(e, ty, 1.0), sg, ""), ""), "");
      val = LLVMBuildFMul(B, LLVMBuildFMul(B, in[0], sg, ""), f, op->name);
      break;
    }
    case IR_OP_INPUT:
    case IR_OP_CONST:
    case IR_OP_MATMUL:
    case IR_OP_SOFTMAX:
    case IR_OP_LAYER_NORM:
    case IR_OP_LAYER_NORM_GRAD:
    case IR_OP_LAYER_NORM_XHAT:
    case IR_OP_PAD:
    case IR_OP_SLICE:
    CG_CASE_TRAINING_OTHER_OPS
    case IR_OP_COUNT: CASTOR_UNREACHABLE(); /* not elementwise (cg_plan.c never chains them) */
    }
    /* each op's value has its own dtype; model 16-bit results exactly */
    val = cg_emit_round_to(e, val, op->type.dtype, op->name);
  }
  return val;
}
