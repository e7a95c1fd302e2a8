/* SPDX-License-Identifier: Apache-2.0 */
/*
 * half.h: bit-exact float16 / bfloat16 <-> float32 conversions on the host.
 * Narrowing rounds to nearest, ties to even and produces subnormals and
 * infinities as IEEE 754 requires, bit for bit as NumPy's float16 and
 * ml_dtypes' bfloat16 do. NaNs stay NaN with their sign: f16 keeps the top
 * 10 payload bits and sets the quiet bit (as F16C's vcvtps2ph does; NumPy
 * differs only for signaling NaNs, which it keeps signaling); bf16 gives the
 * canonical quiet NaN 0x7fc0 / 0xffc0, as ml_dtypes does.
 */
#ifndef CASTOR_HALF_H
#define CASTOR_HALF_H

#include <stdint.h>

float half_f16_to_f32(uint16_t h);
uint16_t half_f32_to_f16(float f);
float half_bf16_to_f32(uint16_t h);
uint16_t half_f32_to_bf16(float f);
/* Converts n f32 values to bf16 (to_bf16) or f16, bit for bit as the
 * functions above, in one loop the compiler can vectorize (compile-time
 * casts of weights: passes/fold_constants.c), and counts the finite values
 * that become infinite and the non-zero ones (NaNs aside) that become zero
 * or subnormal. */
void half_f32_to_16_n(const float *x, uint16_t *y, int64_t n, int to_bf16, int64_t *out_overflow,
                      int64_t *out_flushed);

#endif
