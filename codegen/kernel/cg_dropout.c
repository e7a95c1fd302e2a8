/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_dropout.c: dropout_train's mask and scaling in the kernel kit, for
 * every target: the same integer arithmetic as ir/ir_tensor.c's
 * ir_dropout_key and ir_dropout_hash (the reference's), so the mask is
 * bit-identical between the targets, the reference and any split of the
 * elements over threads.
 *
 * Contract: cg_emit_dropout(c, op, x, idx, lanes) is op's value for the
 * f32 lanes x at flat result indices idx .. idx + lanes - 1 (consecutive:
 * the chain's lanes run along the last dimension), not yet rounded to
 * op's dtype. The step operand (op->srcs[1], i64 []) is read through
 * c->base like any operand.
 */
#include "codegen/kernel/cg_kit.h"

#define B (e->b)

static LLVMValueRef ic(LLVMTypeRef ty, unsigned long long v) {
  if (LLVMGetTypeKind(ty) != LLVMVectorTypeKind) return LLVMConstInt(ty, v, 0);
  unsigned n = LLVMGetVectorSize(ty);
  LLVMValueRef lanes[64];
  CASTOR_ASSERT(n <= 64);
  for (unsigned k = 0; k < n; k++) lanes[k] = LLVMConstInt(LLVMGetElementType(ty), v, 0);
  return LLVMConstVector(lanes, n);
}

static LLVMValueRef splat_int(cg_emitter *e, LLVMValueRef s, LLVMTypeRef elem, int lanes) {
  if (lanes == 1) return s;
  LLVMTypeRef vt = LLVMVectorType(elem, (unsigned)lanes);
  LLVMValueRef v = LLVMBuildInsertElement(B, LLVMGetUndef(vt), s, cg_i64(e, 0), "");
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(e->i32, (unsigned)lanes));
  return LLVMBuildShuffleVector(B, v, LLVMGetUndef(vt), zeros, "");
}

static LLVMValueRef xorshr(cg_emitter *e, LLVMValueRef x, unsigned k) {
  return LLVMBuildXor(B, x, LLVMBuildLShr(B, x, ic(LLVMTypeOf(x), k), ""), "");
}

static LLVMValueRef mix64(cg_emitter *e, LLVMValueRef z) {
  LLVMTypeRef t = LLVMTypeOf(z);
  z = LLVMBuildAdd(B, z, ic(t, 0x9e3779b97f4a7c15ull), "");
  z = LLVMBuildMul(B, xorshr(e, z, 30), ic(t, 0xbf58476d1ce4e5b9ull), "");
  z = LLVMBuildMul(B, xorshr(e, z, 27), ic(t, 0x94d049bb133111ebull), "");
  return xorshr(e, z, 31);
}

static LLVMValueRef mix32(cg_emitter *e, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  x = LLVMBuildMul(B, xorshr(e, x, 16), ic(t, 0x7feb352du), "");
  x = LLVMBuildMul(B, xorshr(e, x, 15), ic(t, 0x846ca68bu), "");
  return xorshr(e, x, 16);
}

LLVMValueRef cg_emit_dropout(cg_kctx *c, const ir_node *op, LLVMValueRef x, LLVMValueRef idx, int lanes) {
  cg_emitter *e = c->e;
  const ir_node *stepn = op->srcs[1];
  LLVMValueRef step = LLVMBuildLoad2(B, e->i64, cg_elem_ptr(c, stepn, cg_i64(e, 0)), stepn->name);
  LLVMValueRef key = mix64(e, LLVMBuildXor(B, cg_i64(e, op->attr.seed), mix64(e, step), ""));
  LLVMValueRef klo = LLVMBuildTrunc(B, key, e->i32, ""), khi = LLVMBuildTrunc(B, LLVMBuildLShr(B, key, cg_i64(e, 32), ""), e->i32, "");
  LLVMValueRef i = splat_int(e, idx, e->i64, lanes);
  if (lanes > 1) {
    LLVMValueRef iota[64];
    for (int k = 0; k < lanes; k++) iota[k] = cg_i64(e, k);
    i = LLVMBuildAdd(B, i, LLVMConstVector(iota, (unsigned)lanes), "");
  }
  LLVMTypeRef t32 = lanes > 1 ? LLVMVectorType(e->i32, (unsigned)lanes) : e->i32;
  LLVMValueRef lo = LLVMBuildTrunc(B, i, t32, ""), hi = LLVMBuildTrunc(B, LLVMBuildLShr(B, i, ic(LLVMTypeOf(i), 32), ""), t32, "");
  LLVMValueRef h = mix32(e, LLVMBuildXor(B, lo, splat_int(e, klo, e->i32, lanes), ""));
  h = mix32(e, LLVMBuildXor(B, LLVMBuildXor(B, h, hi, ""), splat_int(e, khi, e->i32, lanes), ""));
  h = LLVMBuildLShr(B, h, ic(t32, 8), "");
  LLVMValueRef keep = LLVMBuildICmp(B, LLVMIntUGE, h, ic(t32, ir_dropout_threshold(op->attr.rate)), "");
  LLVMTypeRef ft = LLVMTypeOf(x);
  LLVMValueRef scaled = LLVMBuildFDiv(B, x, cg_const(e, ft, (double)(float)(1.0 - op->attr.rate)), "");
  return LLVMBuildSelect(B, keep, scaled, cg_const(e, ft, 0.0), op->name);
}
