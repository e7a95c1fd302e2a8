/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxemu_alu.c: the emulator's scalar instructions, one lane at a time:
 * integer arithmetic, logic and bit fields; float arithmetic with PTX's
 * rounding, .ftz and .sat; the approximate functions; comparisons; cvt.
 *
 * Float semantics: f32 arithmetic is C's float arithmetic (IEEE binary32,
 * and f64 C's double: the .rn forms only),
 * round to nearest even; the build passes -ffp-contract=off, so nothing
 * is fused that PTX did not fuse), fma.rn is fmaf; 16-bit arithmetic is
 * done exactly in double and rounded once. Approximate functions return
 * the correctly rounded f32 value moved away from zero by as many whole
 * ulps as keep it within the error the ISA allows (2 ulp for ex2/lg2/
 * rsqrt/sqrt .approx and div.full/.approx: one ulp; 1 ulp for rcp.approx:
 * none), or by 0.9 of a relative bound (tanh.approx 2^-10.987; sin/cos
 * 2^-20), so a kernel that needs more accuracy than the ISA promises
 * fails here too. castor's kernels use none of them today. Integer division by zero is an error (on a GPU
 * its result is unspecified).
 */
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "ptxemu_internal.h"

static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;
static void f16_init(void) {
  for (uint32_t h = 0; h < 65536; h++) f16_table[h] = pe_f16_to_f32((uint16_t)h);
}

/* A float operand of type t as a double (exact). */
double pe_fval(uint64_t v, pe_ty t) {
  switch (t) {
  case T_F16: return f16_table[v & 0xffff];
  case T_BF16: return pe_bf16_to_f32((uint16_t)v);
  case T_F32: return f32_of(v);
  case T_F64: return f64_of(v);
  default: return 0;
  }
}

static double ftz32(double x) { return (x != 0 && fabs(x) < 0x1p-126) ? copysign(0.0, x) : x; }

/* A double rounded to float type t (RN), as bits. */
static uint64_t fbits(double d, pe_ty t) {
  switch (t) {
  case T_F16: return pe_f64_to_f16_rn(d);
  case T_BF16: return pe_f32_to_bf16_rn((float)d); /* callers pass values exact in f32 or rounded once already */
  case T_F32: return bits_f32((float)d);
  case T_F64: return bits_f64(d);
  default: return 0;
  }
}

static uint64_t int_result(uint64_t v, pe_ty t) { return zext(v, t); }

const char *pe_alu_int(const pe_insn *in, const uint64_t *x, uint64_t *out) {
  pe_ty t = (pe_ty)in->ty;
  int bytes = pe_ty_bytes(t), bits = bytes * 8;
  bool sg = is_signed(t);
  uint64_t a = x[1], b = in->n_ops > 2 ? x[2] : 0;
  int64_t sa = sext(a, t), sb = sext(b, t);
  uint64_t ua = zext(a, t), ub = zext(b, t);
  switch ((pe_op)in->op) {
  case OP_ADD:
    if (in->sat) {
      int64_t r = sa + sb;
      *out = int_result((uint64_t)(r > INT32_MAX ? INT32_MAX : r < INT32_MIN ? INT32_MIN : r), t);
    } else *out = int_result(ua + ub, t);
    return NULL;
  case OP_SUB:
    if (in->sat) {
      int64_t r = sa - sb;
      *out = int_result((uint64_t)(r > INT32_MAX ? INT32_MAX : r < INT32_MIN ? INT32_MIN : r), t);
    } else *out = int_result(ua - ub, t);
    return NULL;
  case OP_MUL:
  case OP_MAD: {
    uint64_t cc = in->op == OP_MAD ? x[3] : 0;
    if (in->mul == M_LO) *out = int_result(ua * ub + cc, t);
    else if (in->mul == M_WIDE) {
      uint64_t r = sg ? (uint64_t)(sa * sb) : ua * ub;
      *out = int_result(r + cc, bits == 32 ? T_B64 : T_B32);
    } else { /* hi */
      __extension__ typedef __int128 i128;
      __extension__ typedef unsigned __int128 u128;
      uint64_t hi;
      if (bits == 64) hi = sg ? (uint64_t)(((i128)sa * (i128)sb) >> 64) : (uint64_t)(((u128)ua * (u128)ub) >> 64);
      else hi = sg ? (uint64_t)((sa * sb) >> bits) : (ua * ub) >> bits;
      *out = int_result(hi + cc, t);
    }
    return NULL;
  }
  case OP_DIV:
  case OP_REM:
    if (ub == 0) return "integer division by zero";
    if (sg) {
      if (sb == -1) *out = int_result(in->op == OP_DIV ? (uint64_t)0 - (uint64_t)sa : 0, t);
      else *out = int_result((uint64_t)(in->op == OP_DIV ? sa / sb : sa % sb), t);
    } else *out = int_result(in->op == OP_DIV ? ua / ub : ua % ub, t);
    return NULL;
  case OP_MIN: *out = int_result(sg ? (uint64_t)(sa < sb ? sa : sb) : (ua < ub ? ua : ub), t); return NULL;
  case OP_MAX: *out = int_result(sg ? (uint64_t)(sa > sb ? sa : sb) : (ua > ub ? ua : ub), t); return NULL;
  case OP_NEG: *out = int_result((uint64_t)0 - ua, t); return NULL;
  case OP_ABS: *out = int_result(sa < 0 ? (uint64_t)0 - (uint64_t)sa : (uint64_t)sa, t); return NULL;
  case OP_AND: *out = t == T_PRED ? ((a & b) & 1) : int_result(a & b, t); return NULL;
  case OP_OR: *out = t == T_PRED ? ((a | b) & 1) : int_result(a | b, t); return NULL;
  case OP_XOR: *out = t == T_PRED ? ((a ^ b) & 1) : int_result(a ^ b, t); return NULL;
  case OP_NOT: *out = t == T_PRED ? (~a & 1) : int_result(~a, t); return NULL;
  case OP_SHL: {
    uint64_t s = zext(b, T_U32);
    *out = s >= (uint64_t)bits ? 0 : int_result(ua << s, t);
    return NULL;
  }
  case OP_SHR: {
    uint64_t s = zext(b, T_U32);
    if (sg) *out = int_result((uint64_t)(s >= (uint64_t)bits ? (sa < 0 ? -1 : 0) : sa >> s), t);
    else *out = s >= (uint64_t)bits ? 0 : int_result(ua >> s, t);
    return NULL;
  }
  case OP_BFE: {
    unsigned pos = (unsigned)(b & 0xff), len = (unsigned)(x[3] & 0xff);
    unsigned sbit = 0;
    if (sg && len > 0) {
      unsigned top = pos + len - 1 < (unsigned)bits - 1 ? pos + len - 1 : (unsigned)bits - 1;
      sbit = (unsigned)((ua >> top) & 1);
    }
    uint64_t r = 0;
    for (unsigned i = 0; i < (unsigned)bits; i++) {
      unsigned bit = (i < len && pos + i < (unsigned)bits) ? (unsigned)((ua >> (pos + i)) & 1) : sbit;
      r |= (uint64_t)bit << i;
    }
    *out = int_result(r, t);
    return NULL;
  }
  default: break;
  }
  return "internal: not an integer instruction";
}

/* The exact value moved away from zero by most of the allowed error:
 * rel (relative) or ulps (units in the last place of the f32 result);
 * the f32 rounding keeps the total within the bound. */
static double approx(double exact, double rel, double ulps) {
  if (!isfinite(exact) || exact == 0) return exact;
  if (rel > 0) return (double)(float)(exact * (1 + 0.9 * rel));
  float r = (float)exact;
  for (int k = 0; k < (int)(ulps - 0.5); k++) r = nextafterf(r, exact > 0 ? INFINITY : -INFINITY);
  return r;
}

const char *pe_alu_float(const pe_insn *in, const uint64_t *x, uint64_t *out) {
  pe_ty t = (pe_ty)in->ty;
  double a = pe_fval(x[1], t), b = in->n_ops > 2 ? pe_fval(x[2], t) : 0, r = 0;
  bool f32 = t == T_F32;
  if (in->ftz && f32) a = ftz32(a), b = ftz32(b);
  float fa = (float)a, fb = (float)b;
  switch ((pe_op)in->op) {
  case OP_ADD: r = f32 ? (double)(fa + fb) : a + b; break;
  case OP_SUB: r = f32 ? (double)(fa - fb) : a - b; break;
  case OP_MUL: r = f32 ? (double)(fa * fb) : a * b; break;
  case OP_FMA:
  case OP_MAD: {
    double cc = pe_fval(x[3], t);
    if (in->ftz && f32) cc = ftz32(cc);
    r = f32 ? (double)fmaf(fa, fb, (float)cc) : fma(a, b, cc);
    break;
  }
  case OP_DIV:
    if (t == T_F64) r = a / b; /* div.rn.f64 (the parser takes only .rn for f64) */
    else if (in->approx) r = approx((double)fa / (double)fb, 0, 2);
    else if (in->rnd == R_NONE) r = approx((double)fa / (double)fb, 0, 2); /* div.full: 2 ulp */
    else r = (double)(fa / fb);
    break;
  case OP_MIN: r = isnan(a) ? b : isnan(b) ? a : (a < b || (a == b && signbit(a))) ? a : b; break;
  case OP_MAX: r = isnan(a) ? b : isnan(b) ? a : (a > b || (a == b && !signbit(a))) ? a : b; break;
  case OP_NEG: *out = x[1] ^ (t == T_F64 ? UINT64_C(0x8000000000000000) : t == T_F32 ? 0x80000000u : 0x8000u); return NULL;
  case OP_ABS: *out = x[1] & (t == T_F64 ? UINT64_C(0x7fffffffffffffff) : t == T_F32 ? 0x7fffffffu : 0x7fffu); return NULL;
  case OP_RCP: r = t == T_F64 ? 1.0 / a : in->approx ? approx(1.0 / a, 0, 1) : (double)(1.0f / fa); break;
  case OP_SQRT: r = t == T_F64 ? sqrt(a) : in->approx ? approx(sqrt(a), 0, 2) : (double)sqrtf(fa); break;
  case OP_RSQRT: r = approx(1.0 / sqrt(a), 0, 2); break;
  case OP_EX2: r = approx(exp2(a), 0, 2); break;
  case OP_LG2: r = approx(log2(a), 0, 2); break;
  case OP_SIN: r = approx(sin(a), 0x1p-20, 0); break;
  case OP_COS: r = approx(cos(a), 0x1p-20, 0); break;
  case OP_TANH: r = approx(tanh(a), 4.9e-4, 0) /* 2^-10.987 */; break;
  default: return "internal: not a float instruction";
  }
  if (in->sat) r = isnan(r) ? 0 : r < 0 ? 0 : r > 1 ? 1 : r;
  if (in->ftz && f32) r = ftz32(r);
  *out = fbits(r, t);
  return NULL;
}

bool pe_alu_cmp(pe_cmp op, double a, double b, int64_t sa, int64_t sb, uint64_t ua, uint64_t ub, bool fl, bool sg) {
  if (fl) {
    bool un = isnan(a) || isnan(b);
    switch (op) {
    case C_EQ: return !un && a == b;
    case C_NE: return !un && a != b;
    case C_LT: return !un && a < b;
    case C_LE: return !un && a <= b;
    case C_GT: return !un && a > b;
    case C_GE: return !un && a >= b;
    case C_EQU: return un || a == b;
    case C_NEU: return un || a != b;
    case C_LTU: return un || a < b;
    case C_LEU: return un || a <= b;
    case C_GTU: return un || a > b;
    case C_GEU: return un || a >= b;
    case C_NUM: return !un;
    case C_NAN: return un;
    default: return false;
    }
  }
  switch (op) {
  case C_EQ: return ua == ub;
  case C_NE: return ua != ub;
  case C_LT: return sg ? sa < sb : ua < ub;
  case C_LE: return sg ? sa <= sb : ua <= ub;
  case C_GT: return sg ? sa > sb : ua > ub;
  case C_GE: return sg ? sa >= sb : ua >= ub;
  case C_LO: return ua < ub;
  case C_LS: return ua <= ub;
  case C_HI: return ua > ub;
  case C_HS: return ua >= ub;
  default: return false;
  }
}

const char *pe_alu_cvt(const pe_insn *in, const uint64_t *xs, uint64_t *out) {
  pe_ty d = (pe_ty)in->ty, s = (pe_ty)in->ty2;
  uint64_t v = xs[1];
  if (!is_float(d) && !is_float(s)) { /* extend by the source type, truncate to the destination */
    uint64_t x = is_signed(s) ? (uint64_t)sext(v, s) : zext(v, s);
    if (in->sat) {
      int64_t lo = is_signed(d) ? -(int64_t)(mask_of(pe_ty_bytes(d)) >> 1) - 1 : 0;
      uint64_t hi = is_signed(d) ? mask_of(pe_ty_bytes(d)) >> 1 : mask_of(pe_ty_bytes(d));
      if (is_signed(s) && (int64_t)x < lo) x = (uint64_t)lo;
      else if (is_signed(s) ? ((int64_t)x >= 0 && (uint64_t)x > hi) : x > hi) x = hi;
    }
    *out = zext(x, d);
    return NULL;
  }
  if (is_float(s) && !is_float(d)) { /* float -> int: round as asked, saturate, NaN -> 0 */
    double x = pe_fval(v, s);
    if (in->ftz) x = ftz32(x);
    switch ((pe_rnd)in->rnd) {
    case R_RNI: x = nearbyint(x); break;
    case R_RZI: x = trunc(x); break;
    case R_RMI: x = floor(x); break;
    case R_RPI: x = ceil(x); break;
    default: return "internal: rounding";
    }
    int bytes = pe_ty_bytes(d);
    if (isnan(x)) x = 0;
    if (is_signed(d)) {
      double lo = -ldexp(1.0, bytes * 8 - 1), hi = ldexp(1.0, bytes * 8 - 1) - 1;
      int64_t r = x <= lo ? (int64_t)lo : x >= hi ? (bytes == 8 ? INT64_MAX : (int64_t)hi) : (int64_t)x;
      *out = zext((uint64_t)r, d);
    } else {
      double hi = ldexp(1.0, bytes * 8) - 1;
      uint64_t r = x <= 0 ? 0 : x >= hi ? mask_of(bytes) : (uint64_t)x;
      *out = r;
    }
    return NULL;
  }
  /* to a float */
  int mode = in->rnd == R_RZ ? FE_TOWARDZERO : in->rnd == R_RM ? FE_DOWNWARD : in->rnd == R_RP ? FE_UPWARD : FE_TONEAREST;
  if ((d == T_F16 || d == T_BF16) && mode != FE_TONEAREST)
    return "only .rn conversions to 16-bit floats are implemented";
  double x;
  volatile float f;
  if (!is_float(s)) {
    if (d == T_F32) {
      fesetround(mode);
      f = is_signed(s) ? (float)sext(v, s) : (float)zext(v, s);
      fesetround(FE_TONEAREST);
      *out = bits_f32(f);
      return NULL;
    }
    x = is_signed(s) ? (double)sext(v, s) : (double)zext(v, s); /* exact for <= 32-bit sources */
  } else {
    x = pe_fval(v, s);
  }
  if (in->ftz && s == T_F32) x = ftz32(x);
  if (d == T_F32) {
    fesetround(mode);
    f = (float)x;
    fesetround(FE_TONEAREST);
    x = f;
    if (in->ftz) x = ftz32(x);
  }
  if (in->sat) x = isnan(x) ? 0 : x < 0 ? 0 : x > 1 ? 1 : x;
  if (d == T_BF16) *out = pe_f32_to_bf16_rn((float)x); /* from f32 (or narrower): x is an f32 value */
  else if (d == T_F16) *out = pe_f64_to_f16_rn(x);
  else *out = fbits(x, d);
  return NULL;
}

void pe_alu_init(void) { pthread_once(&f16_once, f16_init); }
