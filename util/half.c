/* SPDX-License-Identifier: Apache-2.0 */
/*
 * half.c: float16 and bfloat16 conversions, bit-exact with NumPy and
 * ml_dtypes (round to nearest even, subnormals, infinities, quiet NaNs).
 */
#include "util/half.h"

#include <string.h>

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float half_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    /* subnormal: value = man * 2^-24, exact in f32 */
    float v = (float)man * 0x1.0p-24f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t half_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t exp = (u >> 23) & 0xff, man = u & 0x7fffff;
  if (exp == 0xff) {
    if (man == 0) return sign | 0x7c00;
    return (uint16_t)(sign | 0x7e00 | (man >> 13)); /* quiet NaN, keep payload top */
  }
  int e = (int)exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; /* overflow to inf */
  if (e <= 0) {
    /* subnormal or zero in f16: shift the full significand with the implicit
     * bit, then round to nearest even on the dropped bits */
    if (e < -10) return sign; /* below half the smallest subnormal */
    uint32_t m = man | 0x800000;
    int shift = 14 - e; /* 13 + (1 - e) */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++; /* carry may reach inf: correct */
  return (uint16_t)(sign | r);
}

float half_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t half_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  /* NaN: ml_dtypes returns the canonical quiet NaN with the sign kept (no
   * payload), unlike float16, where NumPy keeps the top payload bits. */
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)(((u >> 16) & 0x8000) | 0x7fc0);
  uint32_t lsb = (u >> 16) & 1;
  u += 0x7fff + lsb;
  return (uint16_t)(u >> 16);
}

/* bf16 without the function-call boundary: NaN to the canonical quiet
 * NaN with its sign, else round to nearest even (as half_f32_to_bf16). */
static inline uint16_t to_bf16_inline(uint32_t u) {
  uint32_t r = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
  uint32_t nan = ((u >> 16) & 0x8000) | 0x7fc0;
  return (uint16_t)((u & 0x7fffffff) > 0x7f800000 ? nan : r);
}

/* f16, inline for the values that stay normal in f16 (2^-14 <= |x| <
 * 2^16, rounding up to infinity included); the rest as half_f32_to_f16. */
static inline uint16_t to_f16_inline(uint32_t u, float f) {
  uint32_t a = u & 0x7fffffff;
  if (a < 0x38800000 || a >= 0x47800000) return half_f32_to_f16(f);
  uint32_t r = ((a + 0xfff + ((a >> 13) & 1)) >> 13) - (112u << 10);
  return (uint16_t)(((u >> 16) & 0x8000) | r);
}

void half_f32_to_16_n(const float *x, uint16_t *y, int64_t n, int to_bf16, int64_t *out_overflow,
                      int64_t *out_flushed) {
  uint32_t exp_mask = to_bf16 ? 0x7f80 : 0x7c00, man_mask = to_bf16 ? 0x7f : 0x3ff;
  int64_t overflow = 0, flushed = 0, i = 0;
  if (to_bf16) /* blocks of a fixed 16, branch-free: vectorized at -O2 */
    for (; i + 16 <= n; i += 16) {
      uint32_t o = 0, z = 0;
      for (int j = 0; j < 16; j++) {
        uint32_t u = f32_bits(x[i + j]);
        uint16_t h = to_bf16_inline(u);
        y[i + j] = h;
        uint32_t e = h & 0x7f80u;
        o += (e == 0x7f80u) & !(h & 0x7fu) & ((u & 0x7f800000u) != 0x7f800000u);
        z += (e == 0) & ((u & 0x7fffffffu) != 0);
      }
      overflow += o, flushed += z;
    }
  for (; i < n; i++) {
    uint32_t u = f32_bits(x[i]);
    uint16_t h = to_bf16 ? to_bf16_inline(u) : to_f16_inline(u, x[i]);
    y[i] = h;
    uint32_t e = h & exp_mask;
    overflow += e == exp_mask && !(h & man_mask) && (u & 0x7f800000) != 0x7f800000;
    flushed += e == 0 && (u & 0x7fffffff) != 0;
  }
  *out_overflow = overflow;
  *out_flushed = flushed;
}
