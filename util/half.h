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

#endif
