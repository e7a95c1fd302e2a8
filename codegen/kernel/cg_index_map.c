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
 * elementwise chain with it anywhere. pad and slice are here today; the
 * layout ops of the next wave (transpose, broadcast, concat, gather and
 * im2col, the A operand of an implicit-GEMM convolution) each add one map
 * beside them, and both targets get it.
 *
 * Coordinates come from signed division by the result's static dims (the
 * same instructions for every target, so a target's code does not
 * change with the form of the map it calls).
 */
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

LLVMValueRef cg_reindex_value(cg_kctx *c, const ir_node *op, LLVMValueRef i) {
  CASTOR_ASSERT(ir_op_kernel(op->op) == IR_KERNEL_REINDEX);
  /* the map is the op's shape rule (the op table's type column) */
  ir_type_rule rule = ir_op_type_rule(op->op);
  CASTOR_ASSERT(rule == IR_TYPE_PAD || rule == IR_TYPE_SLICE);
  return pad_slice_value(c, op, rule == IR_TYPE_PAD, i);
}
