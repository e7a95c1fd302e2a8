/* SPDX-License-Identifier: Apache-2.0 */
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
#include "util/half.h"

#define B (e->b)

/* ---- the formulas: in[] holds the op's operands as lanes (cg_lane_type:
 * f32 for floats, i64 for integers and booleans) ---- */

static bool is_int_lanes(LLVMValueRef v) {
  LLVMTypeRef t = LLVMTypeOf(v);
  if (LLVMGetTypeKind(t) == LLVMVectorTypeKind) t = LLVMGetElementType(t);
  return LLVMGetTypeKind(t) == LLVMIntegerTypeKind;
}

/* integers (IR_OPF_INTEGERS): add, sub and mul wrap, as numpy's */
static LLVMValueRef f_add(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return is_int_lanes(in[0]) ? LLVMBuildAdd(B, in[0], in[1], op->name) : LLVMBuildFAdd(B, in[0], in[1], op->name);
}

static LLVMValueRef f_mul(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return is_int_lanes(in[0]) ? LLVMBuildMul(B, in[0], in[1], op->name) : LLVMBuildFMul(B, in[0], in[1], op->name);
}

static LLVMValueRef f_unary(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return cg_emit_unary_in(e, op->op, in[0], op->type.dtype, op->name);
}

static LLVMTypeRef lanes_like_type(LLVMValueRef v, LLVMTypeRef elem) {
  LLVMTypeRef t = LLVMTypeOf(v);
  return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMVectorType(elem, LLVMGetVectorSize(t)) : elem;
}

static LLVMValueRef splat_const(LLVMValueRef c, unsigned n) {
  LLVMValueRef lanes[64];
  CASTOR_ASSERT(n <= 64);
  for (unsigned i = 0; i < n; i++) lanes[i] = c;
  return LLVMConstVector(lanes, n);
}

/* an i1 vector (or scalar) as i64 lanes of 0 and 1 */
static LLVMValueRef bool_lanes(cg_emitter *e, LLVMValueRef c, const char *name) {
  return LLVMBuildZExt(B, c, lanes_like_type(c, e->i64), name);
}

/* x != 0 of float or integer lanes (a float NaN counts as true) */
static LLVMValueRef nonzero(cg_emitter *e, LLVMValueRef x) {
  return is_int_lanes(x) ? LLVMBuildICmp(B, LLVMIntNE, x, LLVMConstNull(LLVMTypeOf(x)), "")
                         : LLVMBuildFCmp(B, LLVMRealUNE, x, LLVMConstNull(LLVMTypeOf(x)), "");
}

/* Between float dtypes the rounding to op's dtype after every op is the
 * cast. Integers and booleans: to i1 is x != 0 (NaN: true, as numpy); a
 * float to an integer truncates toward zero, saturating at the integer
 * type's range (NaN: 0; ONNX leaves out-of-range undefined, so never
 * poison); an integer to a float rounds to nearest. */
static LLVMValueRef f_cast(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  ir_dtype to = op->type.dtype;
  bool from_int = is_int_lanes(in[0]);
  if (to == DT_I1) return bool_lanes(e, nonzero(e, in[0]), op->name);
  if (dtype_is_float(to)) return from_int ? LLVMBuildSIToFP(B, in[0], lanes_like_type(in[0], e->f32), op->name) : in[0];
  if (from_int) return in[0];
  LLVMTypeRef ft = LLVMTypeOf(in[0]);
  double lo = to == DT_I32 ? -0x1p31 : -0x1p63, hi = to == DT_I32 ? 0x1p31 : 0x1p63;
  LLVMValueRef x = in[0];
  LLVMValueRef nan = LLVMBuildFCmp(B, LLVMRealUNO, x, x, "");
  LLVMValueRef small = LLVMBuildFCmp(B, LLVMRealOLT, x, cg_const(e, ft, lo), "");
  LLVMValueRef big = LLVMBuildFCmp(B, LLVMRealOGE, x, cg_const(e, ft, hi), "");
  LLVMValueRef safe = LLVMBuildSelect(B, LLVMBuildOr(B, LLVMBuildOr(B, nan, small, ""), big, ""), cg_const(e, ft, 0.0), x, "");
  LLVMTypeRef it = lanes_like_type(x, e->i64);
  LLVMValueRef v = LLVMBuildFPToSI(B, safe, it, "");
  v = LLVMBuildSelect(B, small, cg_const(e, it, lo), v, ""); /* -2^31 or -2^63: exact in a double */
  int64_t top = to == DT_I32 ? INT32_MAX : INT64_MAX;
  LLVMValueRef top_c = LLVMConstInt(e->i64, (unsigned long long)top, 1);
  if (LLVMGetTypeKind(it) == LLVMVectorTypeKind) top_c = splat_const(top_c, LLVMGetVectorSize(it));
  return LLVMBuildSelect(B, big, top_c, v, op->name);
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

/* general tensors: the binary ops and the gradient helpers of broadcasting */

static LLVMValueRef f_sub(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return is_int_lanes(in[0]) ? LLVMBuildSub(B, in[0], in[1], op->name) : LLVMBuildFSub(B, in[0], in[1], op->name);
}

static LLVMValueRef f_div(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return LLVMBuildFDiv(B, in[0], in[1], op->name);
}

/* a (cmp) b ? a : b, NaN when either is NaN (a + b is then NaN) */
static LLVMValueRef pick(cg_emitter *e, const ir_node *op, LLVMValueRef *in, LLVMRealPredicate cmp) {
  if (is_int_lanes(in[0])) /* integers: signed */
    return LLVMBuildSelect(B, LLVMBuildICmp(B, cmp == LLVMRealOGE ? LLVMIntSGE : LLVMIntSLE, in[0], in[1], ""), in[0],
                           in[1], op->name);
  LLVMValueRef nan = LLVMBuildFCmp(B, LLVMRealUNO, in[0], in[1], "");
  LLVMValueRef v = LLVMBuildSelect(B, LLVMBuildFCmp(B, cmp, in[0], in[1], ""), in[0], in[1], "");
  return LLVMBuildSelect(B, nan, LLVMBuildFAdd(B, in[0], in[1], ""), v, op->name);
}

static LLVMValueRef f_maximum(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { return pick(e, op, in, LLVMRealOGE); }

static LLVMValueRef f_minimum(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { return pick(e, op, in, LLVMRealOLE); }

static LLVMValueRef f_select_ge(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* b >= c ? a : 0 */
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGE, in[1], in[2], ""), in[0],
                         cg_const(e, LLVMTypeOf(in[0]), 0.0), op->name);
}

static LLVMValueRef f_pow(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return cg_emit_pow(e, in[0], in[1], op->name);
}

static LLVMValueRef f_pow_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* a * c * b^(c - 1) */
  LLVMValueRef p = cg_emit_pow(e, in[1], LLVMBuildFSub(B, in[2], cg_const(e, LLVMTypeOf(in[2]), 1.0), ""), "");
  return LLVMBuildFMul(B, LLVMBuildFMul(B, in[0], in[2], ""), p, op->name);
}

static LLVMValueRef f_pow_grad_exp(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* b > 0 ? a c log b : 0 */
  LLVMTypeRef ty = LLVMTypeOf(in[1]);
  LLVMValueRef pos = LLVMBuildFCmp(B, LLVMRealOGT, in[1], cg_const(e, ty, 0.0), "");
  LLVMValueRef safe = LLVMBuildSelect(B, pos, in[1], cg_const(e, ty, 1.0), "");
  LLVMValueRef g = LLVMBuildFMul(B, LLVMBuildFMul(B, in[0], in[2], ""), cg_emit_log(e, safe, ""), "");
  return LLVMBuildSelect(B, pos, g, cg_const(e, ty, 0.0), op->name);
}

#define K(v) cg_const(e, LLVMTypeOf(in[0]), (v))

static LLVMValueRef f_leaky_relu(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* x >= 0 ? x : alpha x */
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUGE, in[0], K(0.0), ""), in[0],
                         LLVMBuildFMul(B, in[0], K(op->attr.alpha), ""), op->name);
}

static LLVMValueRef f_elu(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* x > 0 ? x : alpha (e^x - 1) */
  LLVMValueRef neg = LLVMBuildFMul(B, K(op->attr.alpha), LLVMBuildFSub(B, cg_emit_exp(e, in[0], ""), K(1.0), ""), "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUGT, in[0], K(0.0), ""), in[0], neg, op->name);
}

static LLVMValueRef f_clip(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* NaN stays NaN */
  LLVMValueRef lo = K(op->attr.min_value), hi = K(op->attr.max_value);
  LLVMValueRef y = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, in[0], lo, ""), lo, in[0], "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, y, hi, ""), hi, y, op->name);
}

static LLVMValueRef f_select(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* a != 0 ? b : c */
  return LLVMBuildSelect(B, nonzero(e, in[0]), in[1], in[2], op->name); /* a float, integer or i1 */
}

static LLVMValueRef f_abs_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  LLVMValueRef pos = LLVMBuildFCmp(B, LLVMRealOGT, in[1], K(0.0), "");
  LLVMValueRef neg = LLVMBuildFCmp(B, LLVMRealOLT, in[1], K(0.0), "");
  return LLVMBuildSelect(B, pos, in[0], LLVMBuildSelect(B, neg, LLVMBuildFNeg(B, in[0], ""), K(0.0), ""), op->name);
}

static LLVMValueRef f_erf_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) { /* a 2/sqrt(pi) e^(-b^2) */
  LLVMValueRef g = cg_emit_exp(e, LLVMBuildFNeg(B, LLVMBuildFMul(B, in[1], in[1], ""), ""), "");
  return LLVMBuildFMul(B, in[0], LLVMBuildFMul(B, g, K(1.1283791670955126), ""), op->name);
}

static LLVMValueRef f_leaky_relu_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGE, in[1], K(0.0), ""), in[0],
                         LLVMBuildFMul(B, in[0], K(op->attr.alpha), ""), op->name);
}

static LLVMValueRef f_elu_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  LLVMValueRef neg = LLVMBuildFMul(B, in[0], LLVMBuildFMul(B, K(op->attr.alpha), cg_emit_exp(e, in[1], ""), ""), "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, in[1], K(0.0), ""), in[0], neg, op->name);
}

static LLVMValueRef f_hard_sigmoid_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  LLVMValueRef inside = LLVMBuildAnd(B, LLVMBuildFCmp(B, LLVMRealOGT, in[1], K(-3.0), ""),
                                     LLVMBuildFCmp(B, LLVMRealOLT, in[1], K(3.0), ""), "");
  return LLVMBuildSelect(B, inside, LLVMBuildFDiv(B, in[0], K(6.0), ""), K(0.0), op->name);
}

static LLVMValueRef f_clip_grad(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  LLVMValueRef out = LLVMBuildOr(B, LLVMBuildFCmp(B, LLVMRealOLT, in[1], K(op->attr.min_value), ""),
                                 LLVMBuildFCmp(B, LLVMRealOGT, in[1], K(op->attr.max_value), ""), "");
  return LLVMBuildSelect(B, out, K(0.0), in[0], op->name);
}

/* CNN: batch normalization, as keras/src/backend/jax/nn.py's
 * batch_normalization: k = rsqrt(var + eps) * gamma; y = x * k + (beta - mean * k) */
static LLVMValueRef f_batch_norm(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  LLVMValueRef k = cg_emit_unary(e, IR_OP_RSQRT, LLVMBuildFAdd(B, in[4], K(op->attr.epsilon), ""), "");
  k = LLVMBuildFMul(B, k, in[1], "");
  LLVMValueRef res = LLVMBuildFSub(B, in[2], LLVMBuildFMul(B, in[3], k, ""), "");
  return LLVMBuildFAdd(B, LLVMBuildFMul(B, in[0], k, ""), res, op->name);
}

#undef K

/* integers and booleans: comparisons (ordered: NaN compares false; signed
 * integers), logic on 0/1 lanes, the NaN test; results i1 as 0/1 lanes */
static LLVMValueRef compare(cg_emitter *e, const ir_node *op, LLVMValueRef *in, LLVMRealPredicate fp, LLVMIntPredicate ip) {
  LLVMValueRef c = is_int_lanes(in[0]) ? LLVMBuildICmp(B, ip, in[0], in[1], "") : LLVMBuildFCmp(B, fp, in[0], in[1], "");
  return bool_lanes(e, c, op->name);
}

static LLVMValueRef f_equal(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return compare(e, op, in, LLVMRealOEQ, LLVMIntEQ);
}

static LLVMValueRef f_less(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return compare(e, op, in, LLVMRealOLT, LLVMIntSLT);
}

static LLVMValueRef f_less_equal(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return compare(e, op, in, LLVMRealOLE, LLVMIntSLE);
}

static LLVMValueRef f_logical_and(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return LLVMBuildAnd(B, in[0], in[1], op->name);
}

static LLVMValueRef f_logical_or(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return LLVMBuildOr(B, in[0], in[1], op->name);
}

static LLVMValueRef f_logical_xor(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return LLVMBuildXor(B, in[0], in[1], op->name);
}

static LLVMValueRef f_logical_not(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return LLVMBuildXor(B, in[0], cg_const(e, LLVMTypeOf(in[0]), 1), op->name);
}

static LLVMValueRef f_is_nan(cg_emitter *e, const ir_node *op, LLVMValueRef *in) {
  return bool_lanes(e, LLVMBuildFCmp(B, LLVMRealUNO, in[0], in[0], ""), op->name);
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
    /* general tensors */
    [IR_OP_SUB] = f_sub,
    [IR_OP_DIV] = f_div,
    [IR_OP_MAXIMUM] = f_maximum,
    [IR_OP_MINIMUM] = f_minimum,
    [IR_OP_SELECT_GE] = f_select_ge,
    [IR_OP_POW] = f_pow,
    [IR_OP_POW_GRAD] = f_pow_grad,
    [IR_OP_POW_GRAD_EXP] = f_pow_grad_exp,
    [IR_OP_EXP] = f_unary,
    [IR_OP_LOG] = f_unary,
    [IR_OP_SQRT] = f_unary,
    [IR_OP_RSQRT] = f_unary,
    [IR_OP_NEG] = f_unary,
    [IR_OP_ABS] = f_unary,
    [IR_OP_ERF] = f_unary,
    [IR_OP_SOFTPLUS] = f_unary,
    [IR_OP_HARD_SIGMOID] = f_unary,
    [IR_OP_LEAKY_RELU] = f_leaky_relu,
    [IR_OP_ELU] = f_elu,
    [IR_OP_CLIP] = f_clip,
    [IR_OP_SELECT] = f_select,
    [IR_OP_ABS_GRAD] = f_abs_grad,
    [IR_OP_ERF_GRAD] = f_erf_grad,
    [IR_OP_LEAKY_RELU_GRAD] = f_leaky_relu_grad,
    [IR_OP_ELU_GRAD] = f_elu_grad,
    [IR_OP_HARD_SIGMOID_GRAD] = f_hard_sigmoid_grad,
    [IR_OP_CLIP_GRAD] = f_clip_grad,
    /* CNN: batch normalization */
    [IR_OP_BATCH_NORM] = f_batch_norm,
    /* general tensors: dropout (dropout_train: cg_apply_chain, it reads the element's index) */
    [IR_OP_DROPOUT] = f_cast,
    /* integers and booleans */
    [IR_OP_EQUAL] = f_equal,
    [IR_OP_LESS] = f_less,
    [IR_OP_LESS_EQUAL] = f_less_equal,
    [IR_OP_LOGICAL_AND] = f_logical_and,
    [IR_OP_LOGICAL_OR] = f_logical_or,
    [IR_OP_LOGICAL_XOR] = f_logical_xor,
    [IR_OP_LOGICAL_NOT] = f_logical_not,
    [IR_OP_IS_NAN] = f_is_nan,
};

/* numpy broadcasting: the flat index in src, an operand broadcast to the
 * shape yt of the chain, of the first element of the result's line (last
 * dimension) that starts at flat index `line`. Coordinates of the result
 * come from dividing by its dimensions (constants; LLVM hoists them out of
 * the loop along the line); a dimension src broadcasts adds nothing. */
static LLVMValueRef broadcast_base(cg_emitter *e, const ir_type *yt, const ir_type *st, LLVMValueRef line) {
  int ry = yt->rank, rs = st->rank;
  LLVMValueRef off = cg_i64(e, 0);
  if (ry < 2 || rs < 2) return off; /* no leading dimension of src to follow */
  int64_t stride = st->dims[rs - 1];
  LLVMValueRef q = LLVMBuildUDiv(B, line, cg_i64(e, yt->dims[ry - 1]), "");
  for (int d = ry - 2, sd = rs - 2; d >= 0 && sd >= 0; d--, sd--) {
    LLVMValueRef coord = d == 0 ? q : LLVMBuildURem(B, q, cg_i64(e, yt->dims[d]), "");
    if (d > 0) q = LLVMBuildUDiv(B, q, cg_i64(e, yt->dims[d]), "");
    if (st->dims[sd] != 1) off = LLVMBuildAdd(B, off, LLVMBuildMul(B, coord, cg_i64(e, stride), ""), "");
    if (sd > 0) stride *= st->dims[sd];
  }
  return off;
}

static bool same_dims(const ir_type *a, const ir_type *b) {
  if (a->rank != b->rank) return false;
  for (int r = 0; r < a->rank; r++)
    if (a->dims[r] != b->dims[r]) return false;
  return true;
}

/* lanes of operand src of op at the result's flat index idx (last-dimension
 * coordinate col): its own elements, or numpy-broadcast ones */
static LLVMValueRef load_operand_(cg_kctx *c, const ir_node *op, const ir_node *src, LLVMValueRef idx, LLVMValueRef col,
                                  int lanes, int valid);

/* A constant operand (a bias) is loaded as invariant: in a GEMM
 * epilogue with one vector a row its load and widening leave the row loop. */
static LLVMValueRef load_operand(cg_kctx *c, const ir_node *op, const ir_node *src, LLVMValueRef idx, LLVMValueRef col,
                                 int lanes, int valid) {
  int b = c->plan ? c->plan->buffer_of[src->id] : -1;
  bool saved = c->e->invariant_loads;
  c->e->invariant_loads = c->e->const_loads_invariant && b >= 0 && c->plan->buffers[b].kind == RT_BUF_CONST;
  LLVMValueRef v = load_operand_(c, op, src, idx, col, lanes, valid);
  c->e->invariant_loads = saved;
  return v;
}

static LLVMValueRef load_operand_(cg_kctx *c, const ir_node *op, const ir_node *src, LLVMValueRef idx, LLVMValueRef col,
                                  int lanes, int valid) {
  cg_emitter *e = c->e;
  const ir_type *yt = &op->type, *st = &src->type;
  if (same_dims(yt, st)) return cg_load_part(e, st->dtype, cg_elem_ptr(c, src, idx), lanes, valid, src->name);
  LLVMValueRef base = broadcast_base(e, yt, st, LLVMBuildSub(B, idx, col, ""));
  if (st->rank >= 1 && yt->rank >= 1 && st->dims[st->rank - 1] == yt->dims[yt->rank - 1] && yt->dims[yt->rank - 1] != 1) {
    LLVMValueRef p = cg_elem_ptr(c, src, LLVMBuildAdd(B, base, col, ""));
    if (c->line_rep <= 0 || lanes == c->line_rep) return cg_load_part(e, st->dtype, p, lanes, valid, src->name);
    /* lines of line_rep lanes (cg_chain_line_rep_ok: base is 0), each the same line of src */
    CASTOR_ASSERT(lanes % c->line_rep == 0 && valid == lanes && lanes <= 64);
    LLVMValueRef line = cg_load_part(e, st->dtype, p, c->line_rep, c->line_rep, src->name);
    LLVMValueRef mask[64];
    for (int i = 0; i < lanes; i++) mask[i] = LLVMConstInt(e->i32, (unsigned long long)(i % c->line_rep), 0);
    return LLVMBuildShuffleVector(B, line, LLVMGetUndef(LLVMTypeOf(line)), LLVMConstVector(mask, (unsigned)lanes), "");
  }
  /* src broadcasts along the line: one element for every lane */
  return cg_splat(e, cg_load_part(e, st->dtype, cg_elem_ptr(c, src, base), 1, 1, src->name), lanes);
}

bool cg_chain_line_rep_ok(const cg_kernel *k, int first, int last) {
  for (int t = first; t < last; t++) {
    const ir_node *op = k->ops[t], *prev = t > 0 ? k->ops[t - 1] : NULL;
    if (op->op == IR_OP_DROPOUT_TRAIN) return false; /* a mask by the element's index */
    const ir_type *yt = &op->type;
    for (int s = 0; s < op->n_srcs; s++) {
      const ir_type *st = &op->srcs[s]->type;
      if (op->srcs[s] == prev || same_dims(yt, st)) continue;
      /* the same line for every row: along the line as y, 1 elsewhere */
      if (st->rank < 1 || st->dims[st->rank - 1] != yt->dims[yt->rank - 1] || yt->dims[yt->rank - 1] == 1) return false;
      for (int d = 0; d < st->rank - 1; d++)
        if (st->dims[d] != 1) return false;
    }
  }
  return true;
}

/* v as an f32 constant (the chain's K) is a value of dt */
static bool exact_in(double v, ir_dtype dt) {
  float f = (float)v;
  if (f != f) return false;
  if (dt == DT_BF16) return half_bf16_to_f32(half_f32_to_bf16(f)) == f;
  if (dt == DT_F16) return half_f16_to_f32(half_f32_to_f16(f)) == f;
  return dt == DT_F32;
}

/* convolutional networks: relu, neg and abs of the previous op's value,
 * which is already rounded to their dtype (cg_apply_chain's contract),
 * give a value of that dtype (the operand, 0, or the operand with another
 * sign; a rounded NaN is the canonical one, whose sign alone changes), so
 * rounding it again is the identity and is left out: a bf16 conv2d's or
 * matmul's relu costs no third rounding in the epilogue. So does a clip
 * whose bounds are values of the dtype (the operand, a NaN included, or a
 * bound): MobileNet's relu6, clip(0, 6), after each bf16 convolution. */
static bool keeps_rounded(const ir_node *op, const ir_node *prev) {
  if (!prev || op->n_srcs != 1 || op->srcs[0] != prev || prev->type.dtype != op->type.dtype) return false;
  if (op->op == IR_OP_CLIP)
    return exact_in(op->attr.min_value, op->type.dtype) && exact_in(op->attr.max_value, op->type.dtype);
  return op->op == IR_OP_RELU || op->op == IR_OP_NEG || op->op == IR_OP_ABS;
}

/* A relu (the op table's IR_OPF_ROUNDING_COMMUTES) of a 16-bit float op's value commutes with the op's rounding,
 * bit for bit: relu(round(u)) = round(relu(u)) for every f32 u, with
 * relu(x) = x > 0 (unordered) ? x : +0 and round the RNE rounding to bf16
 * or f16 (monotonic, symmetric, NaN to a NaN of u's sign). u > 0: round(u)
 * >= +0, and where it is +0 both give +0; u <= 0 (-0 and a u that rounds
 * to -0 included): both +0; u NaN: both round(u). So the chain takes the
 * relu on the op's unrounded value and rounds once after it: the rounding
 * is not widened back to f32 for relu's compare (a bf16 conv2d's or
 * matmul's bias + relu epilogue: the rounded sum goes straight to its
 * store). clip is left out: clip(-tiny, 0, 6) is +0, clip(round(-tiny))
 * -0. */
static bool relu_takes_rounding(const ir_node *op, const ir_node *next) {
  if (!next || !(ir_op_flags(next->op) & IR_OPF_ROUNDING_COMMUTES) || !keeps_rounded(next, op)) return false;
  return op->type.dtype == DT_BF16 || op->type.dtype == DT_F16;
}

LLVMValueRef cg_apply_chain(cg_kctx *c, int first, int last, LLVMValueRef val, LLVMValueRef idx,
                            LLVMValueRef col, int lanes, int valid) {
  cg_emitter *e = c->e;
  const cg_kernel *k = c->k;
  bool deferred = false; /* prev's rounding waits for its relu (relu_takes_rounding) */
  for (int t = first; t < last; t++) {
    const ir_node *op = k->ops[t], *prev = t > 0 ? k->ops[t - 1] : NULL;
    LLVMValueRef in[IR_MAX_SRCS];
    int n_in = op->op == IR_OP_DROPOUT_TRAIN ? 1 : op->n_srcs; /* its step is read by cg_emit_dropout */
    for (int s = 0; s < n_in; s++) {
      const ir_node *src = op->srcs[s];
      if (src == prev) {
        in[s] = val;
      } else {
        in[s] = load_operand(c, op, src, idx, col, lanes, valid);
      }
    }
    if (op->op == IR_OP_DROPOUT_TRAIN) { /* general tensors: a mask by the element's index */
      val = cg_emit_dropout(c, op, in[0], idx, lanes);
    } else {
      CASTOR_ASSERT(chain_formulas[op->op]); /* cg_plan.c chains only elementwise ops */
      val = chain_formulas[op->op](e, op, in);
    }
    /* each op's value has its own dtype; model 16-bit results exactly */
    if (t + 1 < last && relu_takes_rounding(op, k->ops[t + 1])) {
      deferred = true;
    } else if (deferred || !keeps_rounded(op, prev)) {
      val = cg_emit_round_to(e, val, op->type.dtype, op->name);
      deferred = false;
    }
  }
  return val;
}
