/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_math.c: math in LLVM IR on f32 scalars or f32 vectors, with no calls:
 * exp (Cephes-style range reduction and polynomial), sigmoid, tanh, exact
 * gelu (through erfc with relative error below 2e-7), dtype rounding, and
 * loads/stores that widen f16/bf16 to f32 lanes in registers.
 *
 * Every function works for `float` and `<n x float>` alike, so kernels pick
 * the vector width and the tails reuse the same code with one lane.
 */
#include <string.h>

#include "codegen/kernel/cg_kit.h"

static LLVMTypeRef lanes_like(cg_emitter *e, LLVMTypeRef ty, LLVMTypeRef elem) {
  if (LLVMGetTypeKind(ty) == LLVMVectorTypeKind) return LLVMVectorType(elem, LLVMGetVectorSize(ty));
  (void)e;
  return elem;
}

LLVMValueRef cg_const(cg_emitter *e, LLVMTypeRef ty, double v) {
  (void)e;
  if (LLVMGetTypeKind(ty) != LLVMVectorTypeKind) {
    return LLVMGetTypeKind(ty) == LLVMIntegerTypeKind ? LLVMConstInt(ty, (unsigned long long)(long long)v, 1)
                                                      : LLVMConstReal(ty, v);
  }
  unsigned n = LLVMGetVectorSize(ty);
  LLVMValueRef s = cg_const(e, LLVMGetElementType(ty), v), lanes[64];
  CASTOR_ASSERT(n <= 64);
  for (unsigned i = 0; i < n; i++) lanes[i] = s;
  return LLVMConstVector(lanes, n);
}

#define B (e->b)
#define C(v) cg_const(e, ty, (v))

static LLVMValueRef sel_lt(cg_emitter *e, LLVMValueRef a, LLVMValueRef b, LLVMValueRef t,
                           LLVMValueRef f, const char *name) {
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, a, b, ""), t, f, name);
}

/* exp(x): n = round(x * log2 e), r = x - n ln 2 (two-part), exp(r) by a
 * degree-6 polynomial, times 2^n built in the exponent bits. Below
 * ln(FLT_MIN) the result is 0, above ln(FLT_MAX) it is +inf, NaN stays NaN. */
LLVMValueRef cg_emit_exp(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x), ity = lanes_like(e, ty, e->i32);
  LLVMValueRef xc = sel_lt(e, x, C(-87.0), C(-87.0), x, "");
  xc = sel_lt(e, C(88.0), xc, C(88.0), xc, "");
  LLVMValueRef t = LLVMBuildFAdd(B, LLVMBuildFMul(B, xc, C(1.44269504088896341), ""), C(0.5), "");
  LLVMValueRef n = LLVMBuildSIToFP(B, LLVMBuildFPToSI(B, t, ity, ""), ty, "");
  n = sel_lt(e, t, n, LLVMBuildFSub(B, n, C(1.0), ""), n, ""); /* floor for negatives */
  LLVMValueRef r = LLVMBuildFSub(B, xc, LLVMBuildFMul(B, n, C(0.693359375), ""), "");
  r = LLVMBuildFSub(B, r, LLVMBuildFMul(B, n, C(-2.12194440e-4), ""), "");
  static const double p[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                             4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  LLVMValueRef y = C(p[0]);
  for (int i = 1; i < 6; i++) y = LLVMBuildFAdd(B, LLVMBuildFMul(B, y, r, ""), C(p[i]), "");
  y = LLVMBuildFMul(B, LLVMBuildFMul(B, y, r, ""), r, "");
  y = LLVMBuildFAdd(B, LLVMBuildFAdd(B, y, r, ""), C(1.0), "");
  LLVMValueRef ni = LLVMBuildFPToSI(B, n, ity, "");
  LLVMValueRef bits = LLVMBuildShl(B, LLVMBuildAdd(B, ni, cg_const(e, ity, 127), ""), cg_const(e, ity, 23), "");
  y = LLVMBuildFMul(B, y, LLVMBuildBitCast(B, bits, ty, ""), "");
  y = sel_lt(e, x, C(-87.33654475), C(0.0), y, "");
  y = sel_lt(e, C(88.72283905), x, C(__builtin_inf()), y, "");
  LLVMValueRef isnan = LLVMBuildFCmp(B, LLVMRealUNO, x, x, "");
  return LLVMBuildSelect(B, isnan, x, y, name);
}

static LLVMValueRef fabs_(cg_emitter *e, LLVMValueRef x) {
  LLVMTypeRef ty = LLVMTypeOf(x), ity = lanes_like(e, ty, e->i32);
  LLVMValueRef bits = LLVMBuildAnd(B, LLVMBuildBitCast(B, x, ity, ""), cg_const(e, ity, 0x7fffffff), "");
  return LLVMBuildBitCast(B, bits, ty, "");
}

/* copysign(mag, sgn) for non-negative mag */
static LLVMValueRef copysign_(cg_emitter *e, LLVMValueRef mag, LLVMValueRef sgn) {
  LLVMTypeRef ty = LLVMTypeOf(mag), ity = lanes_like(e, ty, e->i32);
  LLVMValueRef s = LLVMBuildAnd(B, LLVMBuildBitCast(B, sgn, ity, ""),
                                cg_const(e, ity, (double)(int32_t)0x80000000), "");
  return LLVMBuildBitCast(B, LLVMBuildOr(B, LLVMBuildBitCast(B, mag, ity, ""), s, ""), ty, "");
}

static LLVMValueRef poly(cg_emitter *e, LLVMValueRef x, const double *c, int n) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef y = C(c[0]);
  for (int i = 1; i < n; i++) y = LLVMBuildFAdd(B, LLVMBuildFMul(B, y, x, ""), C(c[i]), "");
  return y;
}

/* tanh: odd polynomial below |x| = 0.625 (Cephes tanhf), else
 * 1 - 2 / (exp(2|x|) + 1) with the sign of x. */
static LLVMValueRef emit_tanh(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef ax = fabs_(e, x);
  LLVMValueRef big = LLVMBuildFAdd(B, cg_emit_exp(e, LLVMBuildFMul(B, ax, C(2.0), ""), ""), C(1.0), "");
  big = LLVMBuildFSub(B, C(1.0), LLVMBuildFDiv(B, C(2.0), big, ""), "");
  big = copysign_(e, big, x);
  static const double c[] = {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                             1.33314422036E-1, -3.33332819422E-1};
  LLVMValueRef z = LLVMBuildFMul(B, x, x, "");
  LLVMValueRef small = LLVMBuildFAdd(B, LLVMBuildFMul(B, LLVMBuildFMul(B, poly(e, z, c, 5), z, ""), x, ""), x, "");
  LLVMValueRef y = sel_lt(e, ax, C(0.625), small, big, "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, y, name);
}

/* gelu(x) = x/2 (1 + erf(x/sqrt2)); erfc(z) for z >= 0 by the Chebyshev fit
 * of Numerical Recipes (erfcc, fractional error < 1.2e-7 everywhere), so the
 * negative tail keeps its relative accuracy. */
static LLVMValueRef two_phi(cg_emitter *e, LLVMValueRef x) { /* 2 Phi(x) = 1 + erf(x/sqrt2) */
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef z = LLVMBuildFMul(B, fabs_(e, x), C(0.70710678118654752), "");
  LLVMValueRef t = LLVMBuildFDiv(B, C(1.0), LLVMBuildFAdd(B, C(1.0), LLVMBuildFMul(B, C(0.5), z, ""), ""), "");
  static const double c[] = {0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
                             -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223};
  LLVMValueRef arg = LLVMBuildFSub(B, poly(e, t, c, 10), LLVMBuildFMul(B, z, z, ""), "");
  LLVMValueRef erfc = LLVMBuildFMul(B, t, cg_emit_exp(e, arg, ""), "");
  LLVMValueRef pos = LLVMBuildFSub(B, C(2.0), erfc, "");
  return sel_lt(e, x, C(0.0), erfc, pos, "");
}

static LLVMValueRef emit_gelu(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  return LLVMBuildFMul(B, LLVMBuildFMul(B, x, C(0.5), ""), two_phi(e, x), name);
}

LLVMValueRef cg_emit_gelu_grad(cg_emitter *e, LLVMValueRef dy, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  /* Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi) */
  LLVMValueRef pdf = LLVMBuildFMul(B, cg_emit_exp(e, LLVMBuildFMul(B, LLVMBuildFMul(B, x, x, ""), C(-0.5), ""), ""),
                                   C(0.39894228040143268), "");
  LLVMValueRef d = LLVMBuildFAdd(B, LLVMBuildFMul(B, two_phi(e, x), C(0.5), ""), LLVMBuildFMul(B, x, pdf, ""), "");
  return LLVMBuildFMul(B, dy, d, name);
}

static LLVMValueRef emit_relu(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  /* x > 0 (unordered) ? x : +0: keeps NaN, and relu(-0) = +0 as in NumPy/JAX */
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUGT, x, C(0.0), ""), x, C(0.0), name);
}

static LLVMValueRef emit_sigmoid(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef ex = cg_emit_exp(e, LLVMBuildFNeg(B, x, ""), "");
  return LLVMBuildFDiv(B, C(1.0), LLVMBuildFAdd(B, C(1.0), ex, ""), name);
}

/* ---- the recurrent scans' gate activations (cg_rnn.c) ----
 * An LSTM step computes 5 of these per unit; at batch 64 emit_sigmoid's
 * and emit_tanh's were a third of the scan's CPU time. The sigmoid is
 * emit_sigmoid's formula (Cephes exp, the division) with the polynomial's
 * steps fused (llvm.fmuladd), n = x log2 e rounded by adding 1.5 * 2^23,
 * and one clamp of the argument into exp's normal range instead of exp's
 * under/overflow selects (1/(1 + e) is then 1, or 2^-126 where the true
 * value is below f32's normal range, as the old formula's 0 past -88.7
 * is). The tanh is Eigen's rational fit (generic_fast_tanh_float: one
 * division, no exp), x itself below 4e-4 and +-1 past 9. Both within 4
 * ulps of float64 (check_rnn_gates: 2.0 and 2.4 at worst), not
 * emit_sigmoid's and emit_tanh's bits; NaN stays NaN, tanh(-0) = -0. */

/* exp(x) for x in [-87.3365, 87.3365] = ln 2^[-126, 126] (a normal float) */
static LLVMValueRef exp_in_range(cg_emitter *e, LLVMValueRef x) {
  LLVMTypeRef ty = LLVMTypeOf(x), ity = lanes_like(e, ty, e->i32);
  /* n = x log2 e rounded to the nearest (even): adding and taking away 1.5 * 2^23 (|x log2 e| < 2^22),
   * plain arithmetic on every target (llvm.roundeven is a libm call on x86-64 without SSE4.1) */
  LLVMValueRef n = LLVMBuildFAdd(B, LLVMBuildFMul(B, x, C(1.44269504088896341), ""), C(12582912.0), "");
  n = LLVMBuildFSub(B, n, C(12582912.0), "");
  LLVMValueRef r = cg_fmuladd(e, n, C(-0.693359375), x);
  r = cg_fmuladd(e, n, C(2.12194440e-4), r);
  static const double p[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                             4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  LLVMValueRef y = C(p[0]);
  for (int i = 1; i < 6; i++) y = cg_fmuladd(e, y, r, C(p[i]));
  y = LLVMBuildFAdd(B, cg_fmuladd(e, y, LLVMBuildFMul(B, r, r, ""), r), C(1.0), "");
  LLVMValueRef ni = LLVMBuildFPToSI(B, n, ity, "");
  LLVMValueRef bits = LLVMBuildShl(B, LLVMBuildAdd(B, ni, cg_const(e, ity, 127), ""), cg_const(e, ity, 23), "");
  return LLVMBuildFMul(B, y, LLVMBuildBitCast(B, bits, ty, ""), "");
}

static LLVMValueRef clamp_(cg_emitter *e, LLVMValueRef x, double lo, double hi) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  x = sel_lt(e, x, C(lo), C(lo), x, "");
  return sel_lt(e, C(hi), x, C(hi), x, "");
}

LLVMValueRef cg_emit_gate_sigmoid(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef ex = exp_in_range(e, clamp_(e, LLVMBuildFNeg(B, x, ""), -87.33654475, 87.33654475));
  LLVMValueRef y = LLVMBuildFDiv(B, C(1.0), LLVMBuildFAdd(B, C(1.0), ex, ""), "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, y, name);
}

LLVMValueRef cg_emit_gate_tanh(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  /* Eigen's rational fit (generic_fast_tanh_float): odd p(x) of degree 13 over even q(x) of degree 6 on
   * [-7.905, 7.905]; +-1 past 9 (tanh's f32 value there) */
  LLVMValueRef xc = clamp_(e, x, -7.90531110763549805, 7.90531110763549805);
  LLVMValueRef x2 = LLVMBuildFMul(B, xc, xc, "");
  static const double a[] = {-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
                             1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03};
  static const double b[] = {1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03};
  LLVMValueRef p = C(a[0]), q = C(b[0]);
  for (int i = 1; i < 7; i++) p = cg_fmuladd(e, p, x2, C(a[i]));
  for (int i = 1; i < 4; i++) q = cg_fmuladd(e, q, x2, C(b[i]));
  LLVMValueRef y = LLVMBuildFDiv(B, LLVMBuildFMul(B, p, xc, ""), q, "");
  LLVMValueRef ax = fabs_(e, x);
  y = sel_lt(e, C(9.0), ax, copysign_(e, C(1.0), x), sel_lt(e, ax, C(0.0004), x, y, ""), "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, y, name);
}

static LLVMValueRef emit_silu(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  /* x * sigmoid(x), as Keras computes it */
  LLVMValueRef ex = cg_emit_exp(e, LLVMBuildFNeg(B, x, ""), "");
  return LLVMBuildFMul(B, x, LLVMBuildFDiv(B, C(1.0), LLVMBuildFAdd(B, C(1.0), ex, ""), ""), name);
}

/* ---- general tensors: unary element-wise formulas ---- */

static LLVMValueRef sqrt_(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  unsigned id = LLVMLookupIntrinsicID("llvm.sqrt", 9);
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(e->mod, id, &ty, 1);
  return LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, &x, 1, name);
}

LLVMValueRef cg_emit_log(cg_emitter *e, LLVMValueRef x, const char *name);

static LLVMValueRef emit_exp(cg_emitter *e, LLVMValueRef x, const char *name) { return cg_emit_exp(e, x, name); }
static LLVMValueRef emit_log(cg_emitter *e, LLVMValueRef x, const char *name) { return cg_emit_log(e, x, name); }
static LLVMValueRef emit_sqrt(cg_emitter *e, LLVMValueRef x, const char *name) { return sqrt_(e, x, name); }

static LLVMValueRef emit_rsqrt(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  return LLVMBuildFDiv(B, C(1.0), sqrt_(e, x, ""), name);
}

static LLVMValueRef emit_neg(cg_emitter *e, LLVMValueRef x, const char *name) { return LLVMBuildFNeg(B, x, name); }

static LLVMValueRef emit_abs(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMValueRef y = fabs_(e, x);
  LLVMSetValueName2(y, name, strlen(name));
  return y;
}

/* erf(x): below |x| = 0.5 its Taylor series to x^17 (truncation below
 * 1e-9 relative), else sign(x) (1 - erfc|x|) with gelu's erfc fit (error < 1.2e-7) */
static LLVMValueRef emit_erf(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef ax = fabs_(e, x), z2 = LLVMBuildFMul(B, x, x, "");
  /* 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1)), n = 0..8, Horner in x^2 */
  double c[9];
  double fact = 1;
  for (int n = 0; n < 9; n++) {
    if (n) fact *= n;
    c[8 - n] = (n % 2 ? -1.0 : 1.0) / (fact * (2 * n + 1)) * 1.1283791670955126;
  }
  LLVMValueRef small = LLVMBuildFMul(B, x, poly(e, z2, c, 9), "");
  LLVMValueRef t = LLVMBuildFDiv(B, C(1.0), LLVMBuildFAdd(B, C(1.0), LLVMBuildFMul(B, C(0.5), ax, ""), ""), "");
  static const double p[] = {0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
                             -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223};
  LLVMValueRef erfc = LLVMBuildFMul(B, t, cg_emit_exp(e, LLVMBuildFSub(B, poly(e, t, p, 10), z2, ""), ""), "");
  LLVMValueRef big = copysign_(e, LLVMBuildFSub(B, C(1.0), erfc, ""), x);
  LLVMValueRef y = sel_lt(e, ax, C(0.5), small, big, "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, y, name);
}

/* log1p(t) for t >= 0 (Goldberg): u = 1 + t; t where u == 1, else
 * log(u) * t / (u - 1), exact to a few ulp */
static LLVMValueRef log1p_(cg_emitter *e, LLVMValueRef t) {
  LLVMTypeRef ty = LLVMTypeOf(t);
  LLVMValueRef u = LLVMBuildFAdd(B, C(1.0), t, "");
  LLVMValueRef um1 = LLVMBuildFSub(B, u, C(1.0), "");
  LLVMValueRef one = LLVMBuildFCmp(B, LLVMRealOEQ, um1, C(0.0), "");
  LLVMValueRef safe = LLVMBuildSelect(B, one, C(1.0), um1, "");
  LLVMValueRef r = LLVMBuildFDiv(B, LLVMBuildFMul(B, cg_emit_log(e, u, ""), t, ""), safe, "");
  return LLVMBuildSelect(B, one, t, r, "");
}

static LLVMValueRef emit_softplus(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef pos = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, x, C(0.0), ""), x, C(0.0), "");
  LLVMValueRef y = LLVMBuildFAdd(B, pos, log1p_(e, cg_emit_exp(e, LLVMBuildFNeg(B, fabs_(e, x), ""), "")), "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, y, name);
}

static LLVMValueRef emit_hard_sigmoid(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef y = LLVMBuildFAdd(B, LLVMBuildFDiv(B, x, C(6.0), ""), C(0.5), "");
  y = sel_lt(e, y, C(0.0), C(0.0), y, "");
  y = sel_lt(e, C(1.0), y, C(1.0), y, "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, y, name);
}

/* The unary elementwise ops' formulas, by op (a new activation is a row
 * here); NULL: not a unary formula. */
static LLVMValueRef (*const unary_formulas[IR_OP_COUNT])(cg_emitter *e, LLVMValueRef x, const char *name) = {
    [IR_OP_RELU] = emit_relu, [IR_OP_SIGMOID] = emit_sigmoid, [IR_OP_SILU] = emit_silu,
    [IR_OP_TANH] = emit_tanh, [IR_OP_GELU] = emit_gelu,
    /* general tensors */
    [IR_OP_EXP] = emit_exp, [IR_OP_LOG] = emit_log, [IR_OP_SQRT] = emit_sqrt, [IR_OP_RSQRT] = emit_rsqrt,
    [IR_OP_NEG] = emit_neg, [IR_OP_ABS] = emit_abs, [IR_OP_ERF] = emit_erf, [IR_OP_SOFTPLUS] = emit_softplus,
    [IR_OP_HARD_SIGMOID] = emit_hard_sigmoid,
};

bool cg_has_unary_formula(ir_op op) { return op >= 0 && op < IR_OP_COUNT && unary_formulas[op]; }

LLVMValueRef cg_emit_unary(cg_emitter *e, ir_op op, LLVMValueRef x, const char *name) {
  CASTOR_ASSERT(cg_has_unary_formula(op));
  return unary_formulas[op](e, x, name);
}

/* A 16-bit sigmoid, silu or hard_sigmoid as XLA computes it on 16-bit
 * values (Keras on JAX: each HLO op of the activation's decomposition is
 * computed in f32 and rounded to the dtype):
 *   sigmoid(x)      = r(1 / r(1 + r(exp(-x))))          (lax.logistic)
 *   silu(x)         = x * sigmoid(x), the product rounded where the op ends
 *   hard_sigmoid(x) = relu6(r(x + 3)) / 6               (jax.nn.hard_sigmoid)
 * with r() rounding to dt. Rounded once instead, Keras's mixed_bfloat16
 * EfficientNet and MobileNetV3 differed from castor in every activation by
 * a bf16 ulp or two, compounding to 2e-2 to 3e-2 of the logits (issue 37;
 * tests/real/keras_apps.py). Other ops and f32 have one formula. */
static LLVMValueRef sigmoid16(cg_emitter *e, LLVMValueRef x, ir_dtype dt, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef ex = cg_emit_round_to(e, cg_emit_exp(e, LLVMBuildFNeg(B, x, ""), ""), dt, "");
  LLVMValueRef d = cg_emit_round_to(e, LLVMBuildFAdd(B, C(1.0), ex, ""), dt, "");
  return LLVMBuildFDiv(B, C(1.0), d, name);
}

static LLVMValueRef silu16(cg_emitter *e, LLVMValueRef x, ir_dtype dt, const char *name) {
  return LLVMBuildFMul(B, x, cg_emit_round_to(e, sigmoid16(e, x, dt, ""), dt, ""), name);
}

static LLVMValueRef hard_sigmoid16(cg_emitter *e, LLVMValueRef x, ir_dtype dt, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef y = cg_emit_round_to(e, LLVMBuildFAdd(B, x, C(3.0), ""), dt, "");
  y = sel_lt(e, y, C(0.0), C(0.0), y, "");
  y = sel_lt(e, C(6.0), y, C(6.0), y, "");
  y = LLVMBuildFDiv(B, y, C(6.0), "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, y, name);
}

/* The unary formulas whose 16-bit form rounds inside (a row per op). */
static LLVMValueRef (*const unary16_formulas[IR_OP_COUNT])(cg_emitter *e, LLVMValueRef x, ir_dtype dt,
                                                             const char *name) = {
    [IR_OP_SIGMOID] = sigmoid16, [IR_OP_SILU] = silu16, [IR_OP_HARD_SIGMOID] = hard_sigmoid16,
};

LLVMValueRef cg_emit_unary_in(cg_emitter *e, ir_op op, LLVMValueRef x, ir_dtype dt, const char *name) {
  if ((dt == DT_BF16 || dt == DT_F16) && op >= 0 && op < IR_OP_COUNT && unary16_formulas[op])
    return unary16_formulas[op](e, x, dt, name);
  return cg_emit_unary(e, op, x, name);
}

LLVMTypeRef cg_llvm_dtype(cg_emitter *e, ir_dtype dt) {
  switch (dt) {
  case DT_F32: return e->f32;
  case DT_F16: return e->half;
  case DT_BF16: return LLVMInt16TypeInContext(e->ctx); /* bits, converted by hand */
  case DT_I32: return e->i32;
  case DT_I64: return e->i64;
  case DT_I1: return LLVMInt8TypeInContext(e->ctx);
  case DT_COUNT: break;
  }
  CASTOR_UNREACHABLE();
  return NULL;
}

static LLVMTypeRef lanes_of(LLVMTypeRef elem, int lanes) {
  return lanes == 1 ? elem : LLVMVectorType(elem, (unsigned)lanes);
}

LLVMValueRef cg_emit_load(cg_emitter *e, ir_dtype dt, LLVMValueRef ptr, int lanes, const char *name) {
  LLVMTypeRef st = lanes_of(cg_llvm_dtype(e, dt), lanes), ft = lanes_of(e->f32, lanes);
  LLVMValueRef v = LLVMBuildLoad2(B, st, ptr, "");
  LLVMSetAlignment(v, (unsigned)dtype_size(dt));
  if (e->invariant_loads)
    LLVMSetMetadata(v, LLVMGetMDKindIDInContext(e->ctx, "invariant.load", 14),
                    LLVMMetadataAsValue(e->ctx, LLVMMDNodeInContext2(e->ctx, NULL, 0)));
  switch (dt) {
  case DT_F32:
    LLVMSetValueName2(v, name, strlen(name));
    return v;
  case DT_F16:
    return LLVMBuildFPExt(B, v, ft, name);
  case DT_BF16: {
    LLVMTypeRef it = lanes_of(e->i32, lanes);
    LLVMValueRef w = LLVMBuildShl(B, LLVMBuildZExt(B, v, it, ""), cg_const(e, it, 16), "");
    return LLVMBuildBitCast(B, w, ft, name);
  }
  /* integers and booleans: i64 lanes (an i1 byte other than 0 is true) */
  case DT_I32: return LLVMBuildSExt(B, v, lanes_of(e->i64, lanes), name);
  case DT_I64:
    LLVMSetValueName2(v, name, strlen(name));
    return v;
  case DT_I1: {
    LLVMValueRef nz = LLVMBuildICmp(B, LLVMIntNE, v, LLVMConstNull(st), "");
    return LLVMBuildZExt(B, nz, lanes_of(e->i64, lanes), name);
  }
  case DT_COUNT:
    break;
  }
  CASTOR_UNREACHABLE();
  return NULL;
}

LLVMTypeRef cg_lane_type(cg_emitter *e, ir_dtype dt) { return dtype_is_float(dt) ? e->f32 : e->i64; }

LLVMValueRef cg_lane_const(cg_emitter *e, ir_dtype dt, int lanes, double v) {
  return cg_const(e, lanes_of(cg_lane_type(e, dt), lanes), v);
}

/* f32 lanes -> f32 lanes rounded to bf16 (as i32 bits, the low 16 zero),
 * round to nearest even, NaN canonical (bit-exact with ml_dtypes and
 * util/half.c); done with integer ops, so no __truncsfbf2 call. The
 * rounded value is formed in place (the carry of u + 0x7fff + lsb, then
 * the low half cleared), not shifted down and back up: a bf16 epilogue
 * rounds each op's value, and two vector ops of about ten per rounding
 * were that shift pair. */
static LLVMValueRef bf16_round_bits(cg_emitter *e, LLVMValueRef v, int lanes) {
  LLVMTypeRef it = lanes_of(e->i32, lanes);
  LLVMValueRef u = LLVMBuildBitCast(B, v, it, "");
  LLVMValueRef lsb = LLVMBuildAnd(B, LLVMBuildLShr(B, u, cg_const(e, it, 16), ""), cg_const(e, it, 1), "");
  LLVMValueRef r = LLVMBuildAdd(B, u, LLVMBuildAdd(B, lsb, cg_const(e, it, 0x7fff), ""), "");
  r = LLVMBuildAnd(B, r, cg_const(e, it, (double)0xffff0000u), "");
  /* NaN: the canonical quiet NaN with x's sign, as ml_dtypes produces */
  LLVMValueRef q = LLVMBuildOr(B, LLVMBuildAnd(B, u, cg_const(e, it, (double)0x80000000u), ""),
                               cg_const(e, it, (double)0x7fc00000u), "");
  LLVMValueRef isnan = LLVMBuildFCmp(B, LLVMRealUNO, v, v, "");
  return LLVMBuildSelect(B, isnan, q, r, "");
}

/* f32 lanes -> bf16 bits, with integer ops */
static LLVMValueRef soft_bf16_bits(cg_emitter *e, LLVMValueRef v, int lanes) {
  LLVMTypeRef it = lanes_of(e->i32, lanes), ht = lanes_of(LLVMInt16TypeInContext(e->ctx), lanes);
  return LLVMBuildTrunc(B, LLVMBuildLShr(B, bf16_round_bits(e, v, lanes), cg_const(e, it, 16), ""), ht, "");
}

/* br cond, rare, usual: cond is rare (branch weights 1 : 2^20), so the
 * rare block goes out of line. */
static void rare_branch(cg_emitter *e, LLVMValueRef cond, LLVMBasicBlockRef rare, LLVMBasicBlockRef usual) {
  LLVMValueRef br = LLVMBuildCondBr(B, cond, rare, usual);
  LLVMMetadataRef md[] = {LLVMMDStringInContext2(e->ctx, "branch_weights", 14),
                          LLVMValueAsMetadata(LLVMConstInt(e->i32, 1, 0)),
                          LLVMValueAsMetadata(LLVMConstInt(e->i32, 1u << 20, 0))};
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(e->ctx, "prof", 4),
                  LLVMMetadataAsValue(e->ctx, LLVMMDNodeInContext2(e->ctx, md, 3)));
}

/* f32 lanes -> bf16 bits on the target's instruction (e->bf16_native), or
 * NULL where it has none for `lanes`. The instruction's bits are castor's
 * for every lane that is neither NaN nor subnormal; a vector with such a
 * lane (rare: a NaN, or a value below 2^-126) branches to the integer
 * rounding, so every bit is soft_bf16_bits's. The branch splits the block
 * being emitted: the kit's loops and phis take their incoming block from
 * the builder at the back edge (cg_loop_end), never from before a value.
 * On Sapphire Rapids (llc -mcpu=sapphirerapids) a 16-lane rounding that
 * goes on in f32 is vcvtneps2bf16, vfpclassps, kortestw + jne, then
 * vpmovzxwd + vpslld to widen it back (6 vector ops), against the integer
 * rounding's 8; a rounding that is stored needs no widening (4 against
 * 11 with the integer rounding's shift and vpmovdw). */
static LLVMValueRef native_bf16_bits(cg_emitter *e, LLVMValueRef v, int lanes) {
  LLVMValueRef odd = NULL;
  LLVMValueRef fast = lanes > 1 && e->bf16_native ? e->bf16_native(e, v, lanes, &odd) : NULL;
  if (!fast) return NULL;
  if (e->bf16_odd) { /* the caller tests once for all of them */
    *e->bf16_odd = *e->bf16_odd ? LLVMBuildOr(B, *e->bf16_odd, odd, "bf16.odd.any") : odd;
    return fast;
  }
  LLVMBasicBlockRef from = LLVMGetInsertBlock(B);
  LLVMValueRef fn = LLVMGetBasicBlockParent(from);
  LLVMBasicBlockRef fix = LLVMAppendBasicBlockInContext(e->ctx, fn, "bf16.nan_or_subnormal");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(e->ctx, fn, "bf16.rounded");
  rare_branch(e, odd, fix, join); /* a NaN or a subnormal is rare: the integer rounding goes out of line */
  LLVMPositionBuilderAtEnd(B, fix);
  LLVMValueRef soft = soft_bf16_bits(e, v, lanes);
  LLVMBasicBlockRef fix_end = LLVMGetInsertBlock(B);
  LLVMBuildBr(B, join);
  LLVMPositionBuilderAtEnd(B, join);
  LLVMValueRef phi = LLVMBuildPhi(B, LLVMTypeOf(fast), "bf16.bits");
  LLVMValueRef inc[] = {fast, soft};
  LLVMBasicBlockRef blocks[] = {from, fix_end};
  LLVMAddIncoming(phi, inc, blocks, 2);
  return phi;
}

void cg_emit_value_stored(cg_kctx *c, ir_dtype dt, int lanes, int valid, cg_value_fn fn, void *arg) {
  cg_emitter *e = c->e;
  LLVMValueRef ptr, odd = NULL;
  LLVMValueRef *saved = e->bf16_odd;
  e->bf16_odd = e->bf16_native && !saved ? &odd : NULL;
  LLVMValueRef v = fn(c, arg, &ptr);
  e->bf16_odd = saved;
  if (!odd) {
    cg_store_part_rounded(e, dt, v, ptr, lanes, valid);
    return;
  }
  LLVMBasicBlockRef again = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "bf16.nan_or_subnormal.chain");
  LLVMBasicBlockRef fast = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "bf16.chain.rounded");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->ctx, c->fn, "bf16.chain.stored");
  rare_branch(e, odd, again, fast);
  LLVMPositionBuilderAtEnd(B, fast);
  cg_store_part_rounded(e, dt, v, ptr, lanes, valid);
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, again);
  LLVMValueRef ptr2, v2 = fn(c, arg, &ptr2);
  cg_store_part_rounded(e, dt, v2, ptr2, lanes, valid);
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, done);
}

/* f32 lanes -> bf16 bits */
static LLVMValueRef f32_to_bf16_bits(cg_emitter *e, LLVMValueRef v, int lanes) {
  LLVMValueRef h = native_bf16_bits(e, v, lanes);
  return h ? h : soft_bf16_bits(e, v, lanes);
}

void cg_emit_store(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes) {
  LLVMValueRef v = val;
  switch (dt) {
  case DT_F32: break;
  case DT_F16: v = LLVMBuildFPTrunc(B, val, lanes_of(e->half, lanes), ""); break;
  case DT_BF16: v = f32_to_bf16_bits(e, val, lanes); break;
  /* integers and booleans: from i64 lanes (i1: 0 or 1 already, cg_emit_round_to) */
  case DT_I32: v = LLVMBuildTrunc(B, val, lanes_of(e->i32, lanes), ""); break;
  case DT_I64: break;
  case DT_I1: v = LLVMBuildTrunc(B, val, lanes_of(LLVMInt8TypeInContext(e->ctx), lanes), ""); break;
  case DT_COUNT: CASTOR_UNREACHABLE();
  }
  LLVMValueRef st = LLVMBuildStore(B, v, ptr);
  LLVMSetAlignment(st, (unsigned)dtype_size(dt));
}

/* bf16 lanes of a rounded value are the upper halves of their f32 bits
 * (a canonical NaN's too), so the store is a shift and a truncation, not
 * f32_to_bf16_bits again: a bf16 epilogue's or pooling's store took a
 * third of its vector ops re-rounding. */
/* The bf16 bits (i16 lanes) whose widening val is, bitcast(shl(zext(h),
 * 16)) as cg_emit_round_to on the instruction and cg_emit_load build it, or
 * a select between such a widening and +0 (relu's, cg_math.c), as i16
 * lanes; else NULL. LLVM folds the store's shift and truncation of a plain
 * widening itself, but not through relu's select: a bf16 conv epilogue
 * ending in relu spent vpsrld + vpmovdw re-extracting the bits it had. */
static LLVMValueRef bf16_bits_of(cg_emitter *e, LLVMValueRef val) {
  if (LLVMIsASelectInst(val) && LLVMIsNull(LLVMGetOperand(val, 2))) {
    LLVMValueRef h = bf16_bits_of(e, LLVMGetOperand(val, 1));
    return h ? LLVMBuildSelect(B, LLVMGetOperand(val, 0), h, LLVMConstNull(LLVMTypeOf(h)), "") : NULL;
  }
  if (!LLVMIsABitCastInst(val)) return NULL;
  LLVMValueRef s = LLVMGetOperand(val, 0);
  if (!LLVMIsAInstruction(s) || LLVMGetInstructionOpcode(s) != LLVMShl) return NULL;
  LLVMValueRef z = LLVMGetOperand(s, 0), k = LLVMGetOperand(s, 1);
  if (!LLVMIsAZExtInst(z) || !LLVMIsConstant(k)) return NULL;
  LLVMValueRef h = LLVMGetOperand(z, 0);
  LLVMTypeRef ht = LLVMTypeOf(h);
  if (LLVMGetTypeKind(ht) == LLVMVectorTypeKind) {
    ht = LLVMGetElementType(ht);
    k = LLVMGetAggregateElement(k, 0);
  }
  if (!k || !LLVMIsAConstantInt(k) || LLVMConstIntGetZExtValue(k) != 16 || LLVMGetTypeKind(ht) != LLVMIntegerTypeKind ||
      LLVMGetIntTypeWidth(ht) != 16)
    return NULL;
  return h;
}

void cg_emit_store_rounded(cg_emitter *e, ir_dtype dt, LLVMValueRef val, LLVMValueRef ptr, int lanes) {
  if (dt != DT_BF16) {
    cg_emit_store(e, dt, val, ptr, lanes);
    return;
  }
  LLVMValueRef bits = bf16_bits_of(e, val);
  if (bits) {
    LLVMSetAlignment(LLVMBuildStore(B, bits, ptr), 2);
    return;
  }
  LLVMTypeRef it = lanes_of(e->i32, lanes), ht = lanes_of(LLVMInt16TypeInContext(e->ctx), lanes);
  LLVMValueRef hi = LLVMBuildLShr(B, LLVMBuildBitCast(B, val, it, ""), cg_const(e, it, 16), "");
  LLVMSetAlignment(LLVMBuildStore(B, LLVMBuildTrunc(B, hi, ht, ""), ptr), 2);
}

LLVMValueRef cg_emit_round_to(cg_emitter *e, LLVMValueRef x, ir_dtype to, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  int lanes = LLVMGetTypeKind(ty) == LLVMVectorTypeKind ? (int)LLVMGetVectorSize(ty) : 1;
  switch (to) {
  case DT_F32:
    return x;
  case DT_F16:
    return LLVMBuildFPExt(B, LLVMBuildFPTrunc(B, x, lanes_of(e->half, lanes), ""), ty, name);
  case DT_BF16: {
    LLVMValueRef h = native_bf16_bits(e, x, lanes);
    if (!h) return LLVMBuildBitCast(B, bf16_round_bits(e, x, lanes), ty, name);
    LLVMTypeRef it = lanes_of(e->i32, lanes);
    return LLVMBuildBitCast(B, LLVMBuildShl(B, LLVMBuildZExt(B, h, it, ""), cg_const(e, it, 16), ""), ty, name);
  }
  /* integers and booleans, in i64 lanes: i32 wraps, i1 is x != 0 */
  case DT_I32: return LLVMBuildSExt(B, LLVMBuildTrunc(B, x, lanes_of(e->i32, lanes), ""), ty, name);
  case DT_I64: return x;
  case DT_I1: return LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntNE, x, LLVMConstNull(ty), ""), ty, name);
  case DT_COUNT:
    break;
  }
  CASTOR_UNREACHABLE();
  return NULL;
}

/* ---- general tensors: log and pow ---- */

/* log(x) (Cephes logf): x = m 2^k with m in [sqrt(1/2), sqrt 2), log(m)
 * by a degree-9 polynomial in m - 1, plus k ln 2 in two parts; relative
 * error about 1 ulp. Subnormals are scaled by 2^23 first; log(0) = -inf,
 * log(x < 0) = NaN, log(inf) = inf, NaN stays NaN. */
LLVMValueRef cg_emit_log(cg_emitter *e, LLVMValueRef x, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(x), ity = lanes_like(e, ty, e->i32);
  LLVMValueRef tiny = LLVMBuildFCmp(B, LLVMRealOLT, x, C(1.17549435e-38), "");
  LLVMValueRef xs = LLVMBuildSelect(B, tiny, LLVMBuildFMul(B, x, C(8388608.0), ""), x, "");
  LLVMValueRef bits = LLVMBuildBitCast(B, xs, ity, "");
  LLVMValueRef k = LLVMBuildSub(B, LLVMBuildLShr(B, bits, cg_const(e, ity, 23), ""), cg_const(e, ity, 126), "");
  LLVMValueRef mbits = LLVMBuildOr(B, LLVMBuildAnd(B, bits, cg_const(e, ity, 0x007fffff), ""),
                                   cg_const(e, ity, 0x3f000000), "");
  LLVMValueRef m = LLVMBuildBitCast(B, mbits, ty, ""); /* in [0.5, 1) */
  LLVMValueRef kf = LLVMBuildSIToFP(B, k, ty, "");
  kf = LLVMBuildSelect(B, tiny, LLVMBuildFSub(B, kf, C(23.0), ""), kf, "");
  LLVMValueRef low = LLVMBuildFCmp(B, LLVMRealOLT, m, C(0.707106781186547524), "");
  kf = LLVMBuildSelect(B, low, LLVMBuildFSub(B, kf, C(1.0), ""), kf, "");
  LLVMValueRef f = LLVMBuildSelect(B, low, LLVMBuildFSub(B, LLVMBuildFAdd(B, m, m, ""), C(1.0), ""),
                                   LLVMBuildFSub(B, m, C(1.0), ""), "");
  static const double p[] = {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1,
                             -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1};
  LLVMValueRef z = LLVMBuildFMul(B, f, f, "");
  LLVMValueRef y = LLVMBuildFMul(B, LLVMBuildFMul(B, f, z, ""), poly(e, f, p, 9), "");
  y = LLVMBuildFAdd(B, y, LLVMBuildFMul(B, kf, C(-2.12194440e-4), ""), "");
  y = LLVMBuildFSub(B, y, LLVMBuildFMul(B, z, C(0.5), ""), "");
  y = LLVMBuildFAdd(B, LLVMBuildFAdd(B, f, y, ""), LLVMBuildFMul(B, kf, C(0.693359375), ""), "");
  y = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, x, C(0.0), ""), C(-__builtin_inf()), y, "");
  y = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, x, C(__builtin_inf()), ""), x, y, "");
  y = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, x, C(0.0), ""), C(__builtin_nan("")), y, "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, y, name);
}

/* pow(a, b) = exp(b log |a|), relative error about (|b log a| + 2) ulp,
 * with C's special cases: b = 0 or a = 1 give 1 (NaN included); a < 0
 * gives NaN for a non-integer b, else the sign of a^b by b's parity;
 * a = 0 gives 0 for b > 0 and inf for b < 0 (through log 0 = -inf). */
LLVMValueRef cg_emit_pow(cg_emitter *e, LLVMValueRef a, LLVMValueRef b, const char *name) {
  LLVMTypeRef ty = LLVMTypeOf(a), ity = lanes_like(e, ty, e->i32);
  LLVMValueRef mag = cg_emit_exp(e, LLVMBuildFMul(B, b, cg_emit_log(e, fabs_(e, a), ""), ""), "");
  LLVMValueRef big = LLVMBuildFCmp(B, LLVMRealOGE, fabs_(e, b), C(16777216.0), ""); /* an even integer */
  LLVMValueRef bi = LLVMBuildFPToSI(B, LLVMBuildSelect(B, big, C(0.0), b, ""), ity, "");
  LLVMValueRef is_int = LLVMBuildOr(B, big, LLVMBuildFCmp(B, LLVMRealOEQ, LLVMBuildSIToFP(B, bi, ty, ""), b, ""), "");
  LLVMValueRef odd = LLVMBuildICmp(B, LLVMIntNE, LLVMBuildAnd(B, bi, cg_const(e, ity, 1), ""), cg_const(e, ity, 0), "");
  LLVMValueRef neg = LLVMBuildFCmp(B, LLVMRealOLT, a, C(0.0), "");
  LLVMValueRef y = LLVMBuildSelect(B, LLVMBuildAnd(B, neg, odd, ""), LLVMBuildFNeg(B, mag, ""), mag, "");
  y = LLVMBuildSelect(B, LLVMBuildAnd(B, neg, LLVMBuildNot(B, is_int, ""), ""), C(__builtin_nan("")), y, "");
  LLVMValueRef one = LLVMBuildOr(B, LLVMBuildFCmp(B, LLVMRealOEQ, b, C(0.0), ""),
                                 LLVMBuildFCmp(B, LLVMRealOEQ, a, C(1.0), ""), "");
  return LLVMBuildSelect(B, one, C(1.0), y, name);
}
