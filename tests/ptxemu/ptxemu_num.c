/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxemu_num.c: the emulator's 16-bit float formats, written from IEEE
 * 754 (binary16) and bfloat16's definition (the top half of a binary32),
 * independent of castor's util/half.c so that a shared mistake cannot
 * hide.
 *
 * Rounding to nearest, ties to even, from a double: every f32 value and
 * every exact sum or product of two 16-bit values is a double, so one
 * rounding here is the one rounding PTX's .rn asks for. Subnormals are
 * kept (no .ftz), overflow goes to infinity, and NaN becomes the
 * canonical NaN 0x7fff, as PTX's cvt does.
 */
#include <math.h>
#include <string.h>

#include "ptxemu.h"

/* Rounds |a| (finite, a >= 0) to a float format with `mbits` stored
 * mantissa bits and exponents [emin, emax]; the bits without the sign. */
static uint32_t round_fmt(double a, int mbits, int emin, int emax) {
  int bias = emax;
  if (a == 0) return 0;
  int ex;
  frexp(a, &ex); /* a = f * 2^ex, f in [0.5, 1): a in [2^(ex-1), 2^ex) */
  int e = ex - 1;
  if (e < emin) { /* subnormal: units of 2^(emin - mbits) */
    double q = nearbyint(ldexp(a, mbits - emin)); /* ties to even in the default mode */
    return (uint32_t)q; /* q == 2^mbits is the smallest normal's bits */
  }
  double q = nearbyint(ldexp(a, mbits - e)); /* in [2^mbits, 2^(mbits+1)] */
  if (q >= ldexp(1.0, mbits + 1)) q /= 2, e++;
  if (e > emax) return (uint32_t)((2 * emax + 1) << mbits); /* infinity */
  return (uint32_t)((e + bias) << mbits) | ((uint32_t)q - (1u << mbits));
}

uint16_t pe_f64_to_f16_rn(double d) {
  if (isnan(d)) return 0x7fff;
  uint16_t s = signbit(d) ? 0x8000 : 0;
  double a = fabs(d);
  if (isinf(a)) return s | 0x7c00;
  return (uint16_t)(s | round_fmt(a, 10, -14, 15));
}

uint16_t pe_f32_to_f16_rn(float f) { return pe_f64_to_f16_rn((double)f); }

float pe_f16_to_f32(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) v = ldexp(m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = ldexp(m + 1024, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}

uint16_t pe_f32_to_bf16_rn(float f) {
  double d = (double)f;
  if (isnan(d)) return 0x7fff;
  uint16_t s = signbit(d) ? 0x8000 : 0;
  double a = fabs(d);
  if (isinf(a)) return s | 0x7f80;
  return (uint16_t)(s | round_fmt(a, 7, -126, 127));
}

float pe_bf16_to_f32(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}
